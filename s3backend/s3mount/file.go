package s3mount

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/verdict"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

var (
	_ = (gofs.FileReader)((*readHandle)(nil))
	_ = (gofs.FileReleaser)((*readHandle)(nil))
	_ = (gofs.FileReader)((*writeHandle)(nil))
	_ = (gofs.FileWriter)((*writeHandle)(nil))
	_ = (gofs.FileFlusher)((*writeHandle)(nil))
	_ = (gofs.FileFsyncer)((*writeHandle)(nil))
	_ = (gofs.FileReleaser)((*writeHandle)(nil))
	_ = (gofs.FileGetattrer)((*writeHandle)(nil))
)

// Open: read-only opens read with ranged GETs; O_TRUNC is guarded as OpTruncate, other writable opens as
// OpWrite (refused for referenced objects). A writable open of an existing object copies it into the spool
// (unless truncated) and uploads it on close, replacing only the version it started from (If-Match).
func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	key := n.key()
	o, err := n.fsys.stat(ctx, key, 0)
	if err != nil {
		return nil, 0, s3client.Errno(err)
	}
	return n.openObject(ctx, key, o, flags)
}

// openObject opens the object o found at key (n's key; passed in because a node Create just made is not in
// the tree yet, so n.key() cannot name it).
func (n *node) openObject(ctx context.Context, key string, o s3client.Object, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if o.IsDir {
		return nil, 0, syscall.EISDIR
	}
	n.setObj(o)
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) == 0 {
		if flags&syscall.O_TRUNC != 0 {
			return nil, 0, syscall.EINVAL
		}
		return newReadHandle(n.fsys, key, o), 0, 0
	}
	op := guard.OpenOp(flags)
	w, errno := n.openWriter(ctx, key, o, op)
	if errno != 0 {
		return nil, 0, errno
	}
	if op == verdict.OpWrite && o.Size > 0 {
		// Read-modify-write: start from the current object (pinned to its ETag).
		buf := make([]byte, 8<<20)
		for off := int64(0); off < o.Size; {
			m, err := n.fsys.c.ReadAt(ctx, key, buf[:min(int64(len(buf)), o.Size-off)], off, o.ETag)
			if m > 0 {
				if _, werr := w.spool.WriteAt(buf[:m], off); werr != nil {
					w.discard()
					return nil, 0, syscall.EIO
				}
			}
			off += int64(m)
			if err != nil && err != io.EOF {
				w.discard()
				return nil, 0, s3client.Errno(err)
			}
			if m == 0 {
				break
			}
		}
	} else {
		w.dirty = true // truncated: close uploads the (possibly empty) new content
	}
	n.addWriter(w)
	return w, fuse.FOPEN_DIRECT_IO, 0
}

