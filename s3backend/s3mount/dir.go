package s3mount

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckguard/ckguard/fs/listorder"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

var (
	_ = (gofs.FileReaddirenter)((*dirHandle)(nil))
	_ = (gofs.FileSeekdirer)((*dirHandle)(nil))
	_ = (gofs.FileReleasedirer)((*dirHandle)(nil))
)

// OpendirHandle returns a streaming directory handle.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return &dirHandle{fsys: n.fsys, dir: n.key(), n: n}, 0, 0
}

// dirHandle lists a directory page by page (ListObjectsV2 with delimiter), so the first entries of a
// 100,000-entry folder are returned after one request and memory stays at two pages (the one served and the one prefetched).
//
// Order, as on the local mount (fs/localfs): `_metadata` first, then chk-* newest first, then the rest, so
// rm -rf / find -delete retire each checkpoint before reaching its files. A folder that fits in one page is
// ordered in memory. A bigger one cannot be sorted while streaming, so it is served in three phases: a HEAD
// of `_metadata`; a delimiter listing of the chk-* names alone (few: one per retained checkpoint), sorted;
// then the full listing streamed, skipping the names already returned. Every entry also fills the stat cache,
// so the kernel's LOOKUP/GETATTR that follow (readdirplus) cost no request.
type dirHandle struct {
	fsys *filesystem
	dir  string
	n    *node // the directory (entries carry the inode numbers stat shows)

	started bool
	pos     uint64          // entries returned so far (the seekdir offset)
	queue   []fuse.DirEntry // entries ready to return
	more    bool            // the streamed listing has more pages
	// next is the following page, fetched while the kernel consumes this one; lastToken its continuation
	// token (to ask again after an error).
	next      chan pageResult
	lastToken string
	ctx       context.Context // prefetches run in it; cancelled on release
	cancel    context.CancelFunc
}

type pageResult struct {
	pg  s3client.Page
	err error
}

// prefetch starts fetching the page after token, so S3's latency overlaps with the kernel consuming the
// current page (one page of look-ahead: memory stays at two pages).
func (d *dirHandle) prefetch(token string) {
	if d.cancel == nil {
		var ctx context.Context
		ctx, d.cancel = context.WithCancel(context.Background())
		d.ctx = ctx
	}
	ch := make(chan pageResult, 1)
	d.next = ch
	ctx := d.ctx
	go func() {
		pg, err := d.list(ctx, token)
		ch <- pageResult{pg, err}
	}()
}

func (d *dirHandle) prefix() string {
	if d.dir == "" {
		return ""
	}
	return d.dir + "/"
}

// entries converts a page to directory entries, filling the stat cache.
func (d *dirHandle) entries(pg s3client.Page) []fuse.DirEntry {
	p := d.prefix()
	out := make([]fuse.DirEntry, 0, len(pg.Objects)+len(pg.Prefixes))
	seen := make(map[string]bool, len(pg.Prefixes))
	for _, pre := range pg.Prefixes {
		name := strings.TrimPrefix(pre, p)
		if !validName(name) || seen[name] || hiddenKey(p+name) {
			continue
		}
		seen[name] = true
		d.fsys.cache.PutAt(pre, s3client.Object{Key: pre, IsDir: true}, true, pg.Started)
		out = append(out, fuse.DirEntry{Name: name, Mode: syscall.S_IFDIR})
	}
	for _, o := range pg.Objects {
		name := strings.TrimPrefix(o.Key, p)
		isDir := false
		if trimmed, ok := strings.CutSuffix(name, "/"); ok { // a "dir/" marker some servers list as an object
			name, isDir = trimmed, true
		}
		if !validName(name) || seen[name] || hiddenKey(p+name) {
			continue // the folder's own marker, the quarantine area, or odd keys ("a//b") POSIX cannot name
		}
		seen[name] = true
		if isDir {
			d.fsys.cache.PutAt(p+name, s3client.Object{Key: p + name, IsDir: true, ModTime: o.ModTime, ETag: o.ETag}, true, pg.Started)
			out = append(out, fuse.DirEntry{Name: name, Mode: syscall.S_IFDIR})
			continue
		}
		o.Key = p + name
		if d.fsys.hidden(o.Key) {
			continue // deleted through the mount, the queue has not applied it yet
		}
		d.fsys.cache.PutAt(o.Key, o, true, pg.Started)
		out = append(out, fuse.DirEntry{Name: name, Mode: syscall.S_IFREG})
	}
	return out
}

func (d *dirHandle) list(ctx context.Context, token string) (s3client.Page, error) {
	return d.fsys.c.ListPage(ctx, d.prefix(), true, token, "", d.fsys.opts.PageSize)
}

