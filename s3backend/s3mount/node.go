package s3mount

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/verdict"
	"github.com/ckguard/ckguard/s3backend/deleteq"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// filesystem is the state shared by all nodes of one mount.
type filesystem struct {
	opts     Options
	c        *s3client.Client
	g        *guard.Enforcer
	cache    *s3client.AttrCache
	log      *slog.Logger
	started  time.Time
	ownSpool bool
	bufPool  sync.Pool      // readahead chunk buffers (*[]byte), see read.go
	q        *deleteq.Queue // acknowledged deletions not applied yet (nil: unlink deletes synchronously)
	qClose   sync.Once
	inos     *inodes // inode numbers and the bound on the file inodes the kernel holds
	ahead    *listAhead

	// chunkBytes is the size of the read chunk buffers open files hold (at most opts.ReadMemory, see read.go).
	chunkBytes atomic.Int64
}

// node is a file or directory, named by its position in the tree (its key is its path from the root, so
// a rename moves it without bookkeeping).
type node struct {
	gofs.Inode
	guard.NoStoredXattrs
	fsys *filesystem

	mu sync.Mutex
	// last known object attributes of a file (size, mtime, ETag); a file open for writing reports its spool.
	obj     s3client.Object
	writers map[*writeHandle]bool

	// ino is the node's inode number (0: the root); the rest is inodes' bookkeeping, under inodes.mu.
	ino, gen  uint64
	queued    bool // in inodes.recent
	forgotten bool // go-fuse's OnForget ran (or the node was never handed out)
}

var (
	_ = (gofs.NodeLookuper)((*node)(nil))
	_ = (gofs.NodeGetattrer)((*node)(nil))
	_ = (gofs.NodeSetattrer)((*node)(nil))
	_ = (gofs.NodeOpener)((*node)(nil))
	_ = (gofs.NodeCreater)((*node)(nil))
	_ = (gofs.NodeUnlinker)((*node)(nil))
	_ = (gofs.NodeRmdirer)((*node)(nil))
	_ = (gofs.NodeMkdirer)((*node)(nil))
	_ = (gofs.NodeRenamer)((*node)(nil))
	_ = (gofs.NodeOpendirHandler)((*node)(nil))
	_ = (gofs.NodeGetxattrer)((*node)(nil))
	_ = (gofs.NodeListxattrer)((*node)(nil))
	_ = (gofs.NodeSetxattrer)((*node)(nil))
	_ = (gofs.NodeRemovexattrer)((*node)(nil))
	_ = (gofs.NodeStatfser)((*node)(nil))
	_ = (gofs.NodeOnForgetter)((*node)(nil))
)

// OnForget releases the node's inode number once neither the kernel nor go-fuse's tree holds it.
func (n *node) OnForget() { n.fsys.inos.forgot(n) }

// key is the node's store-relative key ("" for the root).
func (n *node) key() string { return n.Path(n.Root()) }

func childKey(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// validName rejects names S3 keys cannot round-trip through a delimiter listing.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.Contains(name, "/") && !strings.ContainsRune(name, 0)
}

// maxName is the longest name the mount creates (NAME_MAX, as Statfs says): an S3 key may hold longer
// ones, but Linux tools assume no name is longer, and servers that store keys as files (versitygw's posix
// backend, MinIO) fail on them with an internal error, which would reach the caller as EIO. Longer names
// written beside the mount are still listed and reachable.
const maxName = 255

// newNameErrno is the errno for making name (create, mkdir, the target of a rename): EINVAL for a name
// that is no S3 key segment, ENAMETOOLONG past maxName, else 0.
func newNameErrno(name string) syscall.Errno {
	switch {
	case !validName(name):
		return syscall.EINVAL
	case len(name) > maxName:
		return syscall.ENAMETOOLONG
	}
	return 0
}

func (f *filesystem) fileAttr(o s3client.Object, out *fuse.Attr) {
	out.Mode = syscall.S_IFREG | 0o644
	out.Size = uint64(o.Size)
	out.Blocks = (out.Size + 511) / 512
	out.Nlink = 1
	f.commonAttr(o, out)
}

