package localfs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/verdict"
)

var _ fs.NodeAllocater = (*node)(nil)

// preallocModes are the fallocate(2) modes that only reserve space (or unshare it) and leave every byte of
// the file as it was.
const preallocModes = unix.FALLOC_FL_KEEP_SIZE | unix.FALLOC_FL_UNSHARE_RANGE

// rangeModes are the fallocate(2) modes that destroy or move only bytes at or after the range's offset
// (a range starting at or after the end of the file destroys nothing).
const rangeModes = unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_COLLAPSE_RANGE | unix.FALLOC_FL_INSERT_RANGE

// Allocate passes plain preallocation through; every other mode (PUNCH_HOLE, ZERO_RANGE, COLLAPSE_RANGE,
// INSERT_RANGE and any mode this list does not know) destroys or moves data already in the file, so it is
// decided like a truncation: a write-open was decided as OpWrite, which does not cover hole-punching an
// in-flight or referenced file (`fallocate -p` through the mount). With a quarantine the old content is
// staged first, exactly as a truncation's (stagedChange: copied before the enforcer's lock, committed
// under it only if the file is unchanged), as an entry of kind quarantine.OpAllocate.
func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	fa, ok := f.(fs.FileAllocater)
	if !ok {
		return syscall.ENOTSUP
	}
	if mode&^preallocModes == 0 {
		return fa.Allocate(ctx, off, size, mode)
	}
	key := n.key()
	c := n.contentCheck(verdict.OpTruncate, key)
	act := func() syscall.Errno { return fa.Allocate(ctx, off, size, mode) }
	if n.root.quarantine == nil {
		return n.enf.Change(ctx, []guard.Check{c}, act)
	}
	// The bytes at or after keep may be destroyed; an unknown mode may destroy any of them.
	var keep int64
	if mode&^(preallocModes|rangeModes) == 0 && off <= uint64(1<<63-1) {
		keep = int64(off)
	}
	d := checkResult(&c)
	decide := func(act func() syscall.Errno) syscall.Errno { return n.enf.Change(ctx, []guard.Check{c}, act) }
	return n.stagedChange(ctx, key, f, keep, quarantine.OpAllocate, decide, d, act)
}
