// Package listorder puts go-fuse directory listings in cleanup order, the order every guard mount
// returns from readdir. The order itself, and why, is Flink's layout: refindex/flinklayout.
package listorder

import (
	"slices"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func entryName(e fuse.DirEntry) string { return e.Name }

// Order puts a directory in cleanup order (flinklayout.CleanupOrder): "." and "..", then _metadata,
// then chk-N folders newest (highest N) first, then everything else in the directory's own order.
func Order(in []fuse.DirEntry) []fuse.DirEntry { return flinklayout.CleanupOrder(in, entryName) }

// SortCheckpoints sorts chk-* entries newest (highest N) first; odd names (chk-x, chk-) follow the
// numbered ones, by name.
func SortCheckpoints(chk []fuse.DirEntry) {
	slices.SortStableFunc(chk, func(a, b fuse.DirEntry) int { return flinklayout.CompareCheckpoints(a.Name, b.Name) })
}
