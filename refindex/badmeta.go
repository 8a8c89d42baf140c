package refindex

import (
	"errors"
	"path"
	"strings"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
)

// The classes of a `_metadata` the index cannot parse (checkpointRecord.Bad).
//
// The rule (docs/SEMANTICS.md, "A _metadata that cannot be parsed"): a checkpoint is live while a
// `_metadata` Flink can restore from exists. A damaged one (random bytes, a wrong magic number, an
// empty file, a truncated or otherwise broken stream of a format version the parser knows) is no
// checkpoint Flink could load, so it protects nothing but itself: it is kept while younger than
// --grace (it may still be being written, and so may its folder's files, which grace keeps anyway),
// never counts as its job's newest checkpoint, refuses no other deletion, and is reported. Only what
// ckguard cannot judge although Flink may load it (a newer format version, a file over the size
// limit, a key ckguard cannot address) may reference anything: it refuses every deletion in the
// store when its writer is one the store trusts for its job folder (the owner of the job folder and
// of the folder around it; every writer on a store without owners, S3), and otherwise only those in
// its own folder, like any entry that cannot be judged.
const (
	badDamaged       = "damaged"       // Flink could not load it either
	badNewerFormat   = "newer-format"  // valid magic, a format version the parser does not know
	badTooLarge      = "too-large"     // over maxMetadataSize: not read
	badUnaddressable = "unaddressable" // a key with empty, . or .. segments (S3)
)

// classifyParseError returns the class of a parse error of a `_metadata`'s content.
func classifyParseError(err error) string {
	var uv *flinkmeta.UnsupportedVersionError
	if errors.As(err, &uv) {
		// Versions 0 and 1 (Flink 1.1/1.2 savepoints) and those above the parser's: Flink of the
		// matching release may load them, so what they reference cannot be called unknown-but-unneeded.
		return badNewerFormat
	}
	return badDamaged
}

// damaged reports whether c is a `_metadata` Flink itself could not load: it protects nothing but
// itself.
func (c *checkpointRecord) damaged() bool { return c.Err != "" && c.Bad == badDamaged }

// trustedWriter reports whether c's writer is one the store trusts for its job folder: the owner
// of the job folder and of the folder around it (JobOwner, as Flink's JobManager that made them),
// or any writer where the store has no owners (S3: writing needs the bucket's credentials or the
// mount's own user).
func (c *checkpointRecord) trustedWriter() bool { return c.UID == nil || c.JobOwner }

// confinedScope is the folder an unjudgeable `_metadata` of an untrusted writer confines its
// refusals to: its own folder, or only itself when it lies at the store root (no Flink writes one
// there, and confining to the root would refuse everything).
func confinedScope(key string) string {
	d := path.Dir(key)
	if d == "." {
		return ""
	}
	return d
}

// confinedFor returns the unjudgeable `_metadata` of an untrusted writer whose folder holds key
// (or, for a directory operation, lies at or below key), or "" when none does. Deleting the
// `_metadata` itself is never refused here: it is how the user removes the cause.
func (s *memState) confinedFor(key string, isDir, maybeDir bool) string {
	for _, u := range s.confined {
		if u == key {
			if isDir {
				return u
			}
			continue
		}
		if maybeDir && (key == "" || strings.HasPrefix(u, key+"/")) {
			return u
		}
		if d := confinedScope(u); d != "" && (key == d || strings.HasPrefix(key, d+"/")) {
			return u
		}
	}
	return ""
}

// badClassText describes a class for messages and stats.
func badClassText(c *checkpointRecord) string {
	switch c.Bad {
	case badDamaged:
		return "damaged: Flink cannot restore from it, so it protects nothing but itself"
	case badNewerFormat:
		return "a format version ckguard does not know"
	case badTooLarge:
		return "over the size limit ckguard reads"
	case badUnaddressable:
		return "at a key ckguard cannot address"
	}
	return "not yet classified (written by an older ckguard; the next sync reads it again)"
}

// badScope says what a bad `_metadata` refuses: "itself", "its folder" or "the store".
func badScope(c *checkpointRecord) string {
	switch {
	case c.damaged():
		return "itself"
	case c.trustedWriter():
		return "store"
	case confinedScope(c.Key) == "":
		return "itself"
	}
	return "folder"
}

// badScopeText says in words what a bad `_metadata` refuses.
func badScopeText(c *checkpointRecord) string {
	switch badScope(c) {
	case "store":
		return "every deletion in the store but its own"
	case "folder":
		return "deletions in its folder " + confinedScope(c.Key)
	}
	return "nothing but itself, while younger than --grace"
}
