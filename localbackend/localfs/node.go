// Package localfs is the guard filesystem over a local (or NFS, or fuse-dfs) directory: go-fuse's loopback
// with every destructive namespace change routed through a guard.Enforcer, directory listings ordered for
// one-pass cleanup, and the index's view of each file exposed as user.ckguard.* extended attributes.
//
// Everything the mount does in the store acts through descriptors resolved beneath the store root held
// open for the mount's life, never by absolute path, and never follows a symlink on the way (see
// storeRoot): changes and opens (create, mkdir, mknod, symlink, link, rename, unlink, rmdir, open,
// opendir, setattr without a handle, setxattr, removexattr) and reads alike (lookup, getattr, statx,
// readlink, getxattr, listxattr, statfs; see lookup.go). Because the index goes by path while the mount
// goes through the root descriptor, every change is refused once the store path names another directory
// than the one the mount started on (replaced, or mounted over: see storeRoot.current).
//
// Data never crosses the daemon when the kernel supports FUSE passthrough: files are opened as
// fs.LoopbackFile, which hands its descriptor to the kernel (see Mounted.Passthrough).
package localfs

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// node is a loopback node whose destructive operations ask the enforcer first. It wraps the children the
// loopback creates (fs.NodeWrapChilder), so every inode of the mount is a *node.
type node struct {
	*fs.LoopbackNode
	enf  *guard.Enforcer
	root *storeRoot // shared by every node of the mount
	// creatorPID (a process id, see processOf) and createdAt (unix nanoseconds) name the process that
	// created this file through the mount, and when: it may set its own new file's mtime into the past
	// (see ownNewFile).
	creatorPID atomic.Uint32
	createdAt  atomic.Int64
	// openDir is a folder handle open on this folder (the last one opened, until it is released): its
	// descriptor, opened beneath the root, serves this folder's lookups and getattrs in one system call
	// (see lookup.go). An rm -rf has every folder it empties open, and the kernel asks for the folder's
	// attributes again after each unlink.
	openDir atomic.Pointer[orderedDir]
}

// ownNewFileWindow is how long after creating a file through the mount its creator may backdate it: cp -p,
// tar and rsync set the times right after writing each file.
const ownNewFileWindow = 10 * time.Minute

// markCreated records that the caller of ctx created this file through the mount just now.
func (n *node) markCreated(ctx context.Context) {
	if c, ok := fuse.FromContext(ctx); ok && c != nil && c.Pid != 0 {
		n.createdAt.Store(time.Now().UnixNano())
		n.creatorPID.Store(processOf(c.Pid))
	}
}

// ownNewFile reports whether the caller of ctx created this file through the mount within
// ownNewFileWindow. Such a file is the caller's own copy (a restore with cp -p, tar, rsync -t), not a file
// of an in-flight checkpoint, which Flink writes: setting its mtime into the past is not decided. A
// process that did not create it (a cleanup script) is still decided.
func (n *node) ownNewFile(ctx context.Context) bool {
	pid := n.creatorPID.Load()
	if pid == 0 {
		return false
	}
	c, ok := fuse.FromContext(ctx)
	if !ok || c == nil || time.Since(time.Unix(0, n.createdAt.Load())) >= ownNewFileWindow {
		return false
	}
	return processOf(c.Pid) == pid
}

// processOf is the process (thread group) that thread tid belongs to: FUSE names the calling thread,
// and a multithreaded program (a Go or Java restore tool) may create a file on one thread and set its
// times on another. Unknown (the thread is gone): tid itself.
func processOf(tid uint32) uint32 {
	if g := tgid(tid); g != 0 {
		return g
	}
	return tid
}

// tgid is the process (thread group) id of thread tid, from /proc/<tid>/status; 0 if unknown.
func tgid(tid uint32) uint32 {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if err != nil {
				return 0
			}
			return uint32(n)
		}
	}
	return 0
}

var (
	_ fs.InodeEmbedder      = (*node)(nil)
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeGetxattrer     = (*node)(nil)
	_ fs.NodeSetxattrer     = (*node)(nil)
	_ fs.NodeRemovexattrer  = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeListxattrer    = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
)

// newRoot returns the root node of a guard loopback over dir, with dir held open (release it with
// root.close once the mount is gone).
func newRoot(dir string, enf *guard.Enforcer, log *slog.Logger) (*node, error) {
	lr, err := fs.NewLoopbackRoot(dir)
	if err != nil {
		return nil, err
	}
	sr, err := openStoreRoot(dir, log)
	if err != nil {
		return nil, err
	}
	lb := lr.(*fs.LoopbackNode)
	root := &node{LoopbackNode: lb, enf: enf, root: sr}
	lb.RootData.RootNode = root
	return root, nil
}

