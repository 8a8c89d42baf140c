package hdfsmount

import (
	"context"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/listorder"
	"github.com/ckguard/ckguard/fs/mountutil"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/refindex/flinklayout"
)

var (
	_ gofs.NodeOpendirHandler = (*node)(nil)
	_ gofs.FileReaddirenter   = (*dirHandle)(nil)
	_ gofs.FileSeekdirer      = (*dirHandle)(nil)
	_ gofs.FileReleasedirer   = (*dirHandle)(nil)
)

// OpendirHandle returns a streaming directory handle.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return &dirHandle{fsys: n.fsys, key: n.key()}, 0, 0
}

// dirHandle streams a directory listing page by page (one getListing RPC each): the kernel gets the
// first entries after one RPC, the next page is fetched while it consumes the current one, and memory
// stays at about two pages however big the directory.
//
// Order, as on the other mounts (fs/listorder): `_metadata`, then chk-* newest first, then the rest, so
// rm -rf / find -delete retire each checkpoint before reaching its files. The NameNode lists in name
// order, where `_metadata` and every chk-* name come before any name greater than "chk-" that is not
// one of them: pages are held until such a name (or the end) is seen, then what is held is served in
// cleanup order and the rest streams as it comes. Only the order depends on that: an entry arriving
// later than expected is still served, in listing order.
//
// Every page fills the attribute cache (one insertion a page) stamped with a time no later than the RPC that listed it
// (attrCache), so the kernel's LOOKUPs and the unlinks that follow cost no stat each.
//
// An RPC failure mid-listing is returned to the reader (EIO and the like), never taken for the end of
// the directory.
type dirHandle struct {
	fsys *filesystem
	key  string

	started bool
	ordered bool            // the held entries were served in cleanup order
	held    []fuse.DirEntry // entries received before the order is known
	pos     uint64
	queue   []fuse.DirEntry
	pages   chan dirPage // nil once the listing ended
	errno   syscall.Errno
	cancel  context.CancelFunc
}

type dirPage struct {
	ents []fuse.DirEntry
	err  error // set on the last message when the listing failed
	end  bool  // the last message
}

// start takes the directory's prefetched listing when there is a fresh one, else starts listing it.
func (d *dirHandle) start() {
	st := d.fsys.pre.take(d.key)
	if st == nil {
		st = d.fsys.stream(d.key)
	}
	d.pages, d.cancel = st.pages, st.cancel
}

// stream is one directory listing running in the background, a page ahead of its reader.
type stream struct {
	pages   chan dirPage
	cancel  context.CancelFunc
	started time.Time // no later than its first getListing RPC
}

// stream starts listing key.
func (f *filesystem) stream(key string) *stream {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan dirPage, 1)
	st := &stream{pages: ch, cancel: cancel, started: time.Now()}
	go func() {
		stamp := st.started
		err := f.fs.List(ctx, f.abs(key), func(page []hdfsclient.FileInfo) error {
			ents := f.entries(key, page, stamp)
			select {
			case ch <- dirPage{ents: ents}:
			case <-ctx.Done():
				return ctx.Err()
			}
			stamp = time.Now() // the next RPC starts after this
			return nil
		})
		select {
		case ch <- dirPage{err: err, end: true}:
		case <-ctx.Done():
		}
	}()
	return st
}

// entries converts a page, filling the attribute cache with what it listed at `at` (the cache keeps the
// page: nothing changes it afterwards).
func (f *filesystem) entries(key string, page []hdfsclient.FileInfo, at time.Time) []fuse.DirEntry {
	f.attrs.put(key, page, at)
	out := make([]fuse.DirEntry, 0, len(page))
	for _, fi := range page {
		if !validName(fi.Name) || fi.Symlink || guard.ReservedName(key, fi.Name) {
			continue
		}
		mode := uint32(syscall.S_IFREG)
		if fi.IsDir {
			mode = syscall.S_IFDIR
		}
		out = append(out, fuse.DirEntry{Name: fi.Name, Mode: mode})
	}
	return out
}

// pastOrdered reports whether a listing in name order that reached name has listed every `_metadata`
// and chk-* entry of the directory.
func pastOrdered(name string) bool {
	return name > flinklayout.CheckpointPrefix && flinklayout.Class(name) == 3
}

// next receives one message of the listing; false when it has ended (d.errno set on failure) or ctx
// was cancelled (the request interrupted).
func (d *dirHandle) next(ctx context.Context) ([]fuse.DirEntry, bool) {
	if d.pages == nil {
		return nil, false
	}
	var p dirPage
	select {
	case p = <-d.pages:
	case <-ctx.Done():
		return nil, false // interrupted: the kernel asks again, the listing goes on
	}
	if p.end {
		d.pages = nil
		if p.err != nil {
			d.errno = hdfsclient.Errno(p.err)
		}
		return nil, false
	}
	return p.ents, true
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if !d.started {
		d.started = true
		d.start()
	}
	if !d.ordered {
		for {
			ents, ok := d.next(ctx)
			if !ok {
				if d.pages != nil {
					return nil, syscall.EINTR // what is held stays held
				}
				if d.errno != 0 {
					return nil, d.errno
				}
				break
			}
			d.held = append(d.held, ents...)
			if len(ents) > 0 && pastOrdered(ents[len(ents)-1].Name) {
				break
			}
		}
		d.ordered = true
		d.queue, d.held = listorder.Order(d.held), nil
		d.prefetchDirs()
	}
	for len(d.queue) == 0 {
		ents, ok := d.next(ctx)
		if !ok {
			if d.pages != nil {
				return nil, syscall.EINTR
			}
			return nil, d.errno
		}
		d.queue = ents
		d.prefetchDirs()
	}
	// A pointer into the queue, not a copy: no allocation per entry (go-fuse copies it at once).
	e := &d.queue[0]
	d.queue = d.queue[1:]
	d.pos++
	return e, 0
}

// prefetchDirs asks for the listings of the subdirectories just queued, in the order they are served
// (the order a recursive walk descends in).
func (d *dirHandle) prefetchDirs() {
	var dirs []string
	for _, e := range d.queue {
		if e.Mode == syscall.S_IFDIR {
			dirs = append(dirs, childKey(d.key, e.Name))
		}
	}
	d.fsys.pre.want(dirs)
}

// Seekdir restarts the listing and skips off entries (rewinddir is off 0). Listings are not snapshots:
// a seek into a directory that changed meanwhile may repeat or miss entries, as on NFS.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.release()
	*d = dirHandle{fsys: d.fsys, key: d.key}
	return mountutil.SkipEntries(ctx, off, &d.pos, d.Readdirent)
}

func (d *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) { d.release() }

func (d *dirHandle) release() {
	if d.cancel != nil {
		d.cancel()
	}
	d.queue = nil
}
