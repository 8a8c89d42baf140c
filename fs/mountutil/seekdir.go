package mountutil

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// SkipEntries is the Seekdir of a listing that is no snapshot: the listing just restarted, it reads
// and drops entries through next until *pos (the entries next has returned) reaches off, or the
// listing ends. A directory that changed meanwhile may repeat or miss entries, as on NFS.
func SkipEntries(ctx context.Context, off uint64, pos *uint64, next func(context.Context) (*fuse.DirEntry, syscall.Errno)) syscall.Errno {
	for *pos < off {
		e, errno := next(ctx)
		if errno != 0 {
			return errno
		}
		if e == nil {
			break
		}
	}
	return 0
}
