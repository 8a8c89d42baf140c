package localfs

import (
	"context"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// removeFile is the act of an allowed unlink of name in the folder dirfd (store key key): with a
// quarantine, the object moves there as an entry (the decision d copied in; st, when not nil, the stat
// of name through dirfd the decision judged, under the same lock); without, it is unlinked.
func (n *node) removeFile(ctx context.Context, dirfd int, name, key string, st *unix.Stat_t, d verdict.Decision) error {
	q := n.root.quarantine
	if q == nil {
		return unix.Unlinkat(dirfd, name, 0)
	}
	_, err := q.MoveAtStat(dirfd, name, key, st, n.stagedRecord(ctx, quarantine.OpUnlink, d))
	if err != nil {
		n.root.log.Error("quarantine: the allowed deletion could not be staged, so nothing was deleted", "path", key, "err", err)
		if _, ok := err.(syscall.Errno); !ok {
			return syscall.EIO
		}
	}
	return err
}
