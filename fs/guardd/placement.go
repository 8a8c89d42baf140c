package guardd

import (
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// within reports whether p is dir or lies below it: by path (symlinks resolved, see resolvePath), or
// because p or one of its existing ancestors is dir's very directory (same device and inode). The second
// catches a place that reaches the store through another path no symlink shows: a bind mount of the
// store (or of one of its folders) elsewhere, where an index or audit log would be deleted by the
// cleanup through the mount like one given by the store's own path.
func within(p, dir string) bool {
	rp, rd := resolvePath(p), resolvePath(dir)
	if rp == rd || strings.HasPrefix(rp, strings.TrimSuffix(rd, "/")+"/") {
		return true
	}
	var ds unix.Stat_t
	if unix.Stat(rd, &ds) != nil || ds.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false
	}
	for q := rp; ; q = filepath.Dir(q) {
		var st unix.Stat_t
		if unix.Stat(q, &st) == nil && st.Dev == ds.Dev && st.Ino == ds.Ino {
			return true
		}
		if q == filepath.Dir(q) {
			return false
		}
	}
}
