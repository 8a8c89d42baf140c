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
// (often root), to whatever it points at. On the descriptor the change reaches the file that was
// checked, or nothing: a symlink on the way or at the name is ELOOP, an escape EXDEV.
//
// It returns nil for other file types (devices must not be opened, also one swapped in for the file; a
// symlink cannot be) and when the daemon
// may not open the file; node.setattr then acts on an O_PATH descriptor of the file instead.
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
	var fd int
	var err error
	if flags&unix.O_DIRECTORY != 0 {
		fd, err = n.root.open(n.key(), flags|unix.O_NONBLOCK, 0) // O_DIRECTORY: a device is refused before its open
	} else {
		fd, err = n.root.openRegular(n.key(), flags)
	}
	switch err {
	case nil:
	case unix.EACCES, unix.EPERM, unix.ESTALE:
		// ESTALE: no longer a regular file (a device or FIFO swapped in): never opened; setattr acts on
		// an O_PATH descriptor instead.
		return nil, nil, 0
	default:
		return nil, nil, fs.ToErrno(err)
	}
	lf := fs.NewLoopbackFile(fd)
	return lf, func() { _ = lf.(fs.FileReleaser).Release(context.Background()) }, 0
}

// setattr applies in to the file behind n: through f when the kernel sent a handle (or noFollowHandle
// opened one), otherwise through an O_PATH descriptor of the file itself opened beneath the store root (see
// storeRoot.onFile): symlinks, fifos, sockets, devices, and files the daemon may not open. Like the
// loopback, ownership and times of a symlink are its own (never its target's), and the size is cut before
// an explicit mtime is set so the mtime sticks.
func (n *node) setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if f != nil {
		return n.LoopbackNode.Setattr(ctx, f, in, out)
	}
	key := n.key()
	err := n.root.onFile(key, func(p string) error {
		if m, ok := in.GetMode(); ok {
			if err := unix.Chmod(p, m&0o7777); err != nil {
				return err
			}
		}
		uid, uok := in.GetUID()
		gid, gok := in.GetGID()
		if uok || gok {
			u, g := -1, -1
			if uok {
				u = int(uid)
			}
			if gok {
				g = int(gid)
			}
			if err := unix.Fchownat(unix.AT_FDCWD, p, u, g, nofollowOnPath(n.root)); err != nil {
				return err
			}
		}
		if sz, ok := in.GetSize(); ok {
			if err := unix.Truncate(p, int64(sz)); err != nil {
				return err
			}
		}
		mt, mok := in.GetMTime()
		at, aok := in.GetATime()
		if mok || aok {
			ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
			if aok {
				ts[0] = unix.NsecToTimespec(at.UnixNano())
			}
			if mok {
				ts[1] = unix.NsecToTimespec(mt.UnixNano())
			}
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, nofollowOnPath(n.root)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := n.root.lstat(key, &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

// nofollowOnPath is the flag for a *at call on an onFile path: none on a /proc/self/fd magic link (which
// must be followed to reach the file, and goes no further), AT_SYMLINK_NOFOLLOW on the fallback path.
func nofollowOnPath(r *storeRoot) int {
	if r.procFd {
		return 0
	}
	return unix.AT_SYMLINK_NOFOLLOW
}