// Create makes a new file in the spool; it is uploaded create-only (If-None-Match: *) on close, so it never
// replaces an object that appeared in the meantime.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if errno := newNameErrno(name); errno != 0 {
		return nil, nil, 0, errno
	}
	key := childKey(n.key(), name)
	if errno := n.fsys.g.RefuseReserved(ctx, guard.RequestCreate, key, ""); errno != 0 {
		return nil, nil, 0, errno
	}
	if errno := n.fsys.settle(ctx, key); errno != 0 { // the upload is create-only: the old object must be gone
		return nil, nil, 0, errno
	}
	if o, err := n.fsys.stat(ctx, key, 0); err == nil {
		if flags&syscall.O_EXCL != 0 {
			return nil, nil, 0, syscall.EEXIST
		}
		if o.IsDir {
			return nil, nil, 0, syscall.EISDIR
		}
		// The kernel thought it was missing (the object appeared beside the mount): open it as the caller
		// asked. Without O_TRUNC that is a read-modify-write (an append must not truncate the object).
		if flags&syscall.O_TRUNC == 0 {
			ch := n.newChild(ctx, key, o)
			cn := ch.Operations().(*node)
			fh, fflags, errno := cn.openObject(ctx, key, o, flags)
			if errno != 0 {
				n.fsys.inos.forgot(cn) // never handed to the kernel
				return nil, nil, 0, errno
			}
			cn.attr(&out.Attr)
			return ch, fh, fflags, 0
		}
		ch := n.newChild(ctx, key, o)
		cn := ch.Operations().(*node)
		w, errno := cn.openWriter(ctx, key, o, verdict.OpTruncate)
		if errno != 0 {
			n.fsys.inos.forgot(cn) // never handed to the kernel
			return nil, nil, 0, errno
		}
		w.dirty = true
		cn.addWriter(w)
		cn.attr(&out.Attr)
		return ch, w, fuse.FOPEN_DIRECT_IO, 0
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, 0, s3client.Errno(err)
	}
	ch := n.newChild(ctx, key, s3client.Object{Key: key, ModTime: time.Now()})
	cn := ch.Operations().(*node)
	w, err := cn.newWriteHandle(key, s3client.PutOptions{IfNoneMatch: true})
	if err != nil {
		n.fsys.inos.forgot(cn)
		return nil, nil, 0, syscall.EIO
	}
	w.dirty = true
	cn.addWriter(w)
	n.fsys.cache.Drop(key)
	n.fsys.changed(key)
	cn.attr(&out.Attr)
	return ch, w, fuse.FOPEN_DIRECT_IO, 0
}

// openWriter opens the object o at key for writing as op (OpTruncate or OpWrite; decided through the
// enforcer's Open verb): the handle replaces exactly o (If-Match) when it uploads, and decides op
// again then. Only the handle is made under the enforcer's lock; the copy of o into its spool, a read
// that can take long, is the caller's, after the lock.
func (n *node) openWriter(ctx context.Context, key string, o s3client.Object, op verdict.Op) (*writeHandle, syscall.Errno) {
	var w *writeHandle
	errno := n.fsys.g.Open(ctx, guard.Check{Op: op, Path: key, Observed: n.fsys.observed(key, o)}, func() syscall.Errno {
		var err error
		if w, err = n.newWriteHandle(key, s3client.PutOptions{IfMatch: o.ETag}); err != nil {
			return syscall.EIO
		}
		return 0
	})
	if errno != 0 {
		return nil, errno
	}
	w.redecide, w.base = op, o
	return w, 0
}

func (n *node) addWriter(w *writeHandle) {
	n.mu.Lock()
	if n.writers == nil {
		n.writers = map[*writeHandle]bool{}
	}
	n.writers[w] = true
	n.mu.Unlock()
}

func (n *node) removeWriter(w *writeHandle) {
	n.mu.Lock()
	delete(n.writers, w)
	n.mu.Unlock()
}

// writeHandle spools writes to a local file and uploads it when the file is closed (flush) or fsync'ed.
type writeHandle struct {
	n     *node
	key   string
	spool *os.File
	cond  s3client.PutOptions
	// redecide is the operation the open of an existing object was decided as; the first upload, which is
	// when the object is really replaced, decides it again: a checkpoint indexed since the open may have
	// come to reference the object. 0 once the handle has replaced it (the object is then the
	// handle's own content, pinned by If-Match) and for objects the handle created.
	redecide verdict.Op
	// base is the version cond.IfMatch names until the first upload (the object the open found), so that
	// decisions about replacing it judge that version (observed), not whatever the cache holds by then.
	base s3client.Object

	mu    sync.Mutex
	dirty bool
	// cut: the content to upload is base cut short (an O_TRUNC open, a truncation of the spool), so the
	// upload destroys base's content; with a quarantine it is staged first (keep).
	cut bool
}

func (n *node) newWriteHandle(key string, cond s3client.PutOptions) (*writeHandle, error) {
	f, err := os.CreateTemp(n.fsys.opts.SpoolDir, "spool-*")
	if err != nil {
		n.fsys.log.Error("cannot create a spool file", "dir", n.fsys.opts.SpoolDir, "err", err)
		return nil, err
	}
	_ = os.Remove(f.Name()) // anonymous: a crash leaves nothing behind
	return &writeHandle{n: n, key: key, spool: f, cond: cond}, nil
}

