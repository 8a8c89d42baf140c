package hdfsmount

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

type node struct {
	gofs.Inode
	guard.NoStoredXattrs
	fsys *filesystem
	// id is the HDFS inode id of the file or directory this node was looked up as (0: unknown).
	id uint64

	mu sync.Mutex
	// waiting are descriptors opened for writing on this file while it had content: the kernel sends
	// open(O_TRUNC) as an open without O_TRUNC followed by a truncation without a handle, and the first
	// of them takes over the new empty file (adopt).
	waiting []*writeHandle
}

// adoptWaiting hands w to the first descriptor waiting on n; false when none takes it.
func (n *node) adoptWaiting(w hdfsclient.Writer) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, h := range n.waiting {
		if h.adopt(w) {
			n.waiting = append(n.waiting[:i], n.waiting[i+1:]...)
			return true
		}
	}
	return false
}

func (n *node) forget(h *writeHandle) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, x := range n.waiting {
		if x == h {
			n.waiting = append(n.waiting[:i], n.waiting[i+1:]...)
			return
		}
	}
}

var (
	_ gofs.NodeLookuper      = (*node)(nil)
	_ gofs.NodeGetattrer     = (*node)(nil)
	_ gofs.NodeSetattrer     = (*node)(nil)
	_ gofs.NodeOpener        = (*node)(nil)
	_ gofs.NodeCreater       = (*node)(nil)
	_ gofs.NodeMkdirer       = (*node)(nil)
	_ gofs.NodeUnlinker      = (*node)(nil)
	_ gofs.NodeRmdirer       = (*node)(nil)
	_ gofs.NodeRenamer       = (*node)(nil)
	_ gofs.NodeGetxattrer    = (*node)(nil)
	_ gofs.NodeSetxattrer    = (*node)(nil)
	_ gofs.NodeRemovexattrer = (*node)(nil)
	_ gofs.NodeListxattrer   = (*node)(nil)
	_ gofs.NodeStatfser      = (*node)(nil)
)

func (n *node) key() string { return n.Path(n.Root()) }

func childKey(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func (f *filesystem) abs(key string) string { return hdfsclient.Join(f.dir, key) }

func validName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

func (f *filesystem) attr(fi hdfsclient.FileInfo, out *fuse.Attr) {
	out.Size = uint64(fi.Size)
	out.Blocks = (out.Size + 511) / 512
	mt := fi.ModTime
	out.SetTimes(&mt, &mt, &mt)
	out.Owner = fuse.Owner{Uid: f.uid, Gid: f.gid}
	perm := uint32(fi.Mode.Perm())
	if fi.IsDir {
		out.Mode = syscall.S_IFDIR | perm
		out.Nlink = 2
	} else {
		out.Mode = syscall.S_IFREG | perm
		out.Nlink = 1
	}
}

func (f *filesystem) info(key string, fi hdfsclient.FileInfo) store.ObjectInfo {
	return store.ObjectInfo{Path: key, Size: fi.Size, ModTime: fi.ModTime, IsDir: fi.IsDir, Special: fi.Symlink}
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if !validName(name) {
		return nil, syscall.ENOENT
	}
	if errno := n.fsys.g.RefuseReserved(ctx, guard.RequestLookup, childKey(n.key(), name), ""); errno != 0 {
		return nil, errno
	}
	fi, err := n.fsys.stat(ctx, childKey(n.key(), name), statTTL)
	if err != nil {
		return nil, hdfsclient.Errno(err)
	}
	if fi.Symlink {
		return nil, syscall.ENOENT // never followed: a link could point outside the guarded directory
	}
	n.fsys.attr(fi, &out.Attr)
	mode := uint32(syscall.S_IFREG)
	if fi.IsDir {
		mode = syscall.S_IFDIR
	}
	// The kernel looks a name up again once its entry timeout (1 s) has passed: when the name is still
	// the same HDFS inode, the same node answers, so the kernel keeps its inode (and everything cached
	// below it) instead of forgetting it and the tree under it. A new node every time made each walk
	// past the timeout (find, a second rm -rf) forget the previous walk's inodes, and go-fuse, seeing its
	// node table shrink, compacts it and forces a garbage collection (debug.FreeOSMemory) in the middle
	// of the walk. Only the node at this very name is reused, so its path (the key every decision is
	// taken on) is the name looked up; another inode at the name gets a new node.
	if fi.ID != 0 {
		if ch := n.GetChild(name); ch != nil && ch.Mode()&syscall.S_IFMT == mode {
			if cn, ok := ch.Operations().(*node); ok && cn.id == fi.ID {
				return ch, 0
			}
		}
	}
	return n.NewInode(ctx, &node{fsys: n.fsys, id: fi.ID}, gofs.StableAttr{Mode: mode}), 0
}

func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if w, ok := fh.(*writeHandle); ok && !w.existing {
		if fi, ok := w.attr(); ok {
			n.fsys.attr(fi, &out.Attr)
			return 0
		}
	}
	fi, err := n.fsys.stat(ctx, n.key(), statTTL)
	if err != nil {
		return hdfsclient.Errno(err)
	}
	n.fsys.attr(fi, &out.Attr)
	return 0
}