func (f *filesystem) dirAttr(o s3client.Object, out *fuse.Attr) {
	out.Mode = syscall.S_IFDIR | 0o755
	out.Nlink = 2
	out.Size = 4096
	f.commonAttr(o, out)
}

// commonAttr sets what files and folders show alike: o's time as all three times (the mount's start
// when the store gives none, a folder without marker), the mount's owner, 1 MiB blocks.
func (f *filesystem) commonAttr(o s3client.Object, out *fuse.Attr) {
	mt := o.ModTime
	if mt.IsZero() {
		mt = f.started
	}
	out.SetTimes(&mt, &mt, &mt)
	out.Owner = fuse.Owner{Uid: f.opts.UID, Gid: f.opts.GID}
	out.Blksize = 1 << 20
}

// stat finds key: a file (HEAD), a directory (anything below key/, or a key/ marker), or nothing. A key
// that is both (S3 allows "a" and "a/x") is shown as the directory, so its contents stay reachable.
// maxAge bounds how old a cached answer may be.
func (f *filesystem) stat(ctx context.Context, key string, maxAge time.Duration) (s3client.Object, error) {
	if f.hidden(key) { // its deletion is acknowledged: gone for every caller, whatever a listing says
		return s3client.Object{}, &fs.PathError{Op: "stat", Path: key, Err: fs.ErrNotExist}
	}
	if e, ok := f.cache.Get(key, maxAge); ok {
		if !e.Exists {
			return s3client.Object{}, &fs.PathError{Op: "stat", Path: key, Err: fs.ErrNotExist}
		}
		return e.Obj, nil
	}
	// A key some listing or HEAD saw before (its entry expired): most likely a walk over a listed folder
	// (rm -rf, find, ls -l taking longer than StatTTL). One listing page from the key on answers it and
	// the next ~1,000 keys, where a HEAD and a one-key listing per key would cost two requests each.
	// Callers that want a fresh answer about one key (maxAge 0: open, create, rename) keep the HEAD.
	if _, ok := f.cache.Get(key, staleHint); ok && maxAge > 0 {
		// A listing the server rejects (a StartAfter past its key length limit: 4xx) falls through to the
		// usual requests; an outage (EIO, after the retries) or an interrupted caller fails the stat.
		o, exists, ok, err := f.refresh(ctx, key)
		if err != nil {
			if e := s3client.Errno(err); e == syscall.EIO || e == syscall.EINTR {
				return s3client.Object{}, err
			}
		} else if ok {
			if !exists {
				return s3client.Object{}, &fs.PathError{Op: "stat", Path: key, Err: fs.ErrNotExist}
			}
			return o, nil
		}
	}
	var (
		wg         sync.WaitGroup
		head       s3client.Object
		headErr    error
		pg         s3client.Page
		listErr    error
		dirMarker  s3client.Object
		haveMarker bool
	)
	started := time.Now() // entries are stamped with it: see s3client.AttrCache
	wg.Add(2)
	go func() { defer wg.Done(); head, headErr = f.c.Head(ctx, key) }()
	go func() { defer wg.Done(); pg, listErr = f.c.ListPage(ctx, key+"/", false, "", "", 1) }()
	wg.Wait()
	if listErr != nil {
		return s3client.Object{}, listErr
	}
	if len(pg.Objects) > 0 {
		if pg.Objects[0].Key == key+"/" {
			dirMarker, haveMarker = pg.Objects[0], true
		}
		d := s3client.Object{Key: key, IsDir: true}
		if haveMarker {
			d.ModTime, d.ETag = dirMarker.ModTime, dirMarker.ETag
		}
		f.cache.PutAt(key, d, true, started)
		return d, nil
	}
	if headErr != nil {
		if errors.Is(headErr, fs.ErrNotExist) {
			f.cache.PutAt(key, s3client.Object{Key: key}, false, started)
		}
		return s3client.Object{}, headErr
	}
	f.cache.PutAt(key, head, true, started)
	return head, nil
}

