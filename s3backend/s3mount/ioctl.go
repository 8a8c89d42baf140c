package s3mount

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

var _ = (gofs.NodeIoctler)((*node)(nil))

// Ioctl refuses every ioctl with ENOTTY, as for a file that has none. An object has no flags to read, and
// a write handle's spool file is the daemon's own: an ioctl passed on to it would run with the daemon's
// rights (often root) on the spool directory's filesystem, undecided.
func (n *node) Ioctl(ctx context.Context, f gofs.FileHandle, cmd uint32, arg uint64, input []byte, output []byte) (int32, syscall.Errno) {
	return 0, syscall.ENOTTY
}