// Setattr: a size change is a truncate (decided; only to 0, as HDFS cannot cut a file in place
// through this client); an mtime moved into the past is decided (OpWrite), forward is applied; modes
// and owners are not changed through the mount.
func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	key := n.key()
	p := n.fsys.abs(key)
	defer n.fsys.changed(key)
	if sz, ok := in.GetSize(); ok {
		if w, isW := fh.(*writeHandle); isW && !w.existing && sz == uint64(w.size()) {
			// the kernel's truncate-at-open of a file this handle just created: nothing to cut
		} else {
			fi, err := n.fsys.fs.Stat(ctx, p)
			if err != nil {
				return hdfsclient.Errno(err)
			}
			if sz != 0 {
				return syscall.ENOTSUP
			}
			wh, _ := fh.(*writeHandle)
			if fi.Size != 0 || (wh != nil && wh.existing) {
				st, errno := n.fsys.prepare(ctx, verdict.OpTruncate, key, fi)
				if errno != 0 {
					return errno
				}
				defer st.done(ctx)
				errno = n.fsys.g.Change(ctx, []guard.Check{{Op: verdict.OpTruncate, Path: key, Observed: new(n.fsys.info(key, fi))}}, func() syscall.Errno {
					if errno := n.fsys.discard(ctx, p, st); errno != 0 {
						return errno
					}
					w, err := n.fsys.fs.Create(ctx, p, fi.Mode)
					if err != nil {
						return hdfsclient.Errno(err)
					}
					if (wh != nil && wh.adopt(w)) || (wh == nil && n.adoptWaiting(w)) {
						// open(O_TRUNC) arrives as open + truncate: the descriptor writes the new file.
						return 0
					}
					return hdfsclient.Errno(w.Close())
				})
				if errno != 0 { // a truncated _metadata is indexed again by Change
					return errno
				}
			}
		}
	}
	if mt, ok := in.GetMTime(); ok {
		fi, err := n.fsys.fs.Stat(ctx, p)
		if err != nil {
			return hdfsclient.Errno(err)
		}
		set := func() syscall.Errno { return hdfsclient.Errno(n.fsys.fs.Chtimes(ctx, p, mt)) }
		if mt.Before(fi.ModTime) && !fi.IsDir {
			// Backdating is decided: the grace period of young files is judged by their mtime, so an
			// mtime moved into the past could make a file of a checkpoint in flight deletable.
			if errno := n.fsys.g.Change(ctx, []guard.Check{{Op: verdict.OpWrite, Path: key, Observed: new(n.fsys.info(key, fi))}}, set); errno != 0 {
				return errno
			}
		} else if errno := set(); errno != 0 {
			return errno
		}
	}
	return n.Getattr(ctx, fh, out)
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	out.Bsize, out.Frsize, out.NameLen = 4096, 4096, 255
	return 0
}

// Getxattr serves the guard's attributes (user.ckguard.*), as the local mount does; HDFS files have no
// others here. The refs name a referencing checkpoint only if the caller could list every folder of its
// path as the mount presents them (refsVisible).
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if !guard.IsXattr(attr) {
		return 0, syscall.ENODATA
	}
	return n.fsys.g.Getxattr(ctx, n.key(), attr, dest, n.fsys.refsVisible(ctx, guard.CallerOf(ctx)))
}

