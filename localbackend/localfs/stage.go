package localfs

import (
	"context"
	"errors"
	"log/slog"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/localbackend/localquarantine"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// With a quarantine every change the guard allows that destroys a file's content is staged, not only an
// unlink: a rename that replaces an existing file moves the replaced file into the quarantine folder
// first (a rename, under the enforcer's lock like an unlink's), and a truncation (truncate(2),
// ftruncate(2), open with O_TRUNC) copies the content there first (before the lock: see
// quarantine.Prepare) and commits the copy under the lock right before the cut. Nothing that takes
// long runs under the lock: the copy is made before it, the commit is a stat, a record and a rename.

// stagedRecord is the quarantine record of the change of kind op allowed by d, with the caller's
// identity (guard.Enforcer.Staged).
func (n *node) stagedRecord(ctx context.Context, op string, d verdict.Decision) quarantine.Decision {
	return n.enf.Staged(ctx, op, string(d.Reason), d.Message)
}

// stagingErrno is the errno of a change that could not be staged (so it was not made).
func stagingErrno(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return syscall.EIO
}

// replaceStaged renames from onto the existing file to (the act of an allowed replacing rename, under
// the exclusive lock), with the replaced file moved into the quarantine first and the rename then made
// with RENAME_NOREPLACE. Across a crash at any point the replaced file is at to or staged, never both,
// never lost; if the rename fails the replaced file is put back. A folder at to (an empty one, or the
// rename fails) holds no content and is replaced as usual.
func (n *node) replaceStaged(ctx context.Context, from, to string, flags uint32, d verdict.Decision) (bool, syscall.Errno) {
	q := n.root.quarantine
	dfd, base, err := n.root.parent(to)
	if err != nil {
		return false, fs.ToErrno(err)
	}
	defer n.root.release(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			// Gone since the decision: nothing is replaced (and nothing that appears now may be).
			return n.renameEntry(from, to, flags, flags|unix.RENAME_NOREPLACE)
		}
		return false, fs.ToErrno(err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return n.renameEntry(from, to, flags, flags)
	}
	e, err := q.MoveAtStat(dfd, base, to, &st, n.stagedRecord(ctx, quarantine.OpReplace, d))
	if err != nil {
		n.root.log.Error("quarantine: the file a rename would replace could not be staged, so nothing was renamed", "path", to, "from", from, "err", err)
		return false, stagingErrno(err)
	}
	moved, errno := n.renameEntry(from, to, flags, flags|unix.RENAME_NOREPLACE)
	if errno != 0 {
		if _, err := q.Restore(ctx, e.ID); err != nil {
			n.root.log.Error("quarantine: the rename failed and the file it would have replaced cannot be put back; it stays in quarantine", "path", to, "entry", e.ID, "err", err)
		}
	}
	return moved, errno
}

// stageAttempts bounds how often a truncation copies a file that keeps changing meanwhile.
const stageAttempts = 3

// truncStage is a truncation's copy of the old content, prepared before the lock.
type truncStage struct {
	prep    *localquarantine.Prepared
	src     int // the readable descriptor the copy was made from
	changed bool
}

// prepareCut copies the content of the file at key (through the handle f when the change came with
// one) into the quarantine, for a truncation to size. It returns nil when there is nothing to stage:
// no quarantine, or no byte would be cut.
func (n *node) prepareCut(key string, f fs.FileHandle, size int64) (*truncStage, syscall.Errno) {
	q := n.root.quarantine
	if q == nil {
		return nil, 0
	}
	src, err := n.readableFd(key, f)
	if err != nil {
		n.root.log.Error("quarantine: the content a truncation would cut cannot be read to stage it, so nothing was truncated", "path", key, "err", err)
		return nil, stagingErrno(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil || st.Size <= size {
		unix.Close(src)
		return nil, fs.ToErrno(err)
	}
	for attempt := 1; ; attempt++ {
		p, err := q.Prepare(src, key)
		if err == nil {
			return &truncStage{prep: p, src: src}, 0
		}
		if err == localquarantine.ErrChanged && attempt < stageAttempts {
			continue
		}
		unix.Close(src)
		n.root.log.Error("quarantine: the content a truncation would cut could not be staged, so nothing was truncated", "path", key, "err", err)
		if err == localquarantine.ErrChanged {
			return nil, syscall.EBUSY
		}
		return nil, stagingErrno(err)
	}
}

// readableFd opens the file for reading: the handle's own file (through /proc/self/fd: the same
// inode, even if renamed since), else the file at key beneath the root.
func (n *node) readableFd(key string, f fs.FileHandle) (int, error) {
	if pf, ok := f.(fs.FilePassthroughFder); ok && n.root.procFd {
		if fd, ok := pf.PassthroughFd(); ok {
			rfd, err := unix.Open(procFdPath(fd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
			if err != nil {
				return -1, err
			}
			return n.root.checkRegular(rfd)
		}
	}
	return n.root.openRegular(key, unix.O_RDONLY)
}

// commit makes the copy an entry (under the lock, right before the cut). A file written since the
// copy was made is not staged from it: changed is set and the caller starts over.
func (t *truncStage) commit(rec quarantine.Decision) syscall.Errno {
	if t == nil {
		return 0
	}
	if _, err := t.prep.Commit(rec); err != nil {
		if err == localquarantine.ErrChanged {
			t.changed = true
			return syscall.EBUSY
		}
		return stagingErrno(err)
	}
	return 0
}

// done closes the copy's source; cut is whether the truncation happened (else a committed copy is
// dropped again, and an uncommitted one removed).
func (t *truncStage) done(log *slog.Logger, committed, cut bool) {
	if t == nil {
		return
	}
	switch {
	case !committed:
		t.prep.Abort()
	case !cut:
		t.prep.Undo()
	default:
		if err := t.prep.Done(); err != nil {
			log.Error("quarantine: the change happened and its old content is staged, but the entry may be taken for a change that never happened; keep a copy of it by hand", "err", err)
		}
	}
	unix.Close(t.src)
}

// stagedChange runs a content-cutting change of kind op (quarantine.OpTruncate: a truncation to size;
// quarantine.OpAllocate: a fallocate(2) that may destroy the bytes from size on), decided by decide (d
// its decision of the cut), with the old content staged: prepare outside the lock, commit and act under
// it. A file that changed between copy and commit is copied again (stageAttempts times, then EBUSY).
func (n *node) stagedChange(ctx context.Context, key string, f fs.FileHandle, size int64, op string, decide func(act func() syscall.Errno) syscall.Errno, d *verdict.Decision, act func() syscall.Errno) syscall.Errno {
	for attempt := 1; ; attempt++ {
		t, errno := n.prepareCut(key, f, size)
		if errno != 0 {
			return errno
		}
		committed, cut := false, false
		errno = decide(func() syscall.Errno {
			if errno := t.commit(n.stagedRecord(ctx, op, *d)); errno != 0 {
				return errno
			}
			committed = t != nil
			errno := act()
			cut = errno == 0
			return errno
		})
		t.done(n.root.log, committed, cut)
		if t != nil && t.changed && attempt < stageAttempts {
			continue
		}
		if t != nil && t.changed {
			n.root.log.Error("quarantine: the file kept changing while its content was being staged, so it was not changed", "path", key, "change", op)
		}
		return errno
	}
}

// checkResult sets c.Result to a fresh decision and returns it.
func checkResult(c *guard.Check) *verdict.Decision {
	d := new(verdict.Decision)
	c.Result = d
	return d
}
