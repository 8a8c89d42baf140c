package refindex

import (
	"context"
	"encoding/binary"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// flinkSavepointDir matches the folder name Flink gives a savepoint: savepoint-<first 6 hex digits of
// the job id>-<12 random hex digits>.
var flinkSavepointDir = regexp.MustCompile(`^savepoint-([0-9a-f]{6})-[0-9a-f]{12}$`)

// savepointGroup names the competition for the newest savepoint that c takes part in, or reports
// false when c is no savepoint. A savepoint is told from a checkpoint by its `_metadata` (its
// properties) or, where the format carries none, by its savepoint-… folder. The `_metadata` names no
// job, so a savepoint belongs to the job its folder name says (Flink's savepoint-<6 hex of the job
// id>-<random>, wherever the savepoint folder lies: beside the checkpoints or in a savepoints folder
// of its own); a savepoint in a folder named otherwise (renamed by a user, or written by a tool) is
// the only savepoint of its job, so it is always its job's newest. As for checkpoints, savepoints
// compete only with those of the same owner, so no other user's copy takes the protection away.
func (c *checkpointRecord) savepointGroup() (string, bool) {
	// A damaged `_metadata` in a savepoint folder is no savepoint anyone can restore from, nor is an
	// unjudgeable one of an untrusted writer (see candidateID): neither is kept as a job's newest.
	if c.Kind != "savepoint" || c.damaged() || c.Err != "" && !c.trustedWriter() {
		return "", false
	}
	dir := path.Dir(c.Key)
	if dir == "." {
		dir = ""
	}
	g := dir
	if m := flinkSavepointDir.FindStringSubmatch(path.Base(dir)); m != nil && m[1] != sharedJobIDPrefix {
		g = path.Join(path.Dir(dir), "savepoint-"+m[1]+"-*")
	}
	return g + "\x00" + c.owner(), true
}

// sharedJobIDPrefix is the savepoint folder prefix of the job id 000…0, which Flink gives every job
// submitted in application mode without HA: savepoint-000000-… folders of different jobs cannot be told
// apart, so each such savepoint counts as the only one of its job (kept as its job's newest) rather
// than letting one job's newer savepoint expose another job's only one.
const sharedJobIDPrefix = "000000"

// savepointJob describes the job a savepoint belongs to, for messages.
func savepointJob(c *checkpointRecord) string {
	dir := path.Dir(c.Key)
	if m := flinkSavepointDir.FindStringSubmatch(path.Base(dir)); m != nil && m[1] == sharedJobIDPrefix {
		return fmt.Sprintf("in %s (savepoint-%s-… folders come from every job with the id 000…0, application mode without HA, so each counts as its job's only savepoint)", orRoot(strings.TrimSuffix(dir, ".")), m[1])
	} else if m != nil {
		return fmt.Sprintf("of the job whose id starts with %s (savepoint-%s-* folders in %s)", m[1], m[1], orRoot(strings.TrimSuffix(path.Dir(dir), ".")))
	}
	return fmt.Sprintf("in %s (its folder name does not say which job it belongs to, so it counts as its job's only savepoint)", orRoot(strings.TrimSuffix(dir, ".")))
}

// newestSavepoint reports whether savepoint c is the most recently completed one of its job (ties
// protect every record that has them).
func (s *memState) newestSavepoint(c *checkpointRecord) bool {
	g, ok := c.savepointGroup()
	return ok && c.ModTime.Equal(s.savepointMod[g])
}

// protection reports whether the policy protects the `_metadata` c from retirement (besides a pin)
// and why: the newest checkpoint of a job active within --active-window (ReasonProtectedMetadata),
// the newest savepoint of a job or a savepoint younger than --savepoint-retention
// (ReasonProtectedSavepoint). The sentence completes "refusing to <op> <path>: ".
func (v *view) protection(c *checkpointRecord, storeNow time.Time) (verdict.Reason, string) {
	age := storeNow.Sub(c.ModTime)
	if _, ok := c.savepointGroup(); ok {
		if v.pol.SavepointKeepNewest && v.st.newestSavepoint(c) {
			return verdict.ReasonProtectedSavepoint, fmt.Sprintf("%s is the newest savepoint %s, completed %s ago; someone took it to restore the job from, and Flink keeps no other copy. Take a newer savepoint of the job first; to dispose of it on purpose, delete it outside the mount (`flink savepoint -d <path>` removes it and its files) or run the mount with --savepoint-keep-newest=false", c.Key, savepointJob(c), age.Round(time.Second))
		}
		if v.pol.SavepointRetention > 0 && age < v.pol.SavepointRetention {
			return verdict.ReasonProtectedSavepoint, fmt.Sprintf("%s is a savepoint %s completed %s ago, within --savepoint-retention %s, so someone may restore from it; retry after %s, or run the mount with a shorter --savepoint-retention", c.Key, savepointJob(c), age.Round(time.Second), v.pol.SavepointRetention, (v.pol.SavepointRetention - age).Round(time.Second))
		}
		return "", ""
	}
	if v.st.newest(c) && v.pol.ActiveWindow > 0 && age < v.pol.ActiveWindow {
		others := ""
		if n := v.st.owners[c.Job]; n > 1 {
			others = fmt.Sprintf(" (job folder %s holds checkpoints of %d owners, and the newest of each owner's is kept, so no user can take the protection away from another's: `ls -ln %s/*/_metadata` shows who wrote which; delete one another user wrote outside the mount)", c.Job, n, orRoot(c.Job))
		}
		return verdict.ReasonProtectedMetadata, fmt.Sprintf("%s is the newest checkpoint of job folder %s, completed %s ago (within --active-window %s), so the job may restart from it; keep it, or use a shorter --active-window if the job is gone for good%s", c.Key, c.Job, age.Round(time.Second), v.pol.ActiveWindow, others)
	}
	return "", ""
}

// A tombstone says that the last checkpoint referencing an object was retired, so the object is no
// in-flight file and --grace does not keep it. It records who retired it, and only lifts the grace
// period from a file that checkpoint could have owned (tombstoneLifts):
//
//	uint64 retire time (unix ns) | uint64 completion (mtime) of the retired _metadata |
//	byte flags (1: the uid is known, 2: any owner) | uint32 uid of the retired _metadata
const tombstoneLen = 8 + 8 + 1 + 4

const (
	tombUID      = 1
	tombAnyOwner = 2
)

// tombstoneSlack is how much later than the retired `_metadata` a file may have been modified and
// still be one it referenced: the two times can come from listings and HEADs of different precision
// (S3: milliseconds and seconds), or from the two ends of an upload.
const tombstoneSlack = 2 * time.Second

// encodeTombstone is the tombstone the retirement of c leaves on a file; anyOwner: c had the owner of
// its job folder and the file lies in that folder.
func encodeTombstone(retired time.Time, c *checkpointRecord, anyOwner bool) []byte {
	b := make([]byte, 0, tombstoneLen)
	b = binary.BigEndian.AppendUint64(b, uint64(retired.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, uint64(c.ModTime.UnixNano()))
	var flags byte
	var uid uint32
	if c.UID != nil {
		flags, uid = tombUID, *c.UID
	}
	if anyOwner {
		flags |= tombAnyOwner
	}
	b = append(b, flags)
	return binary.BigEndian.AppendUint32(b, uid)
}

// tombstoneTime returns when a tombstone was written (the zero time for a malformed one).
func tombstoneTime(b []byte) time.Time {
	if len(b) < 8 {
		return time.Time{}
	}
	return decodeTime(b[:8])
}

// tombstoneLifts reports whether tombstone b takes the grace period away from file o. Retiring a
// `_metadata` proves only that the files IT owned belong to no checkpoint in flight; anyone who can
// create a file in the store can write a `_metadata` naming the young files of a checkpoint Flink is
// still writing and delete it again. So the tombstone lifts grace only when
//   - the file has the retired `_metadata`'s owner, or lies in the job folder of a `_metadata` that
//     had the job folder's owner (where the store has owners: only root can give a file away, so a
//     `_metadata` another user wrote lifts nothing from the job's files, and one in a job folder of
//     its own nothing outside it), and
//   - the file was not modified after that `_metadata` completed (Flink writes every file of a
//     checkpoint before its `_metadata`; a file changed later, rewritten or appended to by a
//     checkpoint in flight, is not the one the retired checkpoint referenced).
//
// A tombstone in an older layout (no owner recorded) lifts nothing: the file keeps --grace.
func tombstoneLifts(b []byte, o store.ObjectInfo) bool {
	if len(b) != tombstoneLen {
		return false
	}
	hasUID := b[16]&tombUID != 0
	if hasUID != o.HasUID {
		return false
	}
	if hasUID && b[16]&tombAnyOwner == 0 && binary.BigEndian.Uint32(b[17:]) != o.UID {
		return false
	}
	completed := time.Unix(0, int64(binary.BigEndian.Uint64(b[8:16])))
	return !o.ModTime.After(completed.Add(tombstoneSlack))
}

// ownsJobFolder reports whether uid owns the job folder job and the folder job lies in (the checkpoint
// base folder, or the store root), on a path no other user could have built. A job folder's name can
// be known before the job runs (application mode without HA gives every job the id 000…0; a
// resubmitted job keeps its id), so a user who may write in a shared base folder can create the job
// folder first and own it; only a job folder made by the owner of the folder around it (the JobManager
// creating its own job folder in its base folder) lets a retired `_metadata` of that owner lift grace
// from other owners' files in it, or makes a `_metadata` of that owner one the store trusts. And a user
// may create any folders of their own in a folder where everyone may create (a 1777 scratch folder):
// there they own both the job folder and the folder around it. So the folders above are looked at up
// to the first one uid does not own (or the store root): that folder must not let everyone create in
// it (mode & 002 == 0; a group-writable base folder is the Flink group's), else uid's folders below it
// are anyone's and nothing is trusted.
func (ix *Index) ownsJobFolder(ctx context.Context, job string, uid uint32) bool {
	if job == "" || job == "." {
		return false
	}
	for k, depth := job, 0; ; depth++ {
		o, err := ix.st.Stat(ctx, k)
		if err != nil || !o.HasUID {
			return false
		}
		if o.UID != uid {
			// The job folder and the folder around it must be uid's; the first folder above them
			// that is not must not let everyone create in it.
			return depth >= 2 && o.Perm&0o002 == 0
		}
		if k == "" {
			return true // uid owns every folder up to the store root
		}
		if depth > 64 {
			return false // deeper than any checkpoint layout: not judged, not trusted
		}
		if k = path.Dir(k); k == "." {
			k = ""
		}
	}
}