// refsVisible decides by the mount's own permission model, the one default_permissions enforces: every
// name is owned by the mount's uid and gid (attr) with the NameNode's permission bits, so the caller
// could find a checkpoint only with read and search permission on each folder of its path by those. A
// folder that cannot be statted or is not a folder hides it (fail closed).
func (f *filesystem) refsVisible(ctx context.Context, c guard.Caller) guard.VisibleFunc {
	seen := map[string]bool{}
	return func(ref string) bool {
		for _, dir := range guard.RefFolders(ref) {
			ok, done := seen[dir]
			if !done {
				fi, err := f.stat(ctx, dir, statTTL)
				ok = err == nil && fi.IsDir && c.ModePermits(uint32(fi.Mode.Perm()), f.uid, f.gid, 5)
				seen[dir] = ok
			}
			if !ok {
				return false
			}
		}
		return true
	}
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if !validName(name) {
		return nil, syscall.EINVAL
	}
	if errno := n.fsys.g.RefuseReserved(ctx, guard.RequestMkdir, childKey(n.key(), name), ""); errno != 0 {
		return nil, errno
	}
	p := n.fsys.abs(childKey(n.key(), name))
	defer n.fsys.changed(childKey(n.key(), name))
	if err := n.fsys.fs.Mkdir(ctx, p, fs.FileMode(mode&0o777)); err != nil {
		return nil, hdfsclient.Errno(err)
	}
	fi, err := n.fsys.fs.Stat(ctx, p)
	if err != nil {
		return nil, hdfsclient.Errno(err)
	}
	n.fsys.attr(fi, &out.Attr)
	return n.NewInode(ctx, &node{fsys: n.fsys, id: fi.ID}, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

// remove deletes one decided name: to the trash when the cluster has one (and the mount stages nothing:
// with a quarantine only empty directories come here), else for good.
func (f *filesystem) remove(ctx context.Context, p string) error {
	if f.trash {
		_, err := hdfsclient.MoveToTrash(ctx, f.fs, p, f.now())
		return err
	}
	return f.fs.Remove(ctx, p)
}

// discard removes the file p a truncation or rewrite replaces by a new empty one: into the quarantine
// when st stages it, else for good (HDFS cannot cut a file in place; the trash keeps no rewrites).
func (f *filesystem) discard(ctx context.Context, p string, st *staging) syscall.Errno {
	if st != nil {
		if err := st.commit(ctx); err != nil {
			return errnoOf(err)
		}
		return 0
	}
	return hdfsclient.Errno(f.fs.Remove(ctx, p))
}

// Unlink decides the one file, on a listing's attributes at most unlinkTTL old or the stat just taken
// (a failed stat is its errno, never "gone"). When the act is a rename of the name (into the trash or
// the quarantine) it is decided on a stat taken now: a rename moves whatever the name is, and a folder
// that replaced the listed file beside the mount would go with everything in it, while the decision
// only judged one file (a plain delete is non-recursive: the NameNode refuses a folder with anything
// in it, so the listing's attributes are enough there).
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	key := childKey(n.key(), name)
	if errno := n.fsys.g.RefuseReserved(ctx, guard.RequestUnlink, key, ""); errno != 0 {
		return errno
	}
	p := n.fsys.abs(key)
	var fi hdfsclient.FileInfo
	var err error
	if n.fsys.q != nil || n.fsys.trash {
		fi, err = n.fsys.fs.Stat(ctx, p)
	} else {
		fi, err = n.fsys.stat(ctx, key, unlinkTTL)
	}
	defer n.fsys.changed(key)
	if err != nil {
		return hdfsclient.Errno(err)
	}
	if fi.IsDir {
		return syscall.EISDIR
	}
	check := guard.Check{Op: verdict.OpUnlink, Path: key, Observed: new(n.fsys.info(key, fi))}
	if n.fsys.q == nil {
		return n.fsys.g.Remove(ctx, check, n.removeEntry(ctx, p))
	}
	st, errno := n.fsys.prepare(ctx, verdict.OpUnlink, key, fi)
	if errno != 0 {
		return errno
	}
	defer st.done(ctx)
	return n.fsys.g.Remove(ctx, check, func() (bool, syscall.Errno) {
		if err := st.commit(ctx); err != nil {
			return false, errnoOf(err)
		}
		return true, 0
	})
}

// removeEntry is the mechanics of an allowed unlink or rmdir: a non-recursive delete (to the user's
// trash when the cluster keeps one).
func (n *node) removeEntry(ctx context.Context, p string) func() (bool, syscall.Errno) {
	return func() (bool, syscall.Errno) {
		if err := n.fsys.remove(ctx, p); err != nil {
			return false, hdfsclient.Errno(err)
		}
		return true, 0
	}
}

// Rmdir removes an empty directory (the NameNode refuses a non-empty one: ENOTEMPTY).
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	key := childKey(n.key(), name)
	if errno := n.fsys.g.RefuseReserved(ctx, guard.RequestRmdir, key, ""); errno != 0 {
		return errno
	}
	p := n.fsys.abs(key)
	defer n.fsys.changedTree(key)
	fi, err := n.fsys.fs.Stat(ctx, p)
	if err != nil {
		return hdfsclient.Errno(err)
	}
	if !fi.IsDir {
		return syscall.ENOTDIR
	}
	empty := true
	if err := n.fsys.fs.List(ctx, p, func(page []hdfsclient.FileInfo) error {
		if len(page) > 0 {
			empty = false
			return io.EOF
		}
		return nil
	}); err != nil && !errors.Is(err, io.EOF) {
		return hdfsclient.Errno(err)
	}
	if !empty {
		return syscall.ENOTEMPTY
	}
	// removeEntry is non-recursive: a file created inside meanwhile makes it fail with ENOTEMPTY.
	return n.fsys.g.Remove(ctx, guard.Check{Op: verdict.OpRmdir, Path: key}, n.removeEntry(ctx, p))
}

