package localfs

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// The operations in this file create names or open files. go-fuse's loopback does them by absolute path,
// which follows a symlink swapped into the store for a folder; here each one acts through descriptors
// opened beneath the store root (see storeRoot), so the daemon never creates, writes or links outside the
// store, nor somewhere else in it than the key the kernel (and the guard) named.

// stableAttr identifies a file to go-fuse the way the loopback's Lookup does (inode number with the device
// mixed in, generation from the birth time), so a file created here and looked up later is one inode.
func (n *node) stableAttr(st *syscall.Stat_t, gen uint64) fs.StableAttr {
	swap := func(d uint64) uint64 { return d<<32 | d>>32 }
	return fs.StableAttr{Mode: uint32(st.Mode), Gen: gen, Ino: swap(uint64(st.Dev)) ^ swap(n.RootData.Dev) ^ uint64(st.Ino)}
}

// newChild stats the entry name just made in folder dirfd and returns its inode, filling out.
func (n *node) newChild(ctx context.Context, dirfd int, name string, out *fuse.EntryOut) (*fs.Inode, error) {
	var st syscall.Stat_t
	gen, err := statAt(dirfd, name, &st)
	if err != nil {
		return nil, err
	}
	out.Attr.FromStat(&st)
	// WrapChild turns the loopback node into a guarded one.
	return n.NewInode(ctx, &fs.LoopbackNode{RootData: n.RootData}, n.stableAttr(&st, gen)), nil
}

// callerOwns gives a new entry to the caller, as a file created on the store directly would be. Only a
// root daemon can (and must: otherwise everything created through the mount belongs to root). A chown
// that fails (a root-squashing NFS export, a daemon without CAP_CHOWN) fails the creation, and the
// caller removes the entry: it would stay the daemon's with the mode the caller chose, set-id bits
// included, while the caller holds it open for writing (a set-uid program of the daemon's user, written
// by anyone).
func callerOwns(ctx context.Context, chown func(uid, gid int) error) error {
	if os.Geteuid() != 0 {
		return nil
	}
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return nil
	}
	if err := chown(int(c.Uid), int(c.Gid)); err != nil {
		return fmt.Errorf("give the new entry to uid %d (the creator): %w; nothing was created (a root-squashing NFS store cannot be guarded by a root mount: run the mount as the store's owner)", c.Uid, err)
	}
	return nil
}

// removeCreated removes the entry name in dirfd that this mount just created as fd (or, fd < 0, just
// made), unless the name holds another file by now.
func removeCreated(dirfd int, name string, fd, flags int) {
	if fd >= 0 {
		var a, b unix.Stat_t
		if unix.Fstat(fd, &a) != nil || unix.Fstatat(dirfd, name, &b, unix.AT_SYMLINK_NOFOLLOW) != nil || a.Dev != b.Dev || a.Ino != b.Ino {
			return
		}
	}
	_ = unix.Unlinkat(dirfd, name, flags)
}

// othersMetadata reports whether a new entry name in this mount would be a `_metadata` that another user
// than the daemon's makes while the daemon cannot give it to them (it is not root: callerOwns cannot
// chown). Such a file would belong to the daemon's user, normally the Flink user who owns the store, and
// the owner rules (a job's newest checkpoint among its owner's, what a retirement lifts grace from) would
// take it for the job's own: a fake chk-<newest+1>/_metadata would take the protection from the real
// newest checkpoint, a throw-away one would lift grace from the files of a checkpoint in flight. So a
// daemon that is not root refuses other users a new `_metadata` (EACCES); its own user (Flink writing
// through the mount) is unaffected, and a root daemon gives every new entry to its caller instead.
func othersMetadata(ctx context.Context, name string) bool {
	if name != flinklayout.MetadataName {
		return false
	}
	euid := os.Geteuid()
	if euid == 0 {
		return false
	}
	c, ok := fuse.FromContext(ctx)
	return !ok || int(c.Uid) != euid
}