// WrapChild makes every inode the loopback creates below this one a guarded node.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if lb, ok := ops.(*fs.LoopbackNode); ok {
		return &node{LoopbackNode: lb, enf: n.enf, root: n.root}
	}
	return ops
}

// key is the store-relative key of this node ("" for the root).
func (n *node) key() string {
	p := n.Path(nil)
	if p == "." {
		return ""
	}
	return p
}

func (n *node) childKey(name string) string {
	if k := n.key(); k != "" {
		return k + "/" + name
	}
	return name
}

// storeDecision is the refusal of op on key while the store path does not name the mount's directory (or
// cannot be checked), nil otherwise (guard.StoreChanged). It goes to the enforcer as the check's decision,
// so the refusal is audited and logged with its reason like any other. Operations the enforcer does not
// decide (creations, reads) get EIO from the same check in storeRoot.
func (n *node) storeDecision(op verdict.Op, key string) *verdict.Decision {
	err := n.root.current()
	if err == nil {
		return nil
	}
	sc, ok := err.(*storeChangedError)
	return guard.StoreChanged(op, key, err, ok && sc.replaced)
}

// check is the check of op on key (refused at once when the store directory was replaced).
func (n *node) check(op verdict.Op, key string) guard.Check {
	return guard.Check{Op: op, Path: key, Decided: n.storeDecision(op, key)}
}

// Unlink removes the file through its parent folder, opened beneath the store root under the
// enforcer's lock (unlinkTarget), so the decision judges the very file that is then unlinked.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	key := n.childKey(name)
	if errno := n.enf.RefuseReserved(ctx, guard.RequestUnlink, key, ""); errno != 0 {
		return errno
	}
	c := n.check(verdict.OpUnlink, key)
	var decided verdict.Decision
	c.Result = &decided
	return n.enf.RemoveResolved(ctx, c, func() guard.Target { return n.unlinkTarget(ctx, key, &decided) })
}

// unlinkTarget opens key's parent folder beneath the root once and stats the file through it: the
// decision judges that stat (Target.Observed) and removeEntry removes through the same descriptor, so
// the store path is walked once and no other file can be reached under key. decided is the decision
// taken (Check.Result), set before the act runs.
func (n *node) unlinkTarget(ctx context.Context, key string, decided *verdict.Decision) guard.Target {
	fd, base, err := n.root.parent(key)
	if err != nil {
		// The parent cannot be opened (the store was replaced, a folder became a symlink, ...): the
		// decision stats by path as usual, and the unlink reports the error.
		return guard.Target{Act: func() (bool, syscall.Errno) { return false, fs.ToErrno(err) }}
	}
	// observed is the stat the decision judges; the quarantine's entry takes the file's size, times and
	// mode from it rather than from a second stat (nil when the stat failed: the act stats again).
	var observed *unix.Stat_t
	t := guard.Target{
		Act:     func() (bool, syscall.Errno) { return n.removeEntry(ctx, fd, base, key, observed, *decided) },
		Release: func() { n.root.release(fd) },
	}
	var st unix.Stat_t
	if unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		oi := localstore.InfoFromStat(key, &st)
		t.Observed = &oi
		observed = &st
	}
	return t
}

// removeEntry removes the entry base of the folder fd (key in the store), allowed by d (removeFile:
// into quarantine, or unlinked); removed reports whether it is gone from its place.
func (n *node) removeEntry(ctx context.Context, fd int, base, key string, st *unix.Stat_t, d verdict.Decision) (removed bool, errno syscall.Errno) {
	errno = fs.ToErrno(n.removeFile(ctx, fd, base, key, st, d))
	return errno == 0, errno
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	key := n.childKey(name)
	if errno := n.enf.RefuseReserved(ctx, guard.RequestRmdir, key, ""); errno != 0 {
		return errno
	}
	return n.enf.Remove(ctx, n.check(verdict.OpRmdir, key), func() (bool, syscall.Errno) {
		errno := fs.ToErrno(n.root.remove(key, unix.AT_REMOVEDIR))
		return errno == 0, errno
	})
}