// Rename moves a file or directory. An existing target is never replaced: the replacement is decided
// first (so a referenced target is refused like elsewhere), then the rename fails with EEXIST.
func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if !validName(newName) {
		return syscall.EINVAL
	}
	if flags&^uint32(1) != 0 { // RENAME_NOREPLACE (1) is what we do anyway; EXCHANGE/WHITEOUT are not
		return syscall.EINVAL
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	src := childKey(n.key(), name)
	dst := childKey(np.key(), newName)
	if errno := n.fsys.g.RefuseReserved(ctx, guard.RequestRename, src, dst); errno != 0 {
		return errno
	}
	defer n.fsys.changedTree(dst)
	defer n.fsys.changedTree(src)
	sfi, err := n.fsys.fs.Stat(ctx, n.fsys.abs(src))
	if err != nil {
		return hdfsclient.Errno(err)
	}
	exists := true
	if _, err := n.fsys.fs.Stat(ctx, n.fsys.abs(dst)); errors.Is(err, fs.ErrNotExist) {
		exists = false
	} else if err != nil {
		return hdfsclient.Errno(err)
	}
	commit := guard.IsMetadataCommit(guard.RenameFacts{SameDir: np == n, OldName: name, NewName: newName,
		Regular: !sfi.IsDir && !sfi.Symlink, Nlink: 1})
	checks := []guard.Check{{Op: verdict.OpRename, Path: src, To: dst, MetadataCommit: commit, Observed: new(n.fsys.info(src, sfi))}}
	if exists {
		checks = append(checks, guard.Check{Op: verdict.OpReplace, Path: dst, To: src})
	}
	return n.fsys.g.Rename(ctx, checks, func() (bool, syscall.Errno) {
		if exists {
			return false, syscall.EEXIST
		}
		if err := n.fsys.fs.Rename(ctx, n.fsys.abs(src), n.fsys.abs(dst)); err != nil {
			return false, hdfsclient.Errno(err)
		}
		return true, 0
	})
}