// mkentry runs make (mkdirat, mknodat, symlinkat) on name in this folder, opened beneath the root, then
// hands the entry to the caller and returns its inode. An entry that cannot be stated is removed again.
func (n *node) mkentry(ctx context.Context, req guard.Request, name string, out *fuse.EntryOut, removeFlags int, make func(dirfd int) error) (*fs.Inode, syscall.Errno) {
	if errno := n.enf.RefuseReserved(ctx, req, n.childKey(name), ""); errno != 0 {
		return nil, errno
	}
	dfd, err := n.root.dir(n.key())
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	defer n.root.release(dfd)
	if err := make(dfd); err != nil {
		return nil, fs.ToErrno(err)
	}
	if err := callerOwns(ctx, func(uid, gid int) error { return unix.Fchownat(dfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
		removeCreated(dfd, name, -1, removeFlags)
		n.root.log.Warn("create through the mount refused", "path", n.childKey(name), "err", err)
		return nil, syscall.EPERM
	}
	ch, err := n.newChild(ctx, dfd, name, out)
	if err != nil {
		_ = unix.Unlinkat(dfd, name, removeFlags)
		return nil, fs.ToErrno(err)
	}
	return ch, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.mkentry(ctx, guard.RequestMkdir, name, out, unix.AT_REMOVEDIR, func(dfd int) error { return unix.Mkdirat(dfd, name, mode) })
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if othersMetadata(ctx, name) {
		return nil, syscall.EACCES
	}
	return n.mkentry(ctx, guard.RequestMknod, name, out, 0, func(dfd int) error { return unix.Mknodat(dfd, name, mode, int(rdev)) })
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.mkentry(ctx, guard.RequestSymlink, name, out, 0, func(dfd int) error { return unix.Symlinkat(target, dfd, name) })
}

// openFlags are the kernel's open flags as the daemon passes them on: O_APPEND is left to the kernel
// (it positions writes itself; the loopback does the same) and FMODE_EXEC is not an open(2) flag
// (openat2 would reject it).
func openFlags(flags uint32) int {
	return int(flags &^ (syscall.O_APPEND | fuse.FMODE_EXEC))
}

func writable(flags uint32) bool {
	return flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
}

// Open opens the file beneath the store root, refusing a symlink anywhere on the way (ELOOP). Opening an
// existing file for writing (OpWrite) or with O_TRUNC (OpTruncate) is decided first, and opened under the
// enforcer's lock; read-only opens are not decided at all: they cannot destroy anything. Every open is
// openRegular's: it cannot block.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	key := n.key()
	if !writable(flags) {
		fd, err := n.root.openRegular(key, openFlags(flags))
		if err != nil {
			return nil, 0, fs.ToErrno(err)
		}
		return fs.NewLoopbackFile(fd), 0, 0
	}
	var fd int
	errno := n.decideOpen(ctx, key, flags, func() syscall.Errno {
		var err error
		fd, err = n.root.openRegular(key, openFlags(flags))
		return fs.ToErrno(err)
	})
	if errno != 0 {
		return nil, 0, errno
	}
	return wrapFile(fs.NewLoopbackFile(fd), n), 0, 0
}

// decideOpen decides opening the existing file key for writing with flags (OpenOp) and, when allowed,
// opens it with open under the enforcer's lock. With a quarantine an O_TRUNC open stages the content it
// cuts (stagedChange).
func (n *node) decideOpen(ctx context.Context, key string, flags uint32, open func() syscall.Errno) syscall.Errno {
	c := n.contentCheck(guard.OpenOp(flags), key)
	if c.Op != verdict.OpTruncate || n.root.quarantine == nil {
		return n.enf.Open(ctx, c, open)
	}
	d := checkResult(&c)
	decide := func(act func() syscall.Errno) syscall.Errno { return n.enf.Open(ctx, c, act) }
	return n.stagedChange(ctx, key, nil, 0, quarantine.OpTruncate, decide, d, open)
}

// Create makes a new file. The kernel sends CREATE only for a name it believes absent; if the file appeared
// in the store meanwhile, opening it would write or truncate an existing file without a decision, so the
// create is first tried exclusively and, when the file exists, decided like an open of an existing file.
// Both opens refuse a symlink on the way and at the name itself: the decision was about the file at the
// key, and a symlink swapped in since must not redirect the write or truncation.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if othersMetadata(ctx, name) {
		return nil, nil, 0, syscall.EACCES
	}
	key := n.childKey(name)
	if errno := n.enf.RefuseReserved(ctx, guard.RequestCreate, key, ""); errno != 0 {
		return nil, nil, 0, errno
	}
	oflags := openFlags(flags) | unix.O_CREAT
	fd, err := n.root.open(key, oflags|unix.O_EXCL, mode)
	created := err == nil
	errno := fs.ToErrno(err)
	if errno == syscall.EEXIST && flags&syscall.O_EXCL == 0 {
		errno = n.decideOpen(ctx, key, flags, func() syscall.Errno {
			// Without O_CREAT: if the file vanished since, creating it now would make a file that is not
			// the caller's; the kernel's next attempt starts over. Under the lock: openRegular, which
			// cannot block on a FIFO found at the name.
			var err error
			fd, err = n.root.openRegular(key, oflags&^unix.O_CREAT)
			return fs.ToErrno(err)
		})
	}
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if created {
		if err := callerOwns(ctx, func(uid, gid int) error { return unix.Fchown(fd, uid, gid) }); err != nil {
			if dfd, derr := n.root.dir(n.key()); derr == nil {
				removeCreated(dfd, name, fd, 0)
				n.root.release(dfd)
			}
			unix.Close(fd)
			n.root.log.Warn("create through the mount refused", "path", key, "err", err)
			return nil, nil, 0, syscall.EPERM
		}
	}
	ch, err := n.newChild(ctx, fd, "", out)
	if err != nil {
		unix.Close(fd)
		return nil, nil, 0, fs.ToErrno(err)
	}
	gn, _ := ch.Operations().(*node)
	if created && gn != nil {
		gn.markCreated(ctx)
	}
	return ch, wrapFile(fs.NewLoopbackFile(fd), gn), 0, 0
}

