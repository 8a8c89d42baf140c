// Package flinklayout is the one home of Flink's checkpoint-storage layout as ckguard reads it: the
// names of a checkpoint's `_metadata`, its chk-N folder, a job folder's shared/ and taskowned/, a
// savepoint folder, a ForSt working folder, and the cleanup order every mount lists a folder in.
//
// The layout, as Flink writes it (CheckpointStorage, FsCheckpointStorageLocation, ForStStateBackend):
//
//	<checkpoint dir>/<job id hex>/chk-<n>/_metadata      one completed checkpoint
//	<checkpoint dir>/<job id hex>/shared/…               incremental files any later checkpoint may reuse
//	<checkpoint dir>/<job id hex>/taskowned/…            files owned by the TaskManagers
//	<checkpoint dir>/<job id hex>/shared/op_<id>_attempt_<n>/db/…   a running ForSt job's database
//	<savepoint dir>/savepoint-<job id prefix>-<random>/_metadata    one savepoint
//
// It is a leaf: it imports nothing of ckguard, so the parser, the index, the stores and the mounts all
// use the same definitions.
package flinklayout

import (
	"cmp"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

const (
	// MetadataName is the file whose existence makes a checkpoint or savepoint live.
	MetadataName = "_metadata"
	// CheckpointPrefix starts every checkpoint folder's name: chk-<n>.
	CheckpointPrefix = "chk-"
	// SavepointPrefix starts every savepoint folder's name: savepoint-<job id prefix>-<random>.
	SavepointPrefix = "savepoint-"
	// SharedDir holds a job's incremental files, which later checkpoints (also of other jobs, after a
	// restore) may reference.
	SharedDir = "shared"
	// TaskOwnedDir holds files owned by the TaskManagers.
	TaskOwnedDir = "taskowned"
)

// IsMetadata reports whether a store key names a `_metadata` file. A key ending in "/" is an S3
// folder marker (a folder named _metadata), never a file.
func IsMetadata(key string) bool {
	if key == "" || key[len(key)-1] == '/' {
		return false
	}
	return key[strings.LastIndexByte(key, '/')+1:] == MetadataName
}

// IsCheckpointDir reports whether a folder name is chk-<n> with n a decimal number, as Flink names a
// checkpoint's folder.
func IsCheckpointDir(name string) bool {
	if !strings.HasPrefix(name, CheckpointPrefix) || len(name) == len(CheckpointPrefix) {
		return false
	}
	for _, c := range name[len(CheckpointPrefix):] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// CheckpointNumber is n of a chk-<n> name that fits an int64.
func CheckpointNumber(name string) (int64, bool) {
	if !IsCheckpointDir(name) {
		return 0, false
	}
	n, err := strconv.ParseInt(name[len(CheckpointPrefix):], 10, 64)
	return n, err == nil
}

// IsSavepointDir reports whether a folder name is a savepoint folder's (savepoint-…).
func IsSavepointDir(name string) bool { return strings.HasPrefix(name, SavepointPrefix) }

// IsJobFolderEntry reports whether a name inside a folder marks that folder as a job folder: a
// checkpoint folder chk-<n>, shared/ or taskowned/.
func IsJobFolderEntry(name string) bool {
	return name == SharedDir || name == TaskOwnedDir || IsCheckpointDir(name)
}

// forstAttemptDir is a ForSt operator instance's working folder: op_<operator id>_attempt_<n>.
var forstAttemptDir = regexp.MustCompile(`^op_[A-Za-z0-9_-]+_attempt_[0-9]+$`)

// IsForStAttemptDir reports whether a folder name is a ForSt working folder (op_<id>_attempt_<n>).
func IsForStAttemptDir(name string) bool { return forstAttemptDir.MatchString(name) }

// Cleanup order.
//
// Recursive deleters (GNU rm's fts, find -delete, shutil.rmtree) process entries in the order readdir
// returns them, so every mount lists a folder in this order: "." and "..", then `_metadata`, then the
// chk-* folders newest (highest n) first, then everything else in the folder's own order. `_metadata`
// first retires a checkpoint before its own files are reached. Newest checkpoint first, because a
// checkpoint can only reference files that existed when it was taken, i.e. its own or older
// checkpoints': retiring the newest first frees what it borrowed from older ones before those are
// reached, so one pass deletes everything policy allows. shared/, taskowned/ and the rest come last,
// after every checkpoint of the folder is retired.

// Class is a name's place in the cleanup order: 0 for "." and "..", 1 for `_metadata`, 2 for a name
// that sorts as a checkpoint folder (chk-*, also odd ones such as chk-x), 3 for anything else.
func Class(name string) int {
	switch {
	case name == "." || name == "..":
		return 0
	case name == MetadataName:
		return 1
	case strings.HasPrefix(name, CheckpointPrefix):
		return 2
	}
	return 3
}

// CompareCheckpoints orders two chk-* names: numbered ones newest (highest n) first, then odd names
// (chk-x, chk-) by name.
func CompareCheckpoints(a, b string) int {
	an, aok := CheckpointNumber(a)
	bn, bok := CheckpointNumber(b)
	switch {
	case aok && bok:
		return cmp.Compare(bn, an)
	case aok != bok:
		if aok {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// CleanupOrder returns the entries of one folder in cleanup order. The partition is stable and O(n)
// apart from sorting the chk-* names, so huge shared/ folders cost no more than reading them.
func CleanupOrder[T any](in []T, name func(T) string) []T {
	out := make([]T, 0, len(in))
	var meta, chk, rest []T
	for _, e := range in {
		switch Class(name(e)) {
		case 0:
			out = append(out, e)
		case 1:
			meta = append(meta, e)
		case 2:
			chk = append(chk, e)
		default:
			rest = append(rest, e)
		}
	}
	slices.SortStableFunc(chk, func(a, b T) int { return CompareCheckpoints(name(a), name(b)) })
	out = append(out, meta...)
	out = append(out, chk...)
	return append(out, rest...)
}