// Open: reads of any file; writing an existing file is decided (OpenOp) and, being HDFS, possible only
// into an empty file: with O_TRUNC, or after the truncation the kernel sends before an open(O_TRUNC)
// (the empty file is recreated, losing nothing); a descriptor on a non-empty file cannot write.
func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	key := n.key()
	p := n.fsys.abs(key)
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		r, err := n.fsys.fs.Open(ctx, p)
		if err != nil {
			return nil, 0, hdfsclient.Errno(err)
		}
		return &readHandle{r: r}, 0, 0
	}
	defer n.fsys.changed(key)
	fi, err := n.fsys.fs.Stat(ctx, p)
	if err != nil {
		return nil, 0, hdfsclient.Errno(err)
	}
	if flags&syscall.O_TRUNC == 0 && fi.Size > 0 {
		// Decided like on every mount (a referenced file is refused); HDFS files are written once, front
		// to back, so the descriptor's writes then fail with ENOTSUP (its ftruncate is decided again).
		h := &writeHandle{fsys: n.fsys, node: n, key: key, mode: fi.Mode, n: fi.Size, existing: true}
		errno := n.fsys.g.Open(ctx, guard.Check{Op: guard.OpenOp(flags), Path: key, Observed: new(n.fsys.info(key, fi))}, func() syscall.Errno {
			n.mu.Lock()
			n.waiting = append(n.waiting, h)
			n.mu.Unlock()
			return 0
		})
		if errno != 0 {
			return nil, 0, errno
		}
		return h, fuse.FOPEN_DIRECT_IO, 0
	}
	var w hdfsclient.Writer
	st, errno := n.fsys.prepare(ctx, verdict.OpTruncate, key, fi)
	if errno != 0 {
		return nil, 0, errno
	}
	defer st.done(ctx)
	errno = n.fsys.g.Open(ctx, guard.Check{Op: guard.OpenOp(flags), Path: key, Observed: new(n.fsys.info(key, fi))}, func() syscall.Errno {
		if errno := n.fsys.discard(ctx, p, st); errno != 0 {
			return errno
		}
		var err error
		w, err = n.fsys.fs.Create(ctx, p, fi.Mode)
		return hdfsclient.Errno(err)
	})
	if errno != 0 {
		return nil, 0, errno
	}
	return &writeHandle{fsys: n.fsys, key: key, w: w, mode: fi.Mode}, fuse.FOPEN_DIRECT_IO, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if !validName(name) {
		return nil, nil, 0, syscall.EINVAL
	}
	key := childKey(n.key(), name)
	if errno := n.fsys.g.RefuseReserved(ctx, guard.RequestCreate, key, ""); errno != 0 {
		return nil, nil, 0, errno
	}
	defer n.fsys.changed(key)
	w, err := n.fsys.fs.Create(ctx, n.fsys.abs(key), fs.FileMode(mode&0o777))
	if err != nil {
		return nil, nil, 0, hdfsclient.Errno(err)
	}
	h := &writeHandle{fsys: n.fsys, key: key, w: w, mode: fs.FileMode(mode & 0o777)}
	fi, _ := h.attr()
	n.fsys.attr(fi, &out.Attr)
	return n.NewInode(ctx, &node{fsys: n.fsys}, gofs.StableAttr{Mode: syscall.S_IFREG}), h, fuse.FOPEN_DIRECT_IO, 0
}

type readHandle struct{ r hdfsclient.Reader }

var _ gofs.FileReader = (*readHandle)(nil)
var _ gofs.FileReleaser = (*readHandle)(nil)

// Read reads through the client's reader: one DataNode block read per request, no connection held
// between requests (an open file costs the DataNode no transfer thread); the kernel's readahead asks
// up to 1 MiB per request.
func (h *readHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= h.r.Size() {
		return fuse.ReadResultData(nil), 0
	}
	n, err := h.r.ReadAt(dest, off)
	if err != nil && err != io.EOF {
		return nil, hdfsclient.Errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *readHandle) Release(ctx context.Context) syscall.Errno { return hdfsclient.Errno(h.r.Close()) }

// writeHandle writes a new file front to back; the first flush (close(2)) after data was written
// completes it and tells the index (a `_metadata` written through the mount is indexed before close
// returns). A flush before any data is not the end of the file: a shell's `printf x > f` opens f, dup2s
// the descriptor to stdout and closes the original (a FLUSH) before printf writes; completing the file
// there made every write after it fail. Such a file is completed by the next flush after data or, if
// none comes (an empty file), at release. A write after a completing flush (the descriptor is still
// open elsewhere: `{ printf a; /bin/true; printf b; } > f`, where /bin/true's exit flushes the inherited
// stdout) reopens the file at its end with an HDFS append, decided like an open of an existing file for
// writing, and the next flush completes it again.
type writeHandle struct {
	fsys *filesystem
	node *node // set for existing-file descriptors (node.waiting)
	key  string
	mode fs.FileMode

	// existing: a descriptor on a file that was there before the open (no O_TRUNC): it has no writer, its
	// writes fail with ENOTSUP, and a truncation through it is decided like one by path.
	existing bool

	// reopen serialises reopening a completed file (reopen); taken before mu, never under it.
	reopen sync.Mutex

	mu     sync.Mutex
	w      hdfsclient.Writer
	n      int64
	closed bool
	err    syscall.Errno
}

// errWriteAfterClose: a write after the completing flush that cannot continue the file (its close
// failed, or it is not at the file's end) fails rather than being lost silently.
const errWriteAfterClose = syscall.EIO

var _ gofs.FileWriter = (*writeHandle)(nil)
var _ gofs.FileFlusher = (*writeHandle)(nil)
var _ gofs.FileReleaser = (*writeHandle)(nil)

// adopt gives an existing-file descriptor the writer of the file recreated empty by its truncation,
// so its writes go to the new file front to back.
func (h *writeHandle) adopt(w hdfsclient.Writer) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.existing || h.closed || h.w != nil {
		return false
	}
	h.w, h.existing, h.n = w, false, 0
	return true
}