// staleHint bounds how old a forgotten cache entry may be to make stat refresh a whole listing page.
const staleHint = 10 * time.Minute

// refresh lists the key's folder (with delimiter) from just before key, fills the cache with every entry
// of that page, and answers stat for key when the page is conclusive: it reaches past "key/" (where a
// directory of that name would be listed) or is the folder's last page. ok=false: not conclusive (more
// than a page of keys sort between key and "key/"), the caller asks the usual way.
func (f *filesystem) refresh(ctx context.Context, key string) (o s3client.Object, exists, ok bool, err error) {
	dir := ""
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		dir = key[:i+1]
	}
	pg, err := f.c.ListPage(ctx, dir, true, "", justBefore(key), f.opts.PageSize)
	if err != nil {
		return s3client.Object{}, false, false, err
	}
	last := ""
	seen := make(map[string]bool, len(pg.Prefixes))
	for _, p := range pg.Prefixes {
		last = max(last, p+"/")
		if !validName(strings.TrimPrefix(p, dir)) {
			continue
		}
		seen[p] = true
		d := s3client.Object{Key: p, IsDir: true}
		f.cache.PutAt(p, d, true, pg.Started)
		if p == key {
			o, exists = d, true
		}
	}
	for _, ob := range pg.Objects {
		last = max(last, ob.Key)
		name := strings.TrimPrefix(ob.Key, dir)
		if !validName(name) || seen[ob.Key] {
			continue // the folder's own marker, odd keys, or a file hidden by a directory of the same name
		}
		f.cache.PutAt(ob.Key, ob, true, pg.Started)
		if ob.Key == key {
			o, exists = ob, true
		}
	}
	if o.IsDir || pg.Next == "" || last >= key+"/" {
		if !exists {
			f.cache.PutAt(key, s3client.Object{Key: key}, false, pg.Started)
		}
		return o, exists, true, nil
	}
	return s3client.Object{}, false, false, nil
}

// justBefore returns a StartAfter value for a listing that starts at key: a string below key with no valid
// key between them in practice (the last ASCII byte decremented, then U+10FFFF, the highest code point),
// or key without its last rune when that byte is not plain ASCII.
func justBefore(key string) string {
	c := key[len(key)-1]
	if c > 0x20 && c < 0x7f {
		return key[:len(key)-1] + string(c-1) + "\U0010FFFF"
	}
	_, size := utf8.DecodeLastRuneInString(key)
	return key[:len(key)-size]
}

// newChild makes the node of key (o: what is known of it), numbered after its key (see inodes).
func (n *node) newChild(ctx context.Context, key string, o s3client.Object) *gofs.Inode {
	mode := uint32(syscall.S_IFREG)
	if o.IsDir {
		mode = syscall.S_IFDIR
	}
	child := &node{fsys: n.fsys, obj: o}
	ino, gen := n.fsys.inos.assign(key, o.IsDir, child)
	ch := n.NewInode(ctx, child, gofs.StableAttr{Mode: mode, Ino: ino, Gen: gen})
	n.fsys.inos.touch(child)
	return ch
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if !validName(name) {
		return nil, syscall.ENOENT
	}
	key := childKey(n.key(), name)
	if errno := n.fsys.g.RefuseReserved(ctx, guard.RequestLookup, key, ""); errno != 0 {
		return nil, errno
	}
	// A file being written through the mount exists for its writers before its upload.
	if ch := n.GetChild(name); ch != nil {
		if cn, ok := ch.Operations().(*node); ok && cn.writing() {
			cn.attr(&out.Attr)
			n.fsys.inos.touch(cn)
			return ch, 0
		}
	}
	o, err := n.fsys.stat(ctx, key, n.fsys.opts.StatTTL)
	if err != nil {
		if len(name) > maxName && !errors.Is(err, fs.ErrNotExist) {
			// A server that cannot store the name answers the look-up with an error (versitygw: 400):
			// for the caller that is the name being too long, not an I/O error (a create of it looks
			// it up first). A server that can finds the objects written beside the mount.
			return nil, syscall.ENAMETOOLONG
		}
		return nil, s3client.Errno(err)
	}
	if ch := n.GetChild(name); ch != nil {
		if cn, ok := ch.Operations().(*node); ok && cn.IsDir() == o.IsDir {
			cn.setObj(o)
			cn.attr(&out.Attr)
			n.fsys.inos.touch(cn)
			return ch, 0
		}
	}
	ch := n.newChild(ctx, key, o)
	ch.Operations().(*node).attr(&out.Attr)
	return ch, 0
}