// Rename asks about the source (for a directory: everything below it) and about a target it would replace.
// Renames change the index (a _metadata may appear at, or move away from, its checkpoint folder), so they
// run exclusively.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	from, to := n.childKey(name), np.childKey(newName)
	if errno := n.enf.RefuseReserved(ctx, guard.RequestRename, from, to); errno != 0 {
		return errno
	}
	if othersMetadata(ctx, newName) {
		return syscall.EACCES
	}
	if flags&unix.RENAME_EXCHANGE != 0 {
		// A swap moves two trees at once; the index records renames one way (retire below the source,
		// index below the target), so a swap cannot be recorded faithfully. Refuse it like filesystems that
		// lack it do; mv and rename(1) never need it.
		return syscall.EINVAL
	}
	var sst syscall.Stat_t
	commit := n.root.lstat(from, &sst) == nil && guard.IsMetadataCommit(guard.RenameFacts{
		SameDir: np == n, OldName: name, NewName: newName, Exchange: flags&unix.RENAME_EXCHANGE != 0,
		Regular: sst.Mode&unix.S_IFMT == unix.S_IFREG, Nlink: uint64(sst.Nlink)})
	for attempt := 0; ; attempt++ {
		cs := []guard.Check{{Op: verdict.OpRename, Path: from, To: to, MetadataCommit: commit,
			Decided: n.storeDecision(verdict.OpRename, from)}}
		replacing := false
		var replaced *verdict.Decision
		if flags&unix.RENAME_NOREPLACE == 0 {
			var st syscall.Stat_t
			if err := n.root.lstat(to, &st); err == nil {
				replacing = true
				c := guard.Check{Op: verdict.OpReplace, Path: to, To: from}
				replaced = checkResult(&c)
				cs = append(cs, c)
			}
		}
		// No target was seen, so none was decided: rename with RENAME_NOREPLACE so a target that appears
		// in the store meanwhile is not replaced undecided; then decide again with it (once).
		doFlags := flags
		if !replacing {
			doFlags |= unix.RENAME_NOREPLACE
		}
		errno := n.enf.Rename(ctx, cs, func() (bool, syscall.Errno) {
			if replacing && n.root.quarantine != nil {
				return n.replaceStaged(ctx, from, to, flags, *replaced)
			}
			return n.renameEntry(from, to, flags, doFlags)
		})
		if errno == syscall.EEXIST && doFlags != flags && attempt == 0 {
			continue
		}
		return errno
	}
}

// renameEntry renames from to to beneath the root with doFlags, or with flags where the backing
// filesystem lacks renameat2 flags (older NFS, fuse-dfs) or the kernel renameat2 (before 3.15).
func (n *node) renameEntry(from, to string, flags, doFlags uint32) (moved bool, errno syscall.Errno) {
	errno = fs.ToErrno(n.root.rename(from, to, doFlags))
	if (errno == syscall.EINVAL || errno == syscall.ENOSYS) && doFlags != flags {
		errno = fs.ToErrno(n.root.rename(from, to, flags))
	}
	return errno == 0, errno
}

// hardLinked returns a refusal when the regular file at key has more than one name (guard.HardLinked).
func (n *node) hardLinked(op verdict.Op, key string) *verdict.Decision {
	var st syscall.Stat_t
	if err := n.root.lstat(key, &st); err != nil {
		if err == unix.ENOENT {
			return nil // nothing there to protect; the operation itself will say so
		}
		return guard.HardLinked(op, key, 0, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	return guard.HardLinked(op, key, uint64(st.Nlink), nil)
}

// contentCheck is the check for an operation that changes an existing file's content.
func (n *node) contentCheck(op verdict.Op, key string) guard.Check {
	d := n.storeDecision(op, key)
	if d == nil {
		d = n.hardLinked(op, key)
	}
	return guard.Check{Op: op, Path: key, Decided: d}
}

// Setattr guards a size change (truncate(2), ftruncate(2), and the setattr the kernel sends for O_TRUNC when
// it does not use atomic O_TRUNC), a backdated mtime, and a chmod that takes read access away (OpChmod).
// Other mode, owner and time changes pass through.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if f != nil {
		if gf, ok := f.(*file); ok {
			f = gf.LoopbackFile
		}
	} else {
		h, done, errno := n.noFollowHandle(in)
		if errno != 0 {
			return errno
		}
		if h != nil {
			defer done()
			f = h
		}
	}
	// Every part of the change that needs a decision is decided together, under the lock the change
	// then runs under.
	key := n.key()
	var checks []guard.Check
	if n.narrowsAccess(in) {
		checks = append(checks, n.contentCheck(verdict.OpChmod, key))
	}
	// cut is the decision of a truncation that cuts content with a quarantine: staged (stagedChange).
	var cut *verdict.Decision
	sz, sized := in.GetSize()
	if sized {
		var st syscall.Stat_t
		// Setting the size it already has changes nothing (this is what O_TRUNC of an empty file sends).
		if err := n.root.lstat(key, &st); err != nil || uint64(st.Size) != sz {
			c := n.contentCheck(verdict.OpTruncate, key)
			if n.root.quarantine != nil && (err != nil || uint64(st.Size) > sz && st.Mode&syscall.S_IFMT == syscall.S_IFREG) {
				cut = checkResult(&c)
			}
			checks = append(checks, c)
		}
	} else if n.backdates(in) && !n.ownNewFile(ctx) {
		// Grace is judged by mtime: setting an in-flight file's mtime into the past (touch -d, cp -p,
		// rsync -t onto an existing file) would take it out of grace and make it deletable, so it is
		// decided like a write of the file. Moving mtime forward or to now is free, and so is
		// backdating a file the caller itself has just created through the mount (ownNewFile).
		checks = append(checks, n.contentCheck(verdict.OpWrite, key))
	}
	if len(checks) == 0 {
		return n.setattr(ctx, f, in, out)
	}
	act := func() syscall.Errno { return n.setattr(ctx, f, in, out) }
	if cut != nil {
		decide := func(act func() syscall.Errno) syscall.Errno { return n.enf.Change(ctx, checks, act) }
		return n.stagedChange(ctx, key, f, int64(sz), quarantine.OpTruncate, decide, cut, act)
	}
	return n.enf.Change(ctx, checks, act)
}

