package guard

import (
	"strings"

	"github.com/ckguard/ckguard/refindex/flinklayout"
)

// MetadataInProgressPrefix starts the temporary name under which Flink's recoverable writer (local file
// system, HDFS) writes a _metadata before committing it by a rename in the same folder:
// "._metadata.inprogress.<uuid>".
const MetadataInProgressPrefix = "." + flinklayout.MetadataName + ".inprogress."

// RenameFacts is what a filesystem knows about a rename when it asks IsMetadataCommit. Both mounts fill it
// from their own view of the source (Lstat on a local store; on S3 a source is always a plain object).
type RenameFacts struct {
	SameDir  bool   // source and target are in the same directory
	OldName  string // source name (last path element)
	NewName  string // target name (last path element)
	Exchange bool   // RENAME_EXCHANGE was asked for
	Regular  bool   // the source is a regular file: not a directory, not a symlink
	Nlink    uint64 // the source's link count
}

// IsMetadataCommit reports whether a rename is a writer committing a checkpoint's _metadata written under
// its in-progress name, and only that: same folder, target exactly _metadata, source named
// ._metadata.inprogress.<something>, a regular file with a single name, no exchange. Anything broader would
// let a user turn a grace refusal into an allow (mv -T chk-78 _metadata moves a whole in-flight checkpoint;
// mv chk-78/state chk-78/_metadata moves an in-flight state file). For such a rename Check.MetadataCommit is
// set: a grace refusal of the source (and only that) becomes an allow; an existing _metadata at the target
// still gets its own OpReplace check.
func IsMetadataCommit(r RenameFacts) bool {
	return !r.Exchange && r.SameDir && r.NewName == flinklayout.MetadataName &&
		strings.HasPrefix(r.OldName, MetadataInProgressPrefix) && len(r.OldName) > len(MetadataInProgressPrefix) &&
		r.Regular && r.Nlink == 1
}