func (h *writeHandle) size() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func (h *writeHandle) attr() (hdfsclient.FileInfo, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return hdfsclient.FileInfo{}, false
	}
	return hdfsclient.FileInfo{Name: path.Base(h.key), Size: h.n, ModTime: h.fsys.now(), Mode: h.mode}, true
}

func (h *writeHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	if h.closed && !h.existing && h.err == 0 && off == h.n {
		h.mu.Unlock()
		// Outside mu: the decision takes the enforcer's lock, under which a truncation takes mu (adopt).
		if errno := h.reopenAppend(ctx); errno != 0 {
			return 0, errno
		}
		h.mu.Lock()
	}
	defer h.mu.Unlock()
	if h.closed {
		h.fsys.log.Warn("write to an HDFS file after a close completed it, not at its end or after a failed close: HDFS files are written front to back", "file", h.key, "offset", off, "size", h.n)
		return 0, errWriteAfterClose
	}
	if h.existing || off != h.n {
		return 0, syscall.ENOTSUP // HDFS files are written front to back
	}
	m, err := h.w.Write(data)
	h.n += int64(m)
	if err != nil {
		return uint32(m), hdfsclient.Errno(err)
	}
	return uint32(m), 0
}

// reopenAppend continues the file this handle completed: the file must still be the one it wrote (a
// file, of the size it wrote; ESTALE otherwise: someone changed it since), and the append is decided
// (OpAppend), so a file a checkpoint has come to reference since (a `_metadata` this handle wrote,
// indexed at the completing close) is refused like any write to it; its youth is not held against
// it: this handle is the writer that made it young.
func (h *writeHandle) reopenAppend(ctx context.Context) syscall.Errno {
	h.reopen.Lock()
	defer h.reopen.Unlock()
	h.mu.Lock()
	closed, n := h.closed, h.n
	h.mu.Unlock()
	if !closed {
		return 0 // reopened by a concurrent write
	}
	p := h.fsys.abs(h.key)
	defer h.fsys.changed(h.key)
	fi, err := h.fsys.fs.Stat(ctx, p)
	if err != nil {
		return hdfsclient.Errno(err)
	}
	if fi.IsDir || fi.Symlink || fi.Size != n {
		h.fsys.log.Warn("write to an HDFS file after a close completed it: the file changed since (not continued)", "file", h.key, "written", n, "size", fi.Size)
		return syscall.ESTALE
	}
	var w hdfsclient.Writer
	errno := h.fsys.g.Open(ctx, guard.Check{Op: verdict.OpAppend, Path: h.key, Observed: new(h.fsys.info(h.key, fi))}, func() syscall.Errno {
		var err error
		w, err = h.fsys.fs.Append(ctx, p)
		return hdfsclient.Errno(err)
	})
	if errno != 0 {
		return errno
	}
	h.mu.Lock()
	h.w, h.closed, h.err = w, false, 0
	h.mu.Unlock()
	return 0
}

func (h *writeHandle) Flush(ctx context.Context) syscall.Errno { return h.complete(ctx, false) }

// complete finishes the file at a flush that follows data, or at release (final) whatever was written.
func (h *writeHandle) complete(ctx context.Context, final bool) syscall.Errno {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return h.err
	}
	if !final && (h.existing || h.n == 0) {
		// Nothing written yet: a descriptor closed beside the one that will write (see writeHandle);
		// an existing-file descriptor stays able to adopt its truncation until release.
		h.mu.Unlock()
		return 0
	}
	h.closed = true
	if h.existing {
		h.mu.Unlock()
		if h.node != nil {
			h.node.forget(h)
		}
		return 0
	}
	err := h.w.Close()
	h.err = hdfsclient.Errno(err)
	h.mu.Unlock()
	h.fsys.changed(h.key) // the file's size and mtime are final now
	if err != nil {
		return h.err
	}
	// Outside the handle's lock: indexing a _metadata takes the enforcer's lock exclusively.
	if errno := h.fsys.g.Written(ctx, h.key); errno != 0 {
		return errno
	}
	return 0
}

func (h *writeHandle) Release(ctx context.Context) syscall.Errno { return h.complete(ctx, true) }
