// Package guard is the contract between a guarded FUSE filesystem (the local loopback in localbackend/localfs, S3
// in s3backend/s3mount, HDFS in hdfsbackend/hdfsmount) and the reference index: the filesystem asks
// before every destructive change and tells the index every change it made, and never parses checkpoint
// metadata itself.
//
// # Verbs
//
// The Enforcer's verbs are the guarded operations: Remove (unlink, rmdir; RemoveResolved when the mount
// resolves what it acts on under the enforcer's lock), Rename, Change (truncate, hole punch, backdated
// mtime, a chmod or ACL that takes read access away), Open (an existing file opened for writing), Link
// (a hard link; a new name _metadata is indexed before it returns) and Errno (a decision whose change
// cannot run under the lock: an S3 upload at close, bound by If-Match to the version decided). Each
// decides its checks (one Check per path involved), runs the mount's act function under the enforcer's
// lock only when every check is allowed, writes the audit record before the caller learns the answer,
// and tells the index what changed (Deleted, Renamed, Written). Mutate and MutateExclusive are what the
// verbs are built on. A mount keeps only its mechanics: how it looks, how it acts. For example:
//
//	func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
//		key := n.childKey(name)
//		o, err := n.store.Stat(ctx, key) // what the change will act on
//		if err != nil {
//			return toErrno(err)
//		}
//		c := guard.Check{Op: verdict.OpUnlink, Path: key, Observed: &o}
//		return n.enf.Remove(ctx, c, func() (bool, syscall.Errno) {
//			err := n.store.Delete(ctx, key) // its removeEntry
//			return err == nil, toErrno(err)
//		})
//	}
//
// Check.Observed is what the mount saw of the path (a stat through the descriptor it then acts through,
// the version its conditional request names): the index judges that object instead of looking again, so
// the decision is about exactly what the change acts on. A mount refusing on its own (see rules.go)
// puts its decision in Check.Decided.
//
// # Where each rule lives
//
// What checkpoints reference and what the policy protects is decided by the index
// (refindex.Index.Decide; its doc lists the rules in order). The rules about the mount itself (ckguard's
// reserved folders at the store root, store replaced, hard links, a metadata commit's young source, index
// updates pending, interrupted callers, an allow that cannot be audited) are in rules.go, with a table. A
// mount asks RefuseReserved first on every request naming a key (lookup, create, mkdir, mknod, symlink,
// link, rename, unlink, rmdir) and leaves Reserved names out of its listings; it tests no key itself. The metadata-commit test of a rename is
// IsMetadataCommit (commit.go); the pending-update mechanism is in pending.go; queued S3 deletions are
// asked again at apply time by Redecide (redecide.go), which applies no further rule.
//
// # The life of an unlink
//
// rm on the local mount: unlink(2) → the kernel's FUSE_UNLINK → go-fuse's rawBridge.Unlink (through
// metrics.InstrumentRawFS, which times it) → localfs node.Unlink → Enforcer.RemoveResolved, which waits
// for pending index updates (pendingUpdates.wait), takes the shared lock and calls the mount's resolver
// (node.unlinkTarget: the parent folder opened beneath the store root, the file stat'ed through it) →
// Enforcer.mutateLocked → Enforcer.ask → Checker.Decide, that is refindex.Index.Decide → Index.decide
// (index freshness, unparseable and unmapped metadata, references, policy, then grace, judging the
// observed stat through store.StatObserved) → back in the enforcer, Enforcer.overrule (rules.go) and
// Enforcer.record1 (metrics, the audit record, the errno) → when allowed, the mount's act (removeEntry:
// unlinkat through the folder descriptor) → Enforcer.Deleted → Index.Deleted (a _metadata retires its
// checkpoint) → the lock is released, the folder descriptor too → the errno goes back through go-fuse to
// the kernel and rm. On S3 the same path runs from s3mount node.Unlink (a HEAD or the attribute cache
// first, Check.Observed the version seen) through Enforcer.Remove, and the act is a conditional
// DeleteObject or, with the deletion queue, an entry in its journal (the index is told when it is applied).
package guard
