package localstore

import "time"

// StoreTimeNamed reads the store's clock through the named probe file (the path taken on file systems
// without O_TMPFILE, such as NFS).
func StoreTimeNamed(s *Store) (time.Time, error) { return s.probeNamed() }

// SetOpenDirHook makes every folder open of a walk ask hook first (an error it returns is the open's),
// for the unreadable folders a test running as root cannot make (root bypasses file modes).
func SetOpenDirHook(hook func(key string) error) (restore func()) {
	old := openDirHook
	openDirHook = hook
	return func() { openDirHook = old }
}

// MaxOpenDirs is how many folder descriptors one walk keeps open.
const MaxOpenDirs = maxOpenDirs

// SetMountInfoPath makes walks read the mount table from name (an empty file: a mount made after the
// table was read).
func SetMountInfoPath(name string) (restore func()) {
	old := mountInfoPath
	mountInfoPath = name
	return func() { mountInfoPath = old }
}

// ParseMountsBelow is parseMountsBelow: each mount point's key and who mounted it (-1: root or
// not FUSE, owned as its folder).
func ParseMountsBelow(b []byte, root string) map[string]int64 {
	out := map[string]int64{}
	for k, m := range parseMountsBelow(b, root) {
		out[k] = -1
		if m.hasUID {
			out[k] = int64(m.uid)
		}
	}
	return out
}