func (w *writeHandle) size() (int64, error) {
	st, err := w.spool.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (w *writeHandle) truncate(sz int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dirty = true
	if sz < w.base.Size {
		w.cut = true
	}
	return w.spool.Truncate(sz)
}

func (w *writeHandle) discard() { _ = w.spool.Close() }

func (w *writeHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	m, err := w.spool.ReadAt(dest, off)
	if err != nil && err != io.EOF {
		return nil, syscall.EIO
	}
	return fuse.ReadResultData(dest[:m]), 0
}

func (w *writeHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m, err := w.spool.WriteAt(data, off)
	w.dirty = true
	if err != nil {
		return uint32(m), syscall.EIO
	}
	return uint32(m), 0
}

func (w *writeHandle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	w.n.attr(&out.Attr)
	return 0
}

// Flush runs on every close(2): the spool is uploaded (multipart above PartSize), then the index learns of
// it (a _metadata is parsed and indexed before close returns). An upload error is close's error.
func (w *writeHandle) Flush(ctx context.Context) syscall.Errno { return w.upload(ctx) }

func (w *writeHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno { return w.upload(ctx) }

func (w *writeHandle) upload(ctx context.Context) syscall.Errno {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.dirty {
		return 0
	}
	fsys := w.n.fsys
	if w.redecide != 0 {
		if errno := fsys.g.Errno(ctx, guard.Check{Op: w.redecide, Path: w.key, Observed: w.observedLocked()}); errno != 0 {
			return errno
		}
	}
	sz, err := w.size()
	if err != nil {
		return syscall.EIO
	}
	// The first upload replaces base (If-Match): with cut content, base's is staged first.
	var kept *quarantine.Entry
	if (w.cut || w.redecide == verdict.OpTruncate) && w.base.ETag != "" && w.cond.IfMatch == w.base.ETag {
		var errno syscall.Errno
		if kept, errno = fsys.keep(ctx, quarantine.OpTruncate, w.key, w.base); errno != 0 {
			return errno
		}
	}
	etag, err := fsys.c.Upload(ctx, w.key, w.spool, sz, fsys.opts.PartSize, fsys.opts.UploadParallel, w.cond)
	fsys.cache.Drop(w.key)
	fsys.changed(w.key) // even a failed upload may have been stored
	fsys.kept(kept, s3client.Errno(err))
	if err != nil {
		fsys.log.Error("upload failed", "key", w.key, "err", err)
		if flinklayout.IsMetadata(w.key) {
			// The server may have stored it all the same (a retried request whose first attempt was
			// applied, an interrupted one it completed): the index looks, so a checkpoint that did
			// appear is never unknown to it.
			fsys.g.Written(ctx, w.key)
		}
		return s3client.Errno(err)
	}
	w.dirty = false
	w.redecide = 0
	w.cut = false
	// Later uploads through this handle replace exactly what it wrote.
	w.cond = s3client.PutOptions{IfMatch: etag}
	o := s3client.Object{Key: w.key, Size: sz, ETag: etag, ModTime: time.Now()}
	w.n.setObj(o)
	fsys.cache.Put(w.key, o, true)
	return fsys.g.Written(ctx, w.key)
}

// observedLocked pins decisions about replacing the object to the version the next upload replaces
// (Check.Observed), while that is still the one the open found. w.mu held.
func (w *writeHandle) observedLocked() *store.ObjectInfo {
	// Where the server ignores If-Match the upload does not replace exactly base, so the decision keeps
	// its own, later HEAD: base may be minutes old.
	if w.base.ETag == "" || w.base.ETag != w.cond.IfMatch || w.n.fsys.opts.FreshETags {
		return nil
	}
	return w.n.fsys.observed(w.key, w.base)
}

func (w *writeHandle) Release(ctx context.Context) syscall.Errno {
	w.n.removeWriter(w)
	_ = w.spool.Close()
	return 0
}
