package s3mount

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/listorder"
	"github.com/ckguard/ckguard/fs/mountutil"
	"github.com/ckguard/ckguard/refindex/flinklayout"
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
// Order, as on the local mount (localbackend/localfs): `_metadata` first, then chk-* newest first, then the rest, so
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
	// follow are the pages after the first listed ahead (listAhead), served before next is listed, each
	// continuing the one before; aheadCancel stops their requests (release). gen is the walk this
	// readdir belongs to (the one that listed its pages ahead, else a new one).
	follow      []*aheadPage
	aheadCancel context.CancelFunc
	gen         *walkGen
	// evAdd and evEnd record the listing for Options.Listings: every page served, in order, from the
	// first; nil once it was handed over or dropped (a page failed: a listing with a gap is no
	// evidence; the handle was released or rewound before the last page), or without a sink.
	evAdd func(key string)
	evEnd func(complete bool)
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
		if !validName(name) || seen[name] || guard.Reserved(p+name) {
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
		if !validName(name) || seen[name] || guard.Reserved(p+name) {
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
	pg, a, err := d.first(ctx)
	if err != nil {
		return s3client.Errno(err)
	}
	d.started = true
	if ls := d.fsys.opts.Listings; ls != nil {
		d.evAdd, d.evEnd = ls.BeginListing(d.dir, pg.Started)
	}
	d.evidence(pg)
	ents := d.entries(pg)
	if pg.Next == "" {
		d.queue = listorder.Order(ents)
		d.listAhead()
		return 0
	}
	d.more = true
	d.lastToken = pg.Next
	var big *aheadPage
	if a != nil {
		d.follow, big = a.pages[1:], a.big
	}
	if len(d.follow) == 0 {
		d.prefetch(pg.Next)
	}
	// The HEAD of `_metadata` and the chk-* listing (both needed before the first entry), listed ahead
	// or now; one that failed ahead is listed again here.
	var b bigFirst
	ok := false
	if big != nil {
		select {
		case <-big.done:
			b, ok = big.big, big.big.ok()
		case <-ctx.Done():
			return syscall.EINTR
		}
	}
	if !ok {
		b = listBigFirst(ctx, d.fsys.c, d.prefix(), d.fsys.opts.PageSize)
	}
	var chk []fuse.DirEntry
	for _, cp := range b.chk {
		chk = append(chk, d.entries(cp)...)
	}
	var head []fuse.DirEntry
	if b.metaErr == nil {
		metaKey := d.prefix() + "_metadata"
		d.fsys.cache.PutAt(metaKey, b.meta, true, b.metaStarted)
		head = append(head, fuse.DirEntry{Name: "_metadata", Mode: syscall.S_IFREG})
	} else if !errors.Is(b.metaErr, fs.ErrNotExist) {
		return s3client.Errno(b.metaErr)
	}
	if b.chkErr != nil {
		return s3client.Errno(b.chkErr)
	}
	listorder.SortCheckpoints(chk)
	d.queue = append(append(head, chk...), skipOrdered(ents)...)
	d.listAhead()
	return 0
}

// first is the folder's first page: the one listed ahead when it is fresh and succeeded (it is the same
// request as d.list(ctx, "")), with what was listed ahead after it, else listed now. The readdir belongs
// to the walk that listed it ahead, else to a new walk.
func (d *dirHandle) first(ctx context.Context) (s3client.Page, *aheadDir, error) {
	if a := d.fsys.ahead.take(d.dir); a != nil {
		d.gen = a.gen
		d.aheadCancel = a.cancel
		select {
		case <-a.pages[0].done:
			if pg := a.pages[0]; pg.err == nil {
				d.fsys.ahead.served.Add(1)
				return pg.pg, a, nil
			}
			a.cancel() // never served: listed again here
		case <-ctx.Done():
			a.cancel()
			return s3client.Page{}, nil, ctx.Err()
		}
	} else {
		d.gen = d.fsys.ahead.newWalk()
	}
	pg, err := d.list(ctx, "")
	return pg, nil, err
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
	d.fsys.ahead.want(d.gen, dirs)
}

// evidence adds a page served to the listing for Options.Listings and commits it at the last page. The
// raw page, not the entries served: a name hidden from readdir (quarantine area, deleted through the
// mount and not yet applied) is still in the bucket, as the loss check's own listing would show it.
func (d *dirHandle) evidence(pg s3client.Page) {
	if d.evAdd == nil {
		return
	}
	for _, o := range pg.Objects {
		d.evAdd(o.Key)
	}
	for _, p := range pg.Prefixes {
		d.evAdd(p)
	}
	if pg.Next == "" {
		d.evEnd(true)
		d.evAdd, d.evEnd = nil, nil
	}
}

// dropEvidence drops a listing that will not be complete.
func (d *dirHandle) dropEvidence() {
	if d.evEnd != nil {
		d.evEnd(false)
	}
	d.evAdd, d.evEnd = nil, nil
}

// skipOrdered drops the names the big-folder mode returned up front.
func skipOrdered(ents []fuse.DirEntry) []fuse.DirEntry {
	out := ents[:0]
	for _, e := range ents {
		if c := flinklayout.Class(e.Name); c == 1 || c == 2 {
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
		if len(d.follow) > 0 {
			f := d.follow[0]
			select {
			case <-f.done:
			case <-ctx.Done():
				return nil, syscall.EINTR
			}
			d.follow = d.follow[1:]
			if f.err != nil || f.token != d.lastToken {
				// Never served (failed, or not the continuation of the page served last): the rest is
				// listed here.
				d.follow = nil
				d.prefetch(d.lastToken)
				continue
			}
			d.fsys.ahead.followed.Add(1)
			d.evidence(f.pg)
			d.more = f.pg.Next != ""
			if d.more {
				d.lastToken = f.pg.Next
				if len(d.follow) == 0 {
					d.prefetch(f.pg.Next)
				}
			}
			d.queue = skipOrdered(d.entries(f.pg))
			d.listAhead()
			continue
		}
		var r pageResult
		select {
		case r = <-d.next:
		case <-ctx.Done():
			return nil, syscall.EINTR
		}
		if r.err != nil {
			d.dropEvidence()        // a retry continues the listing, but it is no evidence any more
			d.prefetch(d.lastToken) // a retry of readdir asks again
			return nil, s3client.Errno(r.err)
		}
		d.evidence(r.pg)
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
	return mountutil.SkipEntries(ctx, off, &d.pos, d.Readdirent)
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
	d.dropEvidence()
	if d.cancel != nil {
		d.cancel()
	}
	if d.aheadCancel != nil {
		d.aheadCancel()
	}
	d.queue, d.follow = nil, nil
}