func (n *node) setObj(o s3client.Object) {
	n.mu.Lock()
	n.obj = o
	n.mu.Unlock()
}

// openWriters returns the handles open for writing the file.
func (n *node) openWriters() []*writeHandle {
	n.mu.Lock()
	defer n.mu.Unlock()
	ws := make([]*writeHandle, 0, len(n.writers))
	for w := range n.writers {
		ws = append(ws, w)
	}
	return ws
}

func (n *node) writing() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.writers) > 0
}

// attr fills out from what the node knows; a file open for writing reports its spool's size.
func (n *node) attr(out *fuse.Attr) {
	n.mu.Lock()
	o := n.obj
	var w *writeHandle
	for h := range n.writers {
		w = h
		break
	}
	n.mu.Unlock()
	if n.IsDir() {
		n.fsys.dirAttr(o, out)
		return
	}
	if w != nil {
		if sz, err := w.size(); err == nil {
			o.Size = sz
		}
	}
	n.fsys.fileAttr(o, out)
}

func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if n.IsRoot() || n.IsDir() || n.writing() {
		n.attr(&out.Attr)
		return 0
	}
	key := n.key()
	o, err := n.fsys.stat(ctx, key, n.fsys.opts.StatTTL)
	if err != nil {
		return s3client.Errno(err)
	}
	if !o.IsDir {
		n.setObj(o)
	}
	n.attr(&out.Attr)
	return 0
}

// Setattr: truncation is guarded (OpTruncate) and supported on an open writer's spool, or to size 0 by
// path; mode, owner and times are not stored on S3 and are accepted without effect (so touch, cp -p and
// rsync do not fail).
func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && !n.IsDir() {
		key := n.key()
		ws := n.openWriters()
		if w, ok := fh.(*writeHandle); ok {
			ws = []*writeHandle{w}
		}
		// An open(O_TRUNC) of an existing object reaches the mount as an open for writing followed by a
		// truncate without a handle (the kernel truncates at open only for filesystems that ask for it).
		// That truncation, and a truncate(2) by path while the file is open for writing, is the open
		// writers': on their spools, uploaded at close. An empty object put now would make every writer's
		// upload fail (its If-Match names the version it opened) and leave the file empty.
		if len(ws) > 0 {
			ws[0].mu.Lock()
			seen := ws[0].observedLocked()
			ws[0].mu.Unlock()
			if errno := n.fsys.g.Errno(ctx, guard.Check{Op: verdict.OpTruncate, Path: key, Observed: seen}); errno != 0 {
				return errno
			}
			uploaded := false
			for _, w := range ws {
				w.mu.Lock()
				clean := !w.dirty
				w.mu.Unlock()
				if err := w.truncate(int64(sz)); err != nil {
					return s3client.Errno(err)
				}
				// A truncate(2) by path takes effect before it returns. A writer with nothing left to
				// upload (its last flush put everything: a close whose release is still on its way, a
				// dup'd descriptor still open) would otherwise keep the cut only in a spool that its
				// release discards, and the object would keep its content.
				if fh == nil && clean && !uploaded {
					if errno := w.upload(ctx); errno != 0 {
						return errno
					}
					uploaded = true
				}
			}
		} else {
			if sz != 0 {
				return syscall.EOPNOTSUPP
			}
			o, err := n.fsys.stat(ctx, key, 0)
			if err != nil {
				return s3client.Errno(err)
			}
			if o.Size != 0 {
				kept, errno := n.fsys.keep(ctx, quarantine.OpTruncate, key, o)
				if errno != 0 {
					return errno
				}
				c := guard.Check{Op: verdict.OpTruncate, Path: key, Observed: n.fsys.observed(key, o)}
				errno = n.fsys.g.Change(ctx, []guard.Check{c}, func() syscall.Errno { return n.emptyObject(ctx, key, o) })
				n.fsys.kept(kept, errno)
				if errno != 0 {
					return errno
				}
			}
		}
	}
	n.attr(&out.Attr)
	return 0
}

