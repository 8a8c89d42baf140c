package guard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// The refusal rules a guarded filesystem applies around the index's decision. The index
// (refindex.Index.Decide) holds every rule about what checkpoints reference and what the policy
// protects; the rules here are about the mount itself, so the index cannot know them. All of them are
// in this file, but the guard attributes' (xattr.go):
//
//	rule                  reason                     where it is applied
//	reserved folder       reserved-folder            RefuseReserved, by every mount first (listings: Reserved)
//	store replaced        store-replaced/store-error StoreChanged, by the local mount before asking
//	hard-linked file      hard-linked/store-error    HardLinked, by the local mount before asking
//	index panicked        store-error                panicRefusal, in Enforcer.ask
//	metadata commit       metadata-commit (allow)    overrule: a grace refusal of a commit's source
//	index update pending  index-pending              overrule: an allow while an update is pending
//	interrupted caller    (errno EINTR)              refusalErrno, in Enforcer.record1
//	unrecorded allow      (errno EIO)                Enforcer.record1: no audit record, no change
//	guard attributes      (errno EPERM, unaudited)   XattrWriteErrno, by every mount's setxattr/removexattr
//
// A mount's own refusal (StoreChanged, HardLinked) goes into Check.Decided: it is recorded like the
// index's, and the index is not asked. The reserved-folder rule is not a decision of the index at all
// (it depends on the key alone): RefuseReserved audits and counts it itself, without the lock.

// ReasonReservedFolder refuses a request naming one of ckguard's own folders at the store root (the
// quarantine folder store.QuarantineDir, the shared state area store.SharedDir) or anything below them.
// Those folders are the daemon's: no user of a mount, root included, sees them, reaches into them or
// makes a name there, whether or not this mount stages deletions or shares state, so nobody can plant
// an entry a restore would put back, read or purge what others deleted, or forge the pins and leases
// the mounts of a store share. The daemon works in them beside the mount, never through it.
const ReasonReservedFolder verdict.Reason = "reserved-folder"

// Reserved reports whether key is one of ckguard's own folders at the store root or lies below one. A
// mount leaves such a name out of its listings (not a refusal: nothing was asked, and nothing is
// audited) and never reaches such a key through the store on a user's behalf; a request naming one is
// refused with RefuseReserved.
func Reserved(key string) bool { return store.InQuarantine(key) }

// ReservedName reports whether name, in the folder with key dir ("" for the root), is one of ckguard's
// own folders (Reserved of the child's key).
func ReservedName(dir, name string) bool { return dir == "" && store.ReservedName(name) }

// Request names a mount's request for the reserved-folder rule (the audit record's op). It is not an
// index decision (verdict.Op): lookups and creations are never asked of the index.
type Request string

// The requests the reserved-folder rule answers. Those that find a name answer ENOENT (the folder does
// not exist for the mount's users); those that make or move a name answer EPERM.
const (
	RequestLookup  Request = "lookup"
	RequestUnlink  Request = "unlink"
	RequestRmdir   Request = "rmdir"
	RequestCreate  Request = "create"
	RequestMkdir   Request = "mkdir"
	RequestMknod   Request = "mknod"
	RequestSymlink Request = "symlink"
	RequestLink    Request = "link"
	RequestRename  Request = "rename"
)

// errno is the answer of the reserved-folder rule to r.
func (r Request) errno() syscall.Errno {
	switch r {
	case RequestLookup, RequestUnlink, RequestRmdir:
		return syscall.ENOENT
	}
	return syscall.EPERM
}

// RefuseReserved applies the reserved-folder rule to a request of a mount's user on key (and to, a
// rename's target; "" for none): 0 when neither is Reserved; otherwise the request is refused with
// ENOENT or EPERM (Request), counted and audited with ReasonReservedFolder before the caller learns it,
// whatever errno refusals of the index get (that one is for decided changes; this request must fail the
// way a missing or forbidden name does). The rule depends on the keys alone: it takes no lock, asks
// nothing and never blocks but on the audit write, as any decision's record.
func (e *Enforcer) RefuseReserved(ctx context.Context, req Request, key, to string) syscall.Errno {
	reserved := key
	if !Reserved(key) {
		if to == "" || !Reserved(to) {
			return 0
		}
		reserved = to
	}
	errno := req.errno()
	e.metrics.Decision(string(req), false, string(ReasonReservedFolder))
	rec := e.record(ctx, string(req), key, to)
	defer e.putRecord(rec)
	rec.Decision = "refuse"
	rec.Reason = string(ReasonReservedFolder)
	rec.Message = "refusing to " + string(req) + " /" + reserved + ": ckguard's own folder at the store root (" +
		store.QuarantineDir + " holds what the mount deleted, " + store.SharedDir + " the state the store's mounts share) is the daemon's: " +
		"no user of the mount sees or changes it; use `ckguard quarantine` to list, restore or purge"
	rec.Errno = ErrnoName(errno)
	if e.audit != nil {
		if err := e.audit.Record(rec); err != nil {
			// A refusal whose record is lost still protects the folder: the request fails all the same.
			e.log.Error("audit log write failed", "op", rec.Op, "path", reserved, "err", err)
		}
	}
	e.log.Info("refused", "op", rec.Op, "path", reserved, "reason", ReasonReservedFolder, "pid", rec.PID, "comm", rec.Comm)
	return errno
}

