// Package listorder puts directory listings in cleanup order, the order both guard mounts (fs/localfs and
// s3backend/s3mount) return from readdir.
package listorder

import (
	"sort"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Order puts a directory in cleanup order: "." and "..", then _metadata, then chk-N folders newest
// (highest N) first, then everything else in the directory's own order.
//
// Why: recursive deleters (GNU rm's fts, find -delete, shutil.rmtree) process entries in the order readdir
// returns them. _metadata first retires a checkpoint before its own files are reached. Newest checkpoint
// first, because a checkpoint can only reference files that existed when it was taken, i.e. files of itself
// or of older checkpoints: retiring the newest first frees what it borrowed from older ones before those are
// reached, so one pass deletes everything policy allows. shared/, taskowned/ and the rest come last, after
// every checkpoint of the folder is retired.
//
// The partition is stable and O(n) apart from sorting the chk-* names, so huge shared/ folders cost no
// more than reading them.
func Order(in []fuse.DirEntry) []fuse.DirEntry {
	out := make([]fuse.DirEntry, 0, len(in))
	var chk []fuse.DirEntry
	var meta []fuse.DirEntry
	for _, e := range in {
		switch {
		case e.Name == "." || e.Name == "..":
			out = append(out, e)
		case e.Name == "_metadata":
			meta = append(meta, e)
		case IsCheckpoint(e.Name):
			chk = append(chk, e)
		}
	}
	SortCheckpoints(chk)
	out = append(out, meta...)
	out = append(out, chk...)
	for _, e := range in {
		if e.Name == "." || e.Name == ".." || e.Name == "_metadata" || IsCheckpoint(e.Name) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// IsCheckpoint reports whether name sorts as a checkpoint folder (chk-*).
func IsCheckpoint(name string) bool { return strings.HasPrefix(name, "chk-") }

// SortCheckpoints sorts chk-* entries newest (highest N) first; odd names (chk-x, chk-) follow the
// numbered ones, by name.
func SortCheckpoints(chk []fuse.DirEntry) {
	sort.SliceStable(chk, func(i, j int) bool {
		a, aok := chkNumber(chk[i].Name)
		b, bok := chkNumber(chk[j].Name)
		switch {
		case aok && bok:
			return a > b
		case aok != bok:
			return aok // numbered checkpoints before odd names
		}
		return chk[i].Name < chk[j].Name
	})
}

func chkNumber(name string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimPrefix(name, "chk-"), 10, 64)
	return n, err == nil && n >= 0
}
