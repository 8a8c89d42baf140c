package localfs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// noFollowHandle opens the regular file or folder behind n beneath the store root without following any
// symlink, for a setattr that came without a file handle (truncate(2), chmod(2), utimes(2) by path).
// go-fuse's loopback would otherwise act by path with truncate(2) and chmod(2), which follow symlinks: one
// swapped into the store (for the file or a folder above it) after the kernel checked the caller against the
// real file (and after the guard decided about it) would redirect the change, done with the daemon's rights
// (often root), to whatever it points at (review L3). On the descriptor the change reaches the file that was
// checked, or nothing: a symlink on the way or at the name is ELOOP, an escape EXDEV.
//
// It returns nil (use the path) for other file types (a symlink's own owner and times are set with
// *_NOFOLLOW calls; devices must not be opened) and when the daemon may not open the file (a non-root
// daemon: nothing to escalate).
func (n *node) noFollowHandle(in *fuse.SetAttrIn) (fs.FileHandle, func(), syscall.Errno) {
	var flags int
	switch n.StableAttr().Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		flags = unix.O_RDONLY
		if _, ok := in.GetSize(); ok {
			flags = unix.O_WRONLY
		}
	case syscall.S_IFDIR:
		flags = unix.O_RDONLY | unix.O_DIRECTORY
	default:
		return nil, nil, 0
	}
	fd, err := n.root.open(n.key(), flags|unix.O_NONBLOCK, 0)
	switch err {
	case nil:
	case unix.EACCES, unix.EPERM:
		return nil, nil, 0
	default:
		return nil, nil, fs.ToErrno(err)
	}
	lf := fs.NewLoopbackFile(fd)
	return lf, func() { _ = lf.(fs.FileReleaser).Release(context.Background()) }, 0
}