// emptyObject replaces the version o of key with an empty object (If-Match: another version that replaced
// it meanwhile was not decided about and is kept).
func (n *node) emptyObject(ctx context.Context, key string, o s3client.Object) syscall.Errno {
	etag, err := n.fsys.c.Put(ctx, key, strings.NewReader(""), 0, s3client.PutOptions{IfMatch: o.ETag})
	n.fsys.cache.Drop(key)
	n.fsys.changed(key)
	if err != nil {
		return s3client.Errno(err)
	}
	n.setObj(s3client.Object{Key: key, ETag: etag, ModTime: time.Now()})
	return 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	// S3 has no capacity; report plenty so df, cp and Flink's space checks do not refuse.
	const blocks = 1 << 40
	out.Blocks, out.Bfree, out.Bavail = blocks, blocks, blocks
	out.Files, out.Ffree = 1<<40, 1<<40
	out.Bsize, out.Frsize = 4096, 4096
	out.NameLen = maxName
	return 0
}

// Getxattr serves the guard's attributes (user.ckguard.*) from the index, as the local mount does; S3
// objects have no others.
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if !guard.IsXattr(attr) {
		return 0, syscall.ENODATA
	}
	// Every folder of the mount is 0755 (dirAttr): whoever reaches a file could list every folder, so
	// every referencing checkpoint may be named to them.
	return n.fsys.g.Getxattr(ctx, n.key(), attr, dest, func(string) bool { return true })
}

// Mkdir writes a "name/" marker, so the empty directory exists for other clients too.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if errno := newNameErrno(name); errno != 0 {
		return nil, errno
	}
	key := childKey(n.key(), name)
	if errno := n.fsys.g.RefuseReserved(ctx, guard.RequestMkdir, key, ""); errno != 0 {
		return nil, errno
	}
	if _, err := n.fsys.stat(ctx, key, 0); err == nil {
		return nil, syscall.EEXIST
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, s3client.Errno(err)
	}
	etag, err := n.fsys.c.Put(ctx, key+"/", strings.NewReader(""), 0, s3client.PutOptions{})
	n.fsys.changed(key)
	if err != nil {
		return nil, s3client.Errno(err)
	}
	o := s3client.Object{Key: key, IsDir: true, ModTime: time.Now(), ETag: etag}
	n.fsys.cache.Put(key, o, true)
	ch := n.newChild(ctx, key, o)
	ch.Operations().(*node).attr(&out.Attr)
	return ch, 0
}