// ReasonStoreReplaced: the store path names another directory than the one the mount started on
// (replaced, or mounted over), so a decision (by path) and the change (beneath the mount's root
// descriptor) would be about different trees.
const ReasonStoreReplaced verdict.Reason = "store-replaced"

// ReasonHardLinked: the file has more than one name, so the index cannot tell whether another name is
// referenced; writing or truncating through this name could destroy it.
const ReasonHardLinked verdict.Reason = "hard-linked"

// ReasonMetadataCommit records a rename onto _metadata allowed although its source was in grace.
const ReasonMetadataCommit verdict.Reason = "metadata-commit"

// ReasonIndexPending refuses a change while an index update made through the mount is still being read
// and applied: a _metadata closed, renamed or hard-linked into place (or a folder renamed, which may hold
// some). Until the update is in the index, what that _metadata references is unknown, so every change the
// index would otherwise allow is refused; the caller retries in a moment.
const ReasonIndexPending verdict.Reason = "index-pending"

// StoreChanged is the refusal of op on key while the store path does not name the mount's directory:
// err says why (nil: it does, no refusal), replaced whether it names another directory for good (else
// it could not be checked). The index, which reads the store by path (the new directory), is not asked.
func StoreChanged(op verdict.Op, key string, err error, replaced bool) *verdict.Decision {
	if err == nil {
		return nil
	}
	reason := verdict.ReasonStoreError
	if replaced {
		reason = ReasonStoreReplaced
	}
	return &verdict.Decision{Reason: reason, Message: "refusing to " + op.String() + " /" + key + ": " + err.Error()}
}

// HardLinked is the refusal of op (a change of content) on the regular file at key when it has nlink > 1
// names: the index knows files by name, so writing or truncating through an unreferenced name could
// destroy data a checkpoint reads through another name. statErr is the error of the look that counted
// the names: without the count the guard cannot know (fail closed).
func HardLinked(op verdict.Op, key string, nlink uint64, statErr error) *verdict.Decision {
	if statErr != nil {
		return &verdict.Decision{Reason: verdict.ReasonStoreError,
			Message: "refusing to " + op.String() + " /" + key + ": cannot stat it in the store (" + statErr.Error() + ") to count its names (hard links)"}
	}
	if nlink <= 1 {
		return nil
	}
	return &verdict.Decision{Reason: ReasonHardLinked,
		Message: "/" + key + " has " + strconv.FormatUint(nlink, 10) + " names (hard links); the guard cannot tell whether another name is referenced by a checkpoint, so " + op.String() + " through this name is refused; remove the extra links in the store first"}
}

// panicRefusal is the decision when the index panicked while deciding: the guard fails closed.
func panicRefusal(op verdict.Op, p string, r any) verdict.Decision {
	return verdict.Decision{Reason: verdict.ReasonStoreError,
		Message: fmt.Sprintf("the index failed while deciding %s of %s (%v); refusing to be safe", op, p, r)}
}

// overrule applies the mount's rules to the index's decision d of c. pending is whether index updates
// made through the mount were pending when the index was asked (read before asking: one no longer
// pending is in the index).
//
// A metadata commit (Check.MetadataCommit: a writer renaming its in-progress _metadata into place) has
// a source that is young and unreferenced by nature, so the grace rule alone would refuse the commit: a
// grace refusal, and only that, becomes an allow. Anything else the index allows might be what a
// pending _metadata references, so it is refused while one is pending; a commit's source is allowed as
// above all the same (another job's commit must not fail because of this one).
func (e *Enforcer) overrule(c Check, d verdict.Decision, pending bool) verdict.Decision {
	if !d.Allow && c.MetadataCommit && d.Reason == verdict.ReasonGrace {
		return verdict.Decision{Allow: true, Reason: ReasonMetadataCommit,
			Message: "committing " + c.To + " (renamed from a young, unreferenced temporary file): " + d.Message}
	}
	if pending && d.Allow {
		return e.pending.refusal(c.Op, c.Path)
	}
	return d
}

// indexPendingRefusal is the refusal of op on p while the _metadata (or folders) keys are being indexed.
func indexPendingRefusal(op verdict.Op, p string, keys []string) verdict.Decision {
	more := ""
	if len(keys) > 3 {
		more = " and " + strconv.Itoa(len(keys)-3) + " more"
		keys = keys[:3]
	}
	return verdict.Decision{Reason: ReasonIndexPending,
		Message: "refusing to " + op.String() + " /" + p + " for now: the index is still reading " + strings.Join(keys, ", ") + more +
			", just written or moved through the mount; until it is indexed, what it references is unknown; retry in a moment"}
}

// refusalErrno is the errno of a refusal. When the caller was interrupted (the kernel sent
// FUSE_INTERRUPT and go-fuse cancelled ctx) while the index was deciding, the decision may be a
// fail-closed "cannot stat: context canceled"; nothing is done either way, and EINTR tells the caller to
// retry instead of reporting a refusal.
func refusalErrno(ctx context.Context, refuse syscall.Errno) syscall.Errno {
	if ctx.Err() != nil {
		return syscall.EINTR
	}
	return refuse
}
