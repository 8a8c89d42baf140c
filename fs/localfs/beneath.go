package localfs

import (
	"path"

	"golang.org/x/sys/unix"
)

// removeBeneath removes key (a file, or with unix.AT_REMOVEDIR an empty directory) through a descriptor
// of its parent folder opened from the store root without following any symlink. unlink(2) by absolute
// path follows symlinked folders on the way: one swapped into the store after the guard decided about key
// would make the daemon (often root) remove a file of the same name elsewhere, in the store (a file the
// decision never covered) or outside it (review L3). The kernel resolves the mount's own symlinks itself,
// so a key never legitimately crosses one. On kernels without openat2 (before 5.6) it falls back to the path.
func (n *node) removeBeneath(key string, flags int) error {
	dir, name := path.Split(key)
	root, err := unix.Open(n.RootData.Path, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	fd := root
	if dir != "" {
		fd, err = unix.Openat2(root, dir[:len(dir)-1], &unix.OpenHow{Flags: unix.O_DIRECTORY | unix.O_RDONLY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		if err == unix.ENOSYS {
			return unix.Unlinkat(unix.AT_FDCWD, n.backing(key), flags)
		}
		if err != nil {
			return err
		}
		defer unix.Close(fd)
	}
	return unix.Unlinkat(fd, name, flags)
}
