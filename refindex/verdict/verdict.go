// Package verdict is the vocabulary of a guard decision: the operation asked about (Op), the answer
// (Decision), why it was given (Reason) and the state a path is explained as (State*). It imports nothing
// of the index, so a mount and the control socket use these types without linking the index's storage or
// the metadata parser.
package verdict

// Op is a namespace change the guard filesystem asks about before it lets it happen.
type Op int

const (
	OpUnlink   Op = iota + 1 // unlink(2) of a file
	OpRmdir                  // rmdir(2) of a directory
	OpRename                 // the source of a rename (file or directory)
	OpReplace                // an existing target that a rename would replace
	OpTruncate               // setattr(size) or open with O_TRUNC
	OpWrite                  // open of an existing file for writing
	OpLink                   // a hard link to an existing file
	// OpChmod is a change of who may read a file or folder: a mode that loses permission bits, another
	// owner or group, an ACL. It deletes nothing, but a referenced SST its Flink user can no longer read
	// fails the restore as surely as a deleted one.
	OpChmod
	// OpAppend continues a file its own writer created and completed through the mount (HDFS: a write
	// after the close that completed it, through a descriptor still open on it): bytes after the end,
	// none rewritten.
	OpAppend
)

func (o Op) String() string {
	switch o {
	case OpUnlink:
		return "unlink"
	case OpRmdir:
		return "rmdir"
	case OpRename:
		return "rename"
	case OpReplace:
		return "replace"
	case OpTruncate:
		return "truncate"
	case OpWrite:
		return "write"
	case OpLink:
		return "link"
	case OpChmod:
		return "chmod"
	case OpAppend:
		return "append"
	}
	return "unknown-op"
}

// Reason is a stable, machine-readable code for why a decision was taken (metrics label, audit field).
type Reason string

const (
	ReasonAllowed           Reason = "allowed"
	ReasonIndexStale        Reason = "index-stale"          // index older than --max-staleness
	ReasonSyncFailed        Reason = "sync-failed"          // last sync failed: fail closed
	ReasonUnparseable       Reason = "unparseable-metadata" // some _metadata cannot be parsed
	ReasonReferenced        Reason = "referenced"           // a live checkpoint/savepoint references it
	ReasonProtectedMetadata Reason = "protected-metadata"   // newest checkpoint of an active job
	ReasonPinned            Reason = "pinned"               // pinned with `ckguard pin`
	// ReasonProtectedSavepoint: the newest savepoint of a job, or one within --savepoint-retention.
	ReasonProtectedSavepoint Reason = "protected-savepoint"
	ReasonProtectGlob        Reason = "protect-glob" // matches a --protect glob
	ReasonGrace              Reason = "grace"        // unreferenced but younger than --grace
	// ReasonForStWorkingDir: in a ForSt working directory (op_…_attempt_…/db) of a job the store shows
	// active (its newest checkpoint, or a file of its working directories, within --active-window).
	ReasonForStWorkingDir Reason = "forst-working-dir"
	ReasonStoreError      Reason = "store-error" // storage error while deciding: fail closed
	// ReasonFlinkRunning: Flink's REST API reports (or, an endpoint not answering, may run) a job not in
	// a terminal state whose folder, restore point or latest checkpoint this is (--flink-rest).
	ReasonFlinkRunning Reason = "flink-running"
	// ReasonUnmappedReferences: a live _metadata references an object by a URI that no --map ties to
	// the store, that the store does not hold at the same relative place and that no --external
	// declares; the refused file could be that object (it has the URI's name).
	ReasonUnmappedReferences Reason = "unmapped-references"
	// ReasonUnknownSubtree: an entry of the store the last sync could not read (unreadable folder,
	// listing error) may hold what the refused op would touch (refindex/unknown.go).
	ReasonUnknownSubtree Reason = "unknown-subtree"
	// ReasonOutsideStore: `why` of a URI that names no object of the guarded store; this guard neither
	// protects nor deletes it, so there is no decision (Why only, never a mount's answer).
	ReasonOutsideStore Reason = "outside-store"
)

// Decision is the answer to "may this operation happen to this path?".
// Paths are store-relative keys: '/'-separated, no leading slash, "" is the store root.
type Decision struct {
	Allow   bool
	Reason  Reason
	Message string // one human sentence: the file, the checkpoint(s) and the fix
	// Referencing lists the first few checkpoints/savepoints (their _metadata keys) that reference the
	// path or something below it; RefCount is the total number.
	Referencing []string
	RefCount    int
}

// Explained states (the index's Explain, the user.ckguard.state extended attribute).
const (
	StateReferenced = "referenced"
	StateProtected  = "protected-by-policy"
	StateInGrace    = "in-grace"
	StateDeletable  = "deletable"
	// StateBlocked: the index cannot decide (stale, sync failed, unparseable _metadata, store error);
	// every deletion is refused.
	StateBlocked = "blocked"
	// StateOutside: a URI outside the guarded store (Why only).
	StateOutside = "outside-guarded-store"
)
