package s3mount

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckguard/ckguard/s3backend/s3client"
)

// listAhead lists the first page of the subfolders a readdir has just served before they are opened, a
// few at a time, so a recursive walk (find, rm -rf, du) finds each folder's first page under way or done
// when it opens it: S3's latency overlaps with the kernel's and the walker's work instead of adding up
// folder after folder.
//
// The page listed is exactly the one dirHandle.begin asks for first (the folder's prefix, delimiter, no
// token, PageSize keys), so the order dirHandle serves (`_metadata` first, chk-* newest first, the three
// phases of a big folder) is the same whether the page was prefetched or not.
//
// Invariants:
//   - Bounded: at most max (Options.ListAhead) first pages are being listed at once, at most
//     listAheadMaxHeld are listed or held (each at most PageSize entries), and at most
//     listAheadMaxPending folders wait; beyond that, asks are dropped (the folder is then listed when
//     opened, as without listing ahead).
//   - Newest asks first: a walk descends depth first, so the subfolders of the folder read last are
//     opened next; the older asks (siblings of folders above) wait behind them.
//   - Fresh: a page is served only to the first opendir within listAheadTTL of its request's start, else
//     discarded; so a readdir answered from it is at most listAheadTTL older than one listed at opendir
//     (the kernel's own entry cache keeps names 1 s). Its entries enter the attribute cache stamped with
//     the page's Started time (dirHandle.entries), so no decision takes them for younger than they are,
//     and only when the page is served (so names deleted through the mount meanwhile stay hidden).
//   - The mount's own changes discard the held page of the folder they change (and of every folder below
//     a removed or renamed one), after the change reached the bucket: a name created, removed or renamed
//     through the mount shows in the next readdir, as without listing ahead.
//   - A failed listing is never served: the opendir lists again itself.
type listAhead struct {
	fsys *filesystem
	max  int           // pages being listed at once (concurrent ListObjectsV2 requests)
	ttl  time.Duration // listAheadTTL (tests change it)

	mu      sync.Mutex
	held    map[string]*aheadPage // started, not yet taken by an opendir
	running int                   // pages of held being listed
	pending []aheadWant           // asked for, not started yet (newest asks first)
	stopped bool                  // unmounted: nothing more is listed

	served atomic.Int64 // first pages an opendir took from here (tests)
}

type aheadWant struct {
	key string
	at  time.Time
}

// aheadPage is one first page being listed: done is closed once pg/err are set.
type aheadPage struct {
	started time.Time // before the request was sent
	cancel  context.CancelFunc
	done    chan struct{}
	pg      s3client.Page
	err     error
}

const (
	// defaultListAhead is Options.ListAhead's default.
	defaultListAhead = 8
	// listAheadMaxPending bounds the folders waiting to be listed ahead.
	listAheadMaxPending = 4096
	// listAheadMaxHeld bounds the pages listed or held (each at most PageSize entries: about 15 MB).
	listAheadMaxHeld = 64
	// listAheadTTL is the age past which a page listed ahead is discarded rather than served.
	listAheadTTL = time.Second
)

func newListAhead(f *filesystem, n int, ttl time.Duration) *listAhead {
	if n == 0 {
		n = defaultListAhead
	}
	if ttl <= 0 {
		ttl = listAheadTTL
	}
	return &listAhead{fsys: f, max: max(n, 0), ttl: ttl, held: make(map[string]*aheadPage)}
}

// done reports whether the page of key is held and listed (tests).
func (p *listAhead) done(key string) bool {
	p.mu.Lock()
	a, ok := p.held[key]
	p.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// want asks for the first pages of dirs (keys), in order, ahead of the folders asked for before.
func (p *listAhead) want(dirs []string) {
	if len(dirs) == 0 || p.max == 0 {
		return
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	ws := make([]aheadWant, 0, min(len(dirs), listAheadMaxPending)+len(p.pending))
	for _, d := range dirs[:min(len(dirs), listAheadMaxPending)] {
		ws = append(ws, aheadWant{key: d, at: now})
	}
	ws = append(ws, p.pending...)
	p.pending = ws[:min(len(ws), listAheadMaxPending)] // the oldest asks are dropped
	p.fillLocked(now)
}

// fillLocked discards stale held pages and starts pending ones while there is room.
func (p *listAhead) fillLocked(now time.Time) {
	if p.stopped {
		return
	}
	for k, a := range p.held {
		if now.Sub(a.started) > p.ttl {
			a.cancel()
			delete(p.held, k)
		}
	}
	for p.running < p.max && len(p.held) < listAheadMaxHeld && len(p.pending) > 0 {
		w := p.pending[0]
		p.pending = p.pending[1:]
		if _, ok := p.held[w.key]; ok || now.Sub(w.at) > p.ttl {
			continue // already under way, or asked for too long ago to be wanted still
		}
		p.held[w.key] = p.start(w.key)
	}
	if len(p.pending) == 0 {
		p.pending = nil // let the backing array go
	}
}

// start lists the first page of key in the background.
func (p *listAhead) start(key string) *aheadPage {
	ctx, cancel := context.WithCancel(context.Background())
	a := &aheadPage{started: time.Now(), cancel: cancel, done: make(chan struct{})}
	prefix := ""
	if key != "" {
		prefix = key + "/"
	}
	p.running++
	go func() {
		defer cancel()
		a.pg, a.err = p.fsys.c.ListPage(ctx, prefix, true, "", "", p.fsys.opts.PageSize)
		close(a.done)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.running--
		p.fillLocked(time.Now())
	}()
	return a
}

// take hands over the page listed ahead for key when there is a fresh one (nil otherwise). The page may
// still be under way: wait on its done channel.
func (p *listAhead) take(key string) *aheadPage {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.held[key]
	if ok {
		delete(p.held, key)
		if now.Sub(a.started) > p.ttl {
			a.cancel()
			a = nil
		}
	}
	p.fillLocked(now)
	return a
}

// forget discards the held page of dir (the mount changed a name in it).
func (p *listAhead) forget(dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a, ok := p.held[dir]; ok {
		a.cancel()
		delete(p.held, dir)
	}
}

// forgetTree discards the held pages of dir and of every folder below it ("": all).
func (p *listAhead) forgetTree(dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, a := range p.held {
		if dir == "" || k == dir || strings.HasPrefix(k, dir+"/") {
			a.cancel()
			delete(p.held, k)
		}
	}
}

// stop discards every held page and pending ask, and lists nothing more (unmount).
func (p *listAhead) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	p.pending = nil
	for k, a := range p.held {
		a.cancel()
		delete(p.held, k)
	}
}

// parentKey is the folder holding key ("" for the mount's root).
func parentKey(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return ""
}

// changed records that the mount changed key in the bucket: the page listed ahead of its folder is
// discarded. Call it once the change reached the bucket (a listing started before may miss it).
func (f *filesystem) changed(key string) { f.ahead.forget(parentKey(key)) }

// changedTree is changed for a folder removed or renamed, with everything below it.
func (f *filesystem) changedTree(key string) {
	f.ahead.forget(parentKey(key))
	f.ahead.forgetTree(key)
}