// begin fetches the first page and decides between the one-page and the streaming mode.
func (d *dirHandle) begin(ctx context.Context) syscall.Errno {
	pg, err := d.first(ctx)
	if err != nil {
		return s3client.Errno(err)
	}
	d.started = true
	ents := d.entries(pg)
	if pg.Next == "" {
		d.queue = listorder.Order(ents)
		d.listAhead()
		return 0
	}
	d.more = true
	d.lastToken = pg.Next
	d.prefetch(pg.Next)
	// The HEAD of `_metadata` runs beside the chk-* listing (both are needed before the first entry).
	metaKey := d.prefix() + "_metadata"
	type headResult struct {
		o       s3client.Object
		err     error
		started time.Time
	}
	hc := make(chan headResult, 1)
	go func() {
		started := time.Now()
		o, err := d.fsys.c.Head(ctx, metaKey)
		hc <- headResult{o, err, started}
	}()
	var chk []fuse.DirEntry
	var chkErr error
	for tok := ""; ; {
		cp, err := d.fsys.c.ListPage(ctx, d.prefix()+"chk-", true, tok, "", d.fsys.opts.PageSize)
		if err != nil {
			chkErr = err
			break
		}
		chk = append(chk, d.entries(cp)...)
		if cp.Next == "" {
			break
		}
		tok = cp.Next
	}
	h := <-hc
	var head []fuse.DirEntry
	if h.err == nil {
		d.fsys.cache.PutAt(metaKey, h.o, true, h.started)
		head = append(head, fuse.DirEntry{Name: "_metadata", Mode: syscall.S_IFREG})
	} else if !errors.Is(h.err, fs.ErrNotExist) {
		return s3client.Errno(h.err)
	}
	if chkErr != nil {
		return s3client.Errno(chkErr)
	}
	listorder.SortCheckpoints(chk)
	d.queue = append(append(head, chk...), skipOrdered(ents)...)
	d.listAhead()
	return 0
}

// first is the folder's first page: the one listed ahead when it is fresh and succeeded (it is the same
// request as d.list(ctx, "")), else listed now.
func (d *dirHandle) first(ctx context.Context) (s3client.Page, error) {
	if a := d.fsys.ahead.take(d.dir); a != nil {
		select {
		case <-a.done:
			if a.err == nil {
				d.fsys.ahead.served.Add(1)
				return a.pg, nil
			}
		case <-ctx.Done():
			a.cancel()
			return s3client.Page{}, ctx.Err()
		}
	}
	return d.list(ctx, "")
}

// listAhead asks for the first pages of the subfolders just queued, in the order they are served (the
// order a recursive walk descends in).
func (d *dirHandle) listAhead() {
	var dirs []string
	for _, e := range d.queue {
		if e.Mode == syscall.S_IFDIR {
			dirs = append(dirs, childKey(d.dir, e.Name))
		}
	}
	d.fsys.ahead.want(dirs)
}

// skipOrdered drops the names the big-folder mode returned up front.
func skipOrdered(ents []fuse.DirEntry) []fuse.DirEntry {
	out := ents[:0]
	for _, e := range ents {
		if e.Name == "_metadata" || listorder.IsCheckpoint(e.Name) {
			continue
		}
		out = append(out, e)
	}
	return out
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if !d.started {
		if errno := d.begin(ctx); errno != 0 {
			return nil, errno
		}
	}
	for len(d.queue) == 0 && d.more {
		var r pageResult
		select {
		case r = <-d.next:
		case <-ctx.Done():
			return nil, syscall.EINTR
		}
		if r.err != nil {
			d.prefetch(d.lastToken) // a retry of readdir asks again
			return nil, s3client.Errno(r.err)
		}
		d.more = r.pg.Next != ""
		if d.more {
			d.lastToken = r.pg.Next
			d.prefetch(r.pg.Next)
		}
		d.queue = skipOrdered(d.entries(r.pg))
		d.listAhead()
	}
	if len(d.queue) == 0 {
		return nil, 0
	}
	e := d.queue[0]
	d.queue = d.queue[1:]
	d.pos++
	e.Ino = d.ino(e)
	return &e, 0
}

// Seekdir restarts the listing and skips off entries (rewinddir is off 0). Listings are not snapshots, so
// a seek into a folder that changed meanwhile may repeat or miss entries, as on NFS.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.release()
	*d = dirHandle{fsys: d.fsys, dir: d.dir, n: d.n}
	for d.pos < off {
		e, errno := d.Readdirent(ctx)
		if errno != 0 {
			return errno
		}
		if e == nil {
			break
		}
	}
	return 0
}

// ino is the inode number stat shows for the entry: the known node's, or the one its key gets.
func (d *dirHandle) ino(e fuse.DirEntry) uint64 {
	isDir := e.Mode&syscall.S_IFMT == syscall.S_IFDIR
	if ch := d.n.GetChild(e.Name); ch != nil && ch.IsDir() == isDir {
		if cn, ok := ch.Operations().(*node); ok && cn.ino != 0 {
			return cn.ino
		}
	}
	return d.fsys.inos.peek(childKey(d.dir, e.Name), isDir)
}

func (d *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) { d.release() }

func (d *dirHandle) release() {
	if d.cancel != nil {
		d.cancel()
	}
	d.queue = nil
}