// Link: a hard link to a file the index protects would give it a second, unreferenced name through which it
// could later be truncated or rewritten; the index decides OpLink for the target, and files with several names
// are further protected by hardLinked. linkat(2) without AT_SYMLINK_FOLLOW links a symlink found at the
// target's name itself, never what it points at.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	if othersMetadata(ctx, name) {
		return nil, syscall.EACCES
	}
	if errno := n.enf.RefuseReserved(ctx, guard.RequestLink, n.childKey(name), ""); errno != 0 {
		return nil, errno
	}
	if _, parent := t.Parent(); parent == nil {
		// An O_TMPFILE file has no name to link from (LINK carries no descriptor).
		return nil, syscall.EXDEV
	}
	from, to := t.key(), n.childKey(name)
	var ch *fs.Inode
	// A new name _metadata makes a live checkpoint (cp -al of a checkpoint folder): Link indexes it before
	// it returns, and if it cannot, undo takes the name away again.
	undo := func() {
		if fd, err := n.root.dir(n.key()); err == nil {
			_ = unix.Unlinkat(fd, name, 0)
			n.root.release(fd)
		}
	}
	c := guard.Check{Op: verdict.OpLink, Path: from, To: to, Decided: n.storeDecision(verdict.OpLink, from)}
	errno := n.enf.Link(ctx, c, func() syscall.Errno {
		sfd, sname, err := n.root.parent(from)
		if err != nil {
			return fs.ToErrno(err)
		}
		defer n.root.release(sfd)
		dfd, err := n.root.dir(n.key())
		if err != nil {
			return fs.ToErrno(err)
		}
		defer n.root.release(dfd)
		if err := unix.Linkat(sfd, sname, dfd, name, 0); err != nil {
			return fs.ToErrno(err)
		}
		ch, err = n.newChild(ctx, dfd, name, out)
		if err != nil {
			_ = unix.Unlinkat(dfd, name, 0)
			return fs.ToErrno(err)
		}
		return 0
	}, undo)
	if errno != 0 {
		return nil, errno
	}
	return ch, 0
}

var _ fs.NodeTmpfiler = (*node)(nil)

// Tmpfile makes an unnamed file (O_TMPFILE) in this folder, opened beneath the root.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	fd, err := n.root.open(n.key(), openFlags(flags)|unix.O_TMPFILE, mode)
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	if err := callerOwns(ctx, func(uid, gid int) error { return unix.Fchown(fd, uid, gid) }); err != nil {
		unix.Close(fd) // unnamed: closing it removes it
		n.root.log.Warn("create through the mount refused", "path", n.key(), "err", err)
		return nil, nil, 0, syscall.EPERM
	}
	ch, err := n.newChild(ctx, fd, "", out)
	if err != nil {
		unix.Close(fd)
		return nil, nil, 0, fs.ToErrno(err)
	}
	return ch, fs.NewLoopbackFile(fd), 0, 0
}