// Unlink is guarded (OpUnlink) and deletes with If-Match on the ETag seen before the decision, so an object
// replaced in the meantime is not removed; the decision judges that same version (observed). If the ETag
// was stale (412), it looks again and decides again, once.
//
// A synchronous delete (no queue, queue full, journal failing) is sent under the enforcer's shared lock
// once (s3client.OneAttempt): a failing server costs the lock one request. A retryable failure (503,
// timeout) is retried here, with the lock released: after the client's backoff, on a fresh look, decided
// again; at most the client's attempts, within its operation timeout.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	key := childKey(n.key(), name)
	if errno := n.fsys.g.RefuseReserved(ctx, guard.RequestUnlink, key, ""); errno != 0 {
		return errno
	}
	maxAge := n.fsys.opts.ETagTTL
	if n.fsys.opts.FreshETags {
		maxAge = 0
	}
	deadline := time.Now().Add(n.fsys.c.OpTimeout())
	for attempt, sent := 0, 0; ; attempt++ {
		o, err := n.fsys.stat(ctx, key, maxAge)
		if errors.Is(err, fs.ErrNotExist) && sent > 0 {
			// A delete of ours failed and the object is gone now: the failed request was applied (its
			// answer lost), or someone deleted it beside the mount. Either way the unlink happened, as it
			// would have for the client's own retry (a delete of a missing key succeeds on S3).
			n.fsys.g.Deleted(ctx, key)
			n.fsys.changed(key)
			n.retireChild(name)
			return 0
		}
		if err != nil {
			return s3client.Errno(err)
		}
		if o.IsDir {
			return syscall.EISDIR
		}
		var delErr error
		c := guard.Check{Op: verdict.OpUnlink, Path: key, Observed: n.fsys.observed(key, o)}
		who := n.fsys.g.Staged(ctx, quarantine.OpUnlink, quarantine.ReasonAllowed, "")
		errno := n.fsys.g.Remove(ctx, c, func() (bool, syscall.Errno) {
			if n.fsys.enqueue(key, o, who) {
				return false, 0 // acknowledged: in the durable queue, applied (and decided again) shortly
			}
			sent++
			delErr = n.fsys.removeObject(quarantine.WithDecision(s3client.OneAttempt(ctx), who), key, o)
			return delErr == nil, s3client.Errno(delErr)
		})
		if errors.Is(delErr, s3client.ErrPrecondition) && attempt == 0 {
			n.fsys.cache.Drop(key)
			maxAge = 0
			continue
		}
		if s3client.Retryable(delErr) && sent < n.fsys.c.MaxAttempts() && n.fsys.pause(ctx, sent, deadline) {
			n.fsys.cache.Drop(key)
			maxAge = 0
			continue
		}
		if errors.Is(delErr, fs.ErrNotExist) { // deleted beside us between stat and delete
			n.fsys.cache.Put(key, s3client.Object{Key: key}, false)
		}
		n.fsys.changed(key) // queued (hidden from now on) or deleted
		if errno == 0 {
			n.retireChild(name)
		}
		return errno
	}
}

