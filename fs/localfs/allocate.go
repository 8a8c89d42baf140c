package localfs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex/verdict"
)

var _ fs.NodeAllocater = (*node)(nil)

// preallocModes are the fallocate(2) modes that only reserve space (or unshare it) and leave every byte of
// the file as it was.
const preallocModes = unix.FALLOC_FL_KEEP_SIZE | unix.FALLOC_FL_UNSHARE_RANGE

// Allocate passes plain preallocation through; every other mode (PUNCH_HOLE, ZERO_RANGE, COLLAPSE_RANGE,
// INSERT_RANGE and any mode this list does not know) destroys or moves data already in the file, so it is
// decided like a truncation: a write-open was decided as OpWrite, which does not cover hole-punching an
// in-flight or referenced file (`fallocate -p` through the mount).
func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	fa, ok := f.(fs.FileAllocater)
	if !ok {
		return syscall.ENOTSUP
	}
	if mode&^preallocModes == 0 {
		return fa.Allocate(ctx, off, size, mode)
	}
	return n.enf.Change(ctx, []guard.Check{n.contentCheck(verdict.OpTruncate, n.key())}, func() syscall.Errno {
		return fa.Allocate(ctx, off, size, mode)
	})
}