// narrowsAccess reports whether in takes a read permission (for a folder: read or search) away from a
// file or folder that is then not readable by everyone: a referenced SST its Flink user can no longer read
// fails the restore like a deleted one, so such a chmod is decided (OpChmod). Adding
// permissions or taking write permission away is not decided. Neither is a change of owner or group:
// restore tools (cp -a, tar -p, rsync -a as root) create each file and folder owner-only, then give it
// its owner, then its mode, and by then the restored _metadata has made the files referenced.
// When the current mode cannot be read, a chmod is decided (fail closed).
func (n *node) narrowsAccess(in *fuse.SetAttrIn) bool {
	m, ok := in.GetMode()
	if !ok {
		return false
	}
	var st syscall.Stat_t
	if err := n.root.lstat(n.key(), &st); err != nil {
		return true
	}
	read := uint32(0o444)
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		read = 0o555
	}
	old, next := uint32(st.Mode)&0o777, m&0o777
	return old&^next&read != 0 && next&read&0o007 != read&0o007
}

// backdates reports whether in sets the file's mtime to an explicit time before its current one (or the
// current one cannot be read: then it is decided, fail closed).
func (n *node) backdates(in *fuse.SetAttrIn) bool {
	mt, ok := in.GetMTime()
	if !ok || in.Valid&fuse.FATTR_MTIME_NOW != 0 {
		return false
	}
	var st syscall.Stat_t
	if err := n.root.lstat(n.key(), &st); err != nil {
		return true
	}
	return st.Mode&unix.S_IFMT == unix.S_IFREG && mt.Before(time.Unix(st.Mtim.Unix()))
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if guard.IsXattr(attr) {
		return n.enf.Getxattr(ctx, n.key(), attr, dest, n.root.refsVisible(guard.CallerOf(ctx)))
	}
	// Beneath the root like every read (see lookup.go). The kernel asks for security.capability
	// before every write(2) that does not go through passthrough; with passthrough none does.
	var sz int
	err := n.root.onFile(n.key(), func(p string) error {
		var err error
		sz, err = unix.Getxattr(p, attr, dest)
		return err
	})
	return uint32(sz), fs.ToErrno(err)
}

// Setxattr passes extended attributes through, except the guard's own (refused) and an ACL change that
// takes read access away (see aclNarrows), which is decided like such a chmod (OpChmod).
func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if guard.IsXattr(attr) {
		return syscall.EPERM
	}
	return n.xattrChange(ctx, attr, data, false, func(p string) error { return unix.Setxattr(p, attr, data, int(flags)) })
}

// Removexattr is Setxattr's counterpart: removing a POSIX ACL takes away what its named entries granted.
func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if guard.IsXattr(attr) {
		return syscall.EPERM
	}
	return n.xattrChange(ctx, attr, nil, true, func(p string) error { return unix.Removexattr(p, attr) })
}

func (n *node) xattrChange(ctx context.Context, attr string, data []byte, remove bool, change func(p string) error) syscall.Errno {
	key := n.key()
	do := func() syscall.Errno { return fs.ToErrno(n.root.onFile(key, change)) }
	if !n.aclNarrows(attr, data, remove) {
		return do()
	}
	return n.enf.Change(ctx, []guard.Check{n.contentCheck(verdict.OpChmod, key)}, do)
}

// OpendirHandle lists the directory in cleanup order (see listorder.Order).
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	d, errno := openOrderedDir(n)
	if errno != 0 {
		return nil, 0, errno
	}
	n.openDir.Store(d)
	return d, 0, 0
}

func itoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[i:])
}