// pause waits the client's backoff before retry number retry of a request sent once under the
// enforcer's lock; false when ctx ends or the wait would pass deadline (the operation's bound).
func (f *filesystem) pause(ctx context.Context, retry int, deadline time.Time) bool {
	d := f.c.Backoff(retry)
	if time.Now().Add(d).After(deadline) {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Rmdir removes an empty directory: ENOTEMPTY while any key is below it; otherwise the guarded (OpRmdir)
// delete of its "name/" marker if there is one. A directory that existed only implicitly (as the prefix of
// keys now deleted) has nothing left to delete: rmdir succeeds.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	key := childKey(n.key(), name)
	if errno := n.fsys.g.RefuseReserved(ctx, guard.RequestRmdir, key, ""); errno != 0 {
		return errno
	}
	marker, empty, errno := n.fsys.emptyDir(ctx, key)
	if errno != 0 {
		return errno
	}
	if !empty {
		return syscall.ENOTEMPTY
	}
	if marker == nil {
		// Implicit directory: S3 may still hold "key" as a file, which rmdir must not touch.
		if _, err := n.fsys.c.Head(ctx, key); err == nil && !n.fsys.hidden(key) {
			return syscall.ENOTDIR
		}
	}
	errno = n.fsys.g.Remove(ctx, guard.Check{Op: verdict.OpRmdir, Path: key}, func() (bool, syscall.Errno) {
		errno := n.fsys.removeDir(ctx, key, marker)
		return errno == 0, errno
	})
	n.fsys.changedTree(key)
	if errno == 0 {
		n.retireChild(name)
	}
	return errno
}

// retireChild retires the inode number of the child name removed (see inodes.retire): the kernel may
// hold it a while (an open file), and a new object of the same name must not share it.
func (n *node) retireChild(name string) {
	if ch := n.GetChild(name); ch != nil {
		if cn, ok := ch.Operations().(*node); ok {
			n.fsys.inos.retire(cn)
		}
	}
}

// removeObject deletes (with --quarantine: stages) the version o of key (If-Match, where the server
// honours it: a version that replaced it meanwhile was not decided about and is kept) and shows key as
// gone.
func (f *filesystem) removeObject(ctx context.Context, key string, o s3client.Object) error {
	if err := f.deleter().Delete(ctx, key, f.deleteIf(o.ETag)); err != nil {
		return err
	}
	f.cache.Put(key, s3client.Object{Key: key}, false)
	f.changed(key)
	return nil
}

// removeDir deletes the empty directory key: its "key/" marker if it has one (an implicit directory has
// nothing to delete), and shows it as gone.
func (f *filesystem) removeDir(ctx context.Context, key string, marker *s3client.Object) syscall.Errno {
	if marker != nil {
		if err := f.c.Delete(ctx, key+"/", f.deleteIf(marker.ETag)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return s3client.Errno(err)
		}
	}
	f.cache.DropTree(key)
	f.cache.Put(key, s3client.Object{Key: key}, false)
	f.changedTree(key)
	return 0
}

// Rename of a file is CopyObject (conditional on the source ETag) then DeleteObject (conditional on the same
// ETag), both under one guarded decision: the source (OpRename) and an existing target (OpReplace). A
// directory rename would be one copy and one delete per object below it, not atomic and unbounded: it is
// refused with EXDEV, so mv falls back to copying and unlinking file by file, each through the guard.
func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags&^renameNoReplace != 0 {
		return syscall.EINVAL // RENAME_EXCHANGE / RENAME_WHITEOUT cannot be done on S3
	}
	if errno := newNameErrno(newName); errno != 0 {
		return errno
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
	if src == dst {
		return 0
	}
	if errno := n.fsys.settle(ctx, dst); errno != 0 { // the copy is create-only where no target shows
		return errno
	}
	so, err := n.fsys.stat(ctx, src, 0)
	if err != nil {
		return s3client.Errno(err)
	}
	if so.IsDir {
		return syscall.EXDEV
	}
	// Flink's recoverable writer commits a checkpoint by renaming chk-N/._metadata.inprogress.<uuid> onto
	// chk-N/_metadata; its source is young by nature, so (exactly as on the local mount) a grace refusal of
	// that source, and only that, is allowed by the enforcer. S3 objects have a single name.
	commit := guard.IsMetadataCommit(guard.RenameFacts{SameDir: np == n, OldName: name, NewName: newName,
		Regular: true, Nlink: 1})
	checks := []guard.Check{{Op: verdict.OpRename, Path: src, To: dst, MetadataCommit: commit, Observed: n.fsys.observed(src, so)}}
	do, err := n.fsys.stat(ctx, dst, 0)
	dstExists := err == nil
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return s3client.Errno(err)
	case dstExists && do.IsDir:
		return syscall.EISDIR
	case dstExists && flags&renameNoReplace != 0:
		return syscall.EEXIST
	case dstExists:
		checks = append(checks, guard.Check{Op: verdict.OpReplace, Path: dst, To: src, Observed: n.fsys.observed(dst, do)})
	}
	var replaced *s3client.Object
	var kept *quarantine.Entry
	if dstExists {
		replaced = &do
		// With a quarantine the version replaced is staged first (a copy: before the lock).
		var errno syscall.Errno
		if kept, errno = n.fsys.keep(ctx, quarantine.OpReplace, dst, do); errno != 0 {
			return errno
		}
	}
	errno := n.fsys.g.Rename(ctx, checks, func() (bool, syscall.Errno) {
		moved, err := n.fsys.moveObject(ctx, src, dst, so, replaced)
		if err == nil {
			if ch := n.GetChild(name); ch != nil {
				if cn, ok := ch.Operations().(*node); ok {
					cn.setObj(moved)
				}
			}
		}
		// Even a failed move may have copied (an applied request whose answer was lost): the index
		// looks at both names, so a _metadata that did appear is never unknown to it, and it retires
		// only what the store confirms gone.
		return true, s3client.Errno(err)
	})
	n.fsys.kept(kept, errno)
	n.fsys.changed(src) // even a failed move may have copied
	n.fsys.changed(dst)
	if errno == 0 {
		// go-fuse moves the node to the new name once this returns: its number names dst now, and the
		// replaced node's (the kernel may still hold it) names nothing.
		if dstExists {
			np.retireChild(newName)
		}
		if ch := n.GetChild(name); ch != nil {
			if cn, ok := ch.Operations().(*node); ok {
				n.fsys.inos.rekey(cn, dst)
			}
		}
	}
	return errno
}

