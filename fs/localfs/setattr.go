package localfs

import (
	"context"
	"os"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// noFollowHandle opens the regular file behind n without following a symlink, for a setattr that came
// without a file handle (truncate(2), chmod(2), utimes(2) by path). go-fuse's loopback would otherwise
// act by path with truncate(2) and chmod(2), which follow a symlink: one swapped into the store after the
// kernel checked the caller against the real file (and after the guard decided about it) would redirect
// the change, done with the daemon's rights (often root), to whatever it points at (review L3). On the
// descriptor the change reaches the file that was checked, or nothing. It returns nil (use the path) for
// anything but a regular file, and when the daemon may not open the file (a non-root daemon: nothing to
// escalate). ELOOP means a symlink now stands where the file was.
func (n *node) noFollowHandle(in *fuse.SetAttrIn) (fs.FileHandle, func(), syscall.Errno) {
	if n.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, nil, 0
	}
	flags := unix.O_RDONLY
	if _, ok := in.GetSize(); ok {
		flags = unix.O_WRONLY
	}
	fd, err := unix.Open(n.backing(n.key()), flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch err {
	case nil:
	case unix.ELOOP:
		return nil, nil, syscall.ELOOP
	default:
		return nil, nil, 0
	}
	lf := fs.NewLoopbackFileFromOS(os.NewFile(uintptr(fd), n.backing(n.key())))
	return lf, func() { _ = lf.Release(context.Background()) }, 0
}
