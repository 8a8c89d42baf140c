package guard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/ckguard/ckguard/refindex/verdict"
)

// The refusal rules a guarded filesystem applies around the index's decision. The index
// (refindex.Index.Decide) holds every rule about what checkpoints reference and what the policy
// protects; the rules here are about the mount itself, so the index cannot know them. All of them are
// in this file:
//
//	rule                  reason                     where it is applied
//	store replaced        store-replaced/store-error StoreChanged, by the local mount before asking
//	hard-linked file      hard-linked/store-error    HardLinked, by the local mount before asking
//	index panicked        store-error                panicRefusal, in Enforcer.ask
//	metadata commit       metadata-commit (allow)    overrule: a grace refusal of a commit's source
//	index update pending  index-pending              overrule: an allow while an update is pending
//	interrupted caller    (errno EINTR)              refusalErrno, in Enforcer.record1
//	unrecorded allow      (errno EIO)                Enforcer.record1: no audit record, no change
//
// A mount's own refusal (StoreChanged, HardLinked) goes into Check.Decided: it is recorded like the
// index's, and the index is not asked.

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