// moveObject copies the version so of src to dst (If-Match on the version replaced, the decided target;
// create-only where none was) and deletes that version of src. It returns the object now at dst.
func (f *filesystem) moveObject(ctx context.Context, src, dst string, so s3client.Object, replaced *s3client.Object) (s3client.Object, error) {
	po := s3client.PutOptions{IfNoneMatch: replaced == nil}
	if replaced != nil {
		po.IfMatch = replaced.ETag
	}
	etag, err := f.c.Copy(ctx, src, dst, so.ETag, po)
	f.cache.Drop(dst)
	if err != nil {
		return s3client.Object{}, err
	}
	if err := f.c.Delete(ctx, src, f.deleteIf(so.ETag)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		// The copy exists, the source too: nothing is lost, the rename did not happen as one step.
		f.log.Error("rename: copied but could not delete the source; both exist now", "from", src, "to", dst, "err", err)
		f.cache.Drop(src)
		return s3client.Object{}, err
	}
	o := s3client.Object{Key: dst, Size: so.Size, ETag: etag, ModTime: time.Now()}
	f.cache.Put(src, s3client.Object{Key: src}, false)
	f.cache.Put(dst, o, true)
	return o, nil
}

// deleteIf is the If-Match a DeleteObject carries: the ETag decided on, or none where the start-up probe
// did not show the server honouring it (FreshETags). Such a server either ignores the condition, so it
// protects nothing, or refuses every conditional delete, so nothing could be deleted.
func (f *filesystem) deleteIf(etag string) string {
	if f.opts.FreshETags {
		return ""
	}
	return etag
}

// observed is the observation of key a check carries (Check.Observed) when the change after the decision
// is a request conditional on o's ETag (If-Match): the index's decision (s3store's StatObserved) then
// judges exactly the version o, never another entry the shared cache got in between (a listing, a HEAD).
// Where the server ignores If-Match (FreshETags) every caller hands o fresh from a HEAD of its own, just
// taken: the decision judges that too, rather than a second HEAD that a flapping server may answer with
// 404, which would make the object count as gone and its deletion allowed. An object without an ETag has
// no condition, and nil is returned.
func (f *filesystem) observed(key string, o s3client.Object) *store.ObjectInfo {
	if o.ETag == "" || o.IsDir {
		return nil
	}
	return &store.ObjectInfo{Path: key, Size: o.Size, ModTime: o.ModTime, ETag: o.ETag}
}

// renameNoReplace is renameat2's RENAME_NOREPLACE (go-fuse only names RENAME_EXCHANGE).
const renameNoReplace = 0x1

// emptyDir lists below key/ for rmdir: the directory's own marker (if any) and whether nothing else is
// there. Keys whose deletion is queued count as gone; the queued deletions below key are applied first
// (briefly waited for), so an implicit directory is really gone when rmdir returns.
func (f *filesystem) emptyDir(ctx context.Context, key string) (marker *s3client.Object, empty bool, errno syscall.Errno) {
	size := int32(2)
	if f.q != nil && f.q.AnyPending() {
		fctx, cancel := context.WithTimeout(ctx, settleTimeout)
		f.q.Flush(fctx, key)
		cancel()
		size = f.opts.PageSize
	}
	for tok := ""; ; {
		pg, err := f.c.ListPage(ctx, key+"/", false, tok, "", size)
		if err != nil {
			return nil, false, s3client.Errno(err)
		}
		for i, o := range pg.Objects {
			if o.Key == key+"/" {
				marker = &pg.Objects[i]
				continue
			}
			if !f.hidden(o.Key) {
				return nil, false, 0
			}
		}
		if pg.Next == "" {
			return marker, true, 0
		}
		tok = pg.Next
	}
}
