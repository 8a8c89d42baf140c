package guard

import (
	"context"
	"syscall"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// The verbs below are the guarded operations a mount has: each decides its checks, makes the change
// through a function the mount supplies (its mechanics: a syscall through a descriptor, an S3 request),
// writes the audit record and tells the index what changed. A mount's Unlink, Rmdir, Rename, truncating
// Setattr or writable Open is then its own mechanics plus one verb call.

// Target is a change a mount resolved under the enforcer's lock, right before the decision: what it
// saw of the path through what the change then acts through, and the change bound to that.
type Target struct {
	// Observed is what the mount saw of the path (nil: it could not look, and the index looks by path).
	// It takes the place of Check.Observed.
	Observed *store.ObjectInfo
	// Act makes the change; it runs under the lock only when every check is allowed. removed reports
	// whether the path is gone now (not, say, queued for later): only then is the index told.
	Act func() (removed bool, errno syscall.Errno)
	// Release frees what resolving took (a folder descriptor); it runs last, allowed or not, with the
	// lock released.
	Release func()
}

// Remove decides removing c.Path (c.Op is OpUnlink or OpRmdir) and, when allowed, removes it with act
// under the shared lock; once act reports the path removed, the index is told (Deleted). It returns the
// refusal errno or act's.
func (e *Enforcer) Remove(ctx context.Context, c Check, act func() (removed bool, errno syscall.Errno)) syscall.Errno {
	return e.RemoveResolved(ctx, c, func() Target { return Target{Observed: c.Observed, Act: act} })
}

// RemoveResolved is Remove for a mount that resolves what it acts on under the enforcer's lock
// (resolve runs right before the decision, unless c.Decided already answers): the local mount opens the
// parent folder beneath the store root and stats the file through it. No rename through the mount
// (exclusive lock) can then come between the look, the decision and the removal, so the removal cannot
// reach a file under a key nobody decided about, and the decision judges the very file removed.
func (e *Enforcer) RemoveResolved(ctx context.Context, c Check, resolve func() Target) syscall.Errno {
	var t Target
	defer func() {
		if t.Release != nil {
			t.Release()
		}
	}()
	c = e.prepare1(ctx, c)
	e.pending.wait(ctx, e.pendingWait)
	e.mu.RLock()
	defer e.mu.RUnlock()
	if c.Decided == nil {
		t = resolve()
		c.Observed = t.Observed
	}
	return e.mutateLocked(ctx, []Check{c}, func() syscall.Errno {
		if t.Act == nil { // allowed only if decided by the mount itself: nothing was resolved
			t = resolve()
		}
		removed, errno := t.Act()
		if removed {
			e.Deleted(ctx, c.Path)
		}
		return errno
	})
}

// Rename decides a rename: checks[0] is the source (OpRename, To the target), checks[1], when the rename
// replaces an existing target, that target (OpReplace). When allowed, act renames under the exclusive
// lock (a rename may move or create a _metadata, so no decision interleaves). Whenever act reports that
// names may have changed (moved, even when it also fails: an S3 copy whose answer was lost may have
// happened), the index is told (Renamed) and reads both names after the lock is released. It returns
// act's errno, else the refusal errno, else EIO when the index could not record the rename.
func (e *Enforcer) Rename(ctx context.Context, checks []Check, act func() (moved bool, errno syscall.Errno)) syscall.Errno {
	from, to := checks[0].Path, checks[0].To
	return e.MutateExclusive(ctx, checks, func() syscall.Errno {
		moved, errno := act()
		if moved {
			if rerr := e.Renamed(ctx, from, to); errno == 0 {
				errno = rerr
			}
		}
		return errno
	})
}

// Change decides a change of existing files' content or access (OpTruncate, OpWrite, OpChmod: a
// truncate or hole punch, a backdated mtime, a chmod or ACL that takes read access away) and, when every
// check is allowed, makes it with act under the shared lock. A _metadata truncated through the mount is
// then indexed again before Change returns (Written, outside the lock), as if written and closed: the
// index never keeps judging by content the file no longer has.
func (e *Enforcer) Change(ctx context.Context, checks []Check, act func() syscall.Errno) syscall.Errno {
	if errno := e.Mutate(ctx, checks, act); errno != 0 {
		return errno
	}
	for _, c := range checks {
		if c.Op == verdict.OpTruncate && flinklayout.IsMetadata(c.Path) {
			return e.Written(ctx, c.Path)
		}
	}
	return 0
}

// Open decides opening an existing file for writing (c.Op from OpenOp: OpTruncate with O_TRUNC,
// OpWrite otherwise) and, when allowed, opens it with open under the shared lock. The index learns the
// new content when the file is closed (Written from the mount's flush); open must not block (a FIFO).
func (e *Enforcer) Open(ctx context.Context, c Check, open func() syscall.Errno) syscall.Errno {
	return e.Mutate(ctx, []Check{c}, open)
}

// Link decides giving the file c.Path a second name c.To (c.Op OpLink; the local mount's hard link)
// and, when allowed, makes it with act under the lock. A new name _metadata makes a live checkpoint (cp
// -al of a checkpoint folder): the link is then decided under the exclusive lock, like a rename onto a
// _metadata, and the new name is indexed before Link returns, every change the index would allow being
// refused while it is read. If it cannot be indexed, undo takes the name away again while the update is
// still pending, so nothing live is left unknown to the index, and Link returns EIO. It returns the
// refusal errno, act's, or that EIO.
func (e *Enforcer) Link(ctx context.Context, c Check, act func() syscall.Errno, undo func()) syscall.Errno {
	if !flinklayout.IsMetadata(c.To) {
		return e.Mutate(ctx, []Check{c}, act)
	}
	return e.MutateExclusive(ctx, []Check{c}, func() syscall.Errno {
		if errno := act(); errno != 0 {
			return errno
		}
		return e.linked(ctx, c.To, undo)
	})
}
