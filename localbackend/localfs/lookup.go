package localfs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/guard"
)

// The operations in this file only read the store (lookups, attributes, symlink targets, extended
// attributes, statfs). go-fuse's loopback does them by absolute path, which follows a store folder swapped
// for a symlink: a user of an --allow-other mount could then stat files and read symlink targets wherever
// it points (a root-only directory outside the store), with the daemon's rights. And the store path it
// puts in front of every key makes a key of 4,095 bytes, which the store itself accepts, ENAMETOOLONG.
// Here each resolves beneath the store root like the changes do (storeRoot): the folder through openat2
// without symlinks, then one *at call on the final name, which is never followed. A folder swapped for a
// symlink then gives ELOOP, never what it points at.
//
// They skip storeRoot.current: after the store directory was replaced they keep showing the directory the
// mount started on (whose descriptor they use), and only changes are refused.

var (
	_ fs.NodeStatxer     = (*node)(nil)
	_ fs.FileLookuper    = (*orderedDir)(nil)
	_ fs.FileGetattrer   = (*orderedDir)(nil)
	_ fs.NodeListxattrer = (*node)(nil)
	_ fs.NodeReadlinker  = (*node)(nil)
	_ fs.NodeStatfser    = (*node)(nil)
	_ fs.NodeGetattrer   = (*node)(nil)
	_ fs.NodeLookuper    = (*node)(nil)
)

// readDir opens folder key ("" = the root) beneath the root for a read; release it with r.release.
func (r *storeRoot) readDir(key string) (int, error) {
	if key == "" {
		return r.fd, nil
	}
	return r.openat2(key, unix.O_PATH|unix.O_DIRECTORY, 0)
}

// readParent is parent for a read.
func (r *storeRoot) readParent(key string) (int, string, error) {
	dir, name := splitKey(key)
	fd, err := r.readDir(dir)
	return fd, name, err
}

// splitKey splits a key into its folder's key and its final name ("" for the root: the folder itself).
func splitKey(key string) (dir, name string) {
	for i := len(key) - 1; i >= 0; i-- {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}

// Lookup stats name in this folder: through an open handle of it, or the folder opened beneath the root.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.enf.RefuseReserved(ctx, guard.RequestLookup, n.childKey(name), ""); errno != 0 {
		return nil, errno
	}
	if d := n.openDir.Load(); d != nil {
		if ch, errno, ok := d.lookup(ctx, name, out); ok {
			return ch, errno
		}
	}
	dfd, err := n.root.readDir(n.key())
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	ch, err := n.newChild(ctx, dfd, name, out)
	n.root.release(dfd)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return ch, 0
}

// Getattr stats the file through the handle when the kernel sent one, else beneath the root.
func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if fga, ok := f.(fs.FileGetattrer); ok {
		return fga.Getattr(ctx, out)
	}
	if d := n.openDir.Load(); d != nil {
		if errno, ok := d.getattr(out); ok {
			return errno
		}
	}
	dfd, name, err := n.root.readParent(n.key())
	if err != nil {
		return fs.ToErrno(err)
	}
	var st syscall.Stat_t
	_, err = statAt(dfd, name, &st)
	n.root.release(dfd)
	if err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

// Statx is Getattr for statx(2) callers (birth time, and the sync flags they pass).
func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	if fsx, ok := f.(fs.FileStatxer); ok {
		return fsx.Statx(ctx, flags, mask, out)
	}
	dfd, name, err := n.root.readParent(n.key())
	if err != nil {
		return fs.ToErrno(err)
	}
	at := unix.AT_SYMLINK_NOFOLLOW | int(flags)&(unix.AT_STATX_FORCE_SYNC|unix.AT_STATX_DONT_SYNC)
	if name == "" {
		at |= unix.AT_EMPTY_PATH
	}
	var st unix.Statx_t
	err = unix.Statx(dfd, name, at, int(mask), &st)
	n.root.release(dfd)
	if err != nil {
		return fs.ToErrno(err)
	}
	out.FromStatx(&st)
	return 0
}

// Readlink reads the symlink's target through its folder, opened beneath the root.
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	dfd, name, err := n.root.readParent(n.key())
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	defer n.root.release(dfd)
	for l := 256; ; l *= 2 {
		buf := make([]byte, l)
		sz, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			return nil, fs.ToErrno(err)
		}
		if sz < len(buf) {
			return buf[:sz], 0
		}
	}
}

// Statfs reports the filesystem holding the file, opened beneath the root.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	fd := n.root.fd
	if k := n.key(); k != "" {
		var err error
		if fd, err = n.root.openat2(k, unix.O_PATH|unix.O_NOFOLLOW, 0); err != nil {
			return fs.ToErrno(err)
		}
		defer unix.Close(fd)
	}
	var s syscall.Statfs_t
	if err := syscall.Fstatfs(fd, &s); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStatfsT(&s)
	return 0
}

// Listxattr lists the file's extended attributes (a symlink's own), reached beneath the root.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	var sz int
	err := n.root.onFile(n.key(), func(p string) error {
		var err error
		sz, err = unix.Listxattr(p, dest)
		return err
	})
	return uint32(sz), fs.ToErrno(err)
}

// Lookup serves READDIRPLUS: the name was just read from this folder's own descriptor, opened beneath the
// root at opendir, so one fstatat on it (never following the name) is the whole lookup.
func (d *orderedDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, errno, ok := d.lookup(ctx, name, out)
	if !ok {
		return nil, syscall.EBADF
	}
	return ch, errno
}

// lookup stats name on the folder's descriptor; ok is false once the handle is released.
func (d *orderedDir) lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return nil, 0, false
	}
	if guard.ReservedName(d.n.key(), name) { // READDIRPLUS: a name the listing left out
		return nil, syscall.ENOENT, true
	}
	ch, err := d.n.newChild(ctx, d.fd, name, out)
	if err != nil {
		return nil, fs.ToErrno(err), true
	}
	return ch, 0, true
}

// Getattr stats the open folder itself.
func (d *orderedDir) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	errno, ok := d.getattr(out)
	if !ok {
		return syscall.EBADF
	}
	return errno
}

// getattr fstats the folder's descriptor; ok is false once the handle is released.
func (d *orderedDir) getattr(out *fuse.AttrOut) (syscall.Errno, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return 0, false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(d.fd, &st); err != nil {
		return fs.ToErrno(err), true
	}
	out.FromStat(&st)
	return 0, true
}
