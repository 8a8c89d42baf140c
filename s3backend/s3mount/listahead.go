package s3mount

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// listAhead lists folders before a recursive walk (find, rm -rf, du) opens them, so the walk finds each
// folder's pages under way or done when it gets there: S3's latency overlaps with the kernel's and the
// walker's work instead of adding up folder after folder, and the sequential page chains of big folders
// (each page needs the previous one's continuation token: Flink's shared/ of a job is ~5 pages) run
// beside each other instead of one after the other.
//
// What is listed ahead: the first page of each subfolder a readdir hands out, and, deeper, of each
// subfolder a page listed ahead shows (the next job's folders while the walk is still in the current
// job); for a folder whose first page has a continuation, the `_metadata` HEAD and chk-* listing
// dirHandle.begin needs before its first entry (bigFirst) and up to listAheadFollow pages after the first,
// each listed with the token of the page before it. The requests are exactly the ones dirHandle sends
// (same prefix, delimiter, token, PageSize), so what a readdir returns, and in which order, is the same
// whether its pages were listed ahead or not.
//
// Order: a depth-first walk is predicted. Asks belong to a walk (walkGen): a readdir served from pages
// listed ahead continues the walk that listed them, any other readdir starts a new walk, whose asks go
// first (the newest walk's next folders are needed soonest). Within a walk, folders are listed in the
// order a depth-first walk of readdir's order (listorder: `_metadata`, chk-* newest first, the rest)
// reaches them, a folder's own pages before its subfolders.
//
// Invariants:
//   - Bounded requests: at most max (Options.ListAhead) requests in flight; at most listAheadMaxHeld pages
//     listed, in flight or held (a page dropped for memory keeps its slot until it would have expired,
//     so the pages listed ahead per listAheadTTL stay within the bound however they are dropped); at most
//     listAheadMaxPending asks wait (the lowest-priority ones are dropped). An ask waits only while its
//     walk is active (an ask or a take within listAheadTTL), and each page is listed at most twice (once,
//     and once again when it went stale unopened).
//   - Bounded memory: a page starts only while the held pages' estimated size (aheadBytes) is within the
//     budget (Options.ListAheadMemory); a page that brings it over evicts held folders, the one a
//     depth-first walk reaches last first, until it is within again. So the held pages take at most the
//     budget plus the pages in flight (each at most PageSize keys).
//   - Fresh: a page is served only to the first opendir within listAheadTTL of its request's start; so a
//     readdir answered from it is at most listAheadTTL older than one listed at opendir (the kernel's own
//     entry cache keeps names 1 s). A page nobody opened within listAheadTTL is listed again, with the
//     same token, if its walk is still active (else discarded); the pages after it are kept only if it
//     ends at the same continuation token (they continue exactly that page). Entries enter the attribute
//     cache stamped with the page's Started time (dirHandle.entries), so no decision takes them for
//     younger than they are, and only when the page is served (names deleted through the mount meanwhile
//     stay hidden).
//   - The mount's own changes discard the held pages of the folder they change (and of every folder below
//     a removed or renamed one), after the change reached the bucket, in flight or done: a name created,
//     removed or renamed through the mount shows in the next readdir, as without listing ahead. A page
//     started after the change sees it.
//   - A failed listing is never served: the opendir lists again itself (and lists again a failed page
//     after the first, or a failed bigFirst, when it reaches it).
//   - A folder's pages are served only as a chain: each was listed with the token of the one before it,
//     so a folder served from pages listed ahead misses no key a listing at opendir would show.
type listAhead struct {
	c        aheadLister
	clock    aheadClock
	pageSize int32
	max      int           // requests in flight at once
	ttl      time.Duration // listAheadTTL (tests change it)
	budget   int64         // bytes of held pages (aheadBytes) before new pages wait

	mu    sync.Mutex
	held  map[string]*aheadDir // listed or being listed, not yet taken by an opendir
	slots int                  // pages of held in flight or done
	// estimate is the size of the last page booked: a page starts only while the held pages and the
	// ones in flight, at that size each, fit in the budget.
	estimate int64
	bytes    int64        // aheadBytes of the done pages of held
	running  int          // requests in flight
	pending  []*aheadWant // waiting to start, best first (wantBefore)
	asked    map[string]*aheadWant
	gens     uint64 // walks started
	timer    func() bool
	timerAt  time.Time
	stopped  bool // unmounted: nothing more is listed

	served   atomic.Int64 // first pages an opendir took from here (tests)
	followed atomic.Int64 // pages after the first an opendir took from here (tests)
	relisted atomic.Int64 // pages listed again because they went stale unopened (tests)
	evicted  atomic.Int64 // folders evicted for memory (tests)
	// events, when set (tests), is told each time a request listed ahead ends (under no lock).
	events func()
}

// idle reports whether no request listed ahead is in flight (tests: with events, a wait for the
// list-ahead to settle).
func (p *listAhead) idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running == 0
}

// aheadLister is what the list-ahead needs of the S3 client (*s3client.Client).
type aheadLister interface {
	ListPage(ctx context.Context, relPrefix string, delim bool, token, startAfter string, maxKeys int32) (s3client.Page, error)
	Head(ctx context.Context, key string) (s3client.Object, error)
}

// aheadClock is the list-ahead's time (tests step it by hand).
type aheadClock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d; the result stops it.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// walkGen is one walk: the asks of a readdir and of the pages listed ahead for it.
type walkGen struct {
	id     uint64    // newer walks have larger ids
	active time.Time // its last ask or take (under listAhead.mu)
}

// wantKind is what an ask lists: a folder's first page, its bigFirst, or its page number idx.
type wantKind uint8

const (
	wantFirst wantKind = iota
	wantBig
	wantPage // a page after the first, or a page listed again (idx)
)

type aheadWant struct {
	key  string
	gen  *walkGen
	kind wantKind
	dir  *aheadDir // wantBig, wantPage: the held folder
	idx  int       // wantPage: the index in dir.pages
	// again: wantFirst of a folder evicted for memory (evicted again, it is dropped).
	again bool
}

// aheadDir is one folder listed ahead: its first page, the pages after it, and bigFirst.
type aheadDir struct {
	key     string
	gen     *walkGen
	ctx     context.Context
	cancel  context.CancelFunc
	started time.Time    // its first request's start
	pages   []*aheadPage // [0] the first page; each later one listed with the Next of the one before
	big     *aheadPage   // for a folder of more than one page (kind wantBig)
	again   bool         // asked again after an eviction: evicted again, it is dropped
	wants   []*aheadWant // its pending asks (wantBig, wantPage)
}

// aheadPage is one request listed ahead; done is closed once its result is set.
type aheadPage struct {
	token    string
	started  time.Time // zero: waiting to be listed again
	done     chan struct{}
	pg       s3client.Page
	big      bigFirst
	err      error
	relisted bool   // listed again once already: next time it goes stale it is dropped
	prevNext string // a page listed again: the Next it had (the pages after it continue that token)
	bytes    int64
}

const (
	// defaultListAhead is Options.ListAhead's default.
	defaultListAhead = 8
	// listAheadMaxPending bounds the asks waiting to be listed ahead.
	listAheadMaxPending = 4096
	// listAheadMaxHeld bounds the pages listed, in flight or held (the window ahead of a walk: about
	// three of Flink's job folders of 10 checkpoints and a 5,000-file shared/).
	listAheadMaxHeld = 64
	// listAheadTTL is the age past which a page listed ahead is listed again or discarded, never served.
	listAheadTTL = time.Second
	// listAheadFollow is how many pages after the first a folder has listed ahead (4: Flink's shared/ of
	// a job, 5,000 names, is listed whole before its opendir); further pages are the dirHandle's.
	listAheadFollow = 4
	// defaultListAheadMemory is Options.ListAheadMemory's default: the budget of held pages.
	defaultListAheadMemory = 32 << 20
)

// aheadConfig configures a listAhead.
type aheadConfig struct {
	lister   aheadLister
	clock    aheadClock
	pageSize int32
	max      int // 0: defaultListAhead; < 0: off
	ttl      time.Duration
	budget   int64
	events   func()
}

func newListAhead(cfg aheadConfig) *listAhead {
	if cfg.max == 0 {
		cfg.max = defaultListAhead
	}
	if cfg.ttl <= 0 {
		cfg.ttl = listAheadTTL
	}
	if cfg.budget <= 0 {
		cfg.budget = defaultListAheadMemory
	}
	if cfg.clock == nil {
		cfg.clock = realClock{}
	}
	if cfg.pageSize <= 0 {
		cfg.pageSize = 1000
	}
	return &listAhead{c: cfg.lister, clock: cfg.clock, pageSize: cfg.pageSize, max: max(cfg.max, 0), ttl: cfg.ttl,
		budget: cfg.budget, held: make(map[string]*aheadDir), asked: make(map[string]*aheadWant), events: cfg.events}
}

// newWalk starts a walk (a readdir not served from pages listed ahead).
func (p *listAhead) newWalk() *walkGen {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gens++
	return &walkGen{id: p.gens, active: p.clock.Now()}
}

// done reports whether the first page of key is held and listed (tests).
func (p *listAhead) done(key string) bool {
	p.mu.Lock()
	a, ok := p.held[key]
	p.mu.Unlock()
	if !ok || a.pages[0].started.IsZero() {
		return false
	}
	select {
	case <-a.pages[0].done:
		return true
	default:
		return false
	}
}

// heldPages reports the folder keys held and how many of their pages are done (tests).
func (p *listAhead) heldPages() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.held))
	for k, a := range p.held {
		n := 0
		for _, pg := range a.pages {
			if !pg.started.IsZero() && isDone(pg.done) {
				n++
			}
		}
		out[k] = n
	}
	return out
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// want asks for the first pages of dirs (keys) for walk g.
func (p *listAhead) want(g *walkGen, dirs []string) {
	if len(dirs) == 0 || p.max == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	g.active = now
	for _, d := range dirs {
		p.askLocked(g, d)
	}
	p.fillLocked(now)
}

// askLocked asks for the first page of key in walk g: a held folder or a waiting ask of an older walk
// moves to g.
func (p *listAhead) askLocked(g *walkGen, key string) {
	if p.stopped || guard.Reserved(key) {
		return
	}
	if a, ok := p.held[key]; ok {
		if a.gen.id < g.id {
			a.gen = g
			for _, w := range slices.Clone(a.wants) {
				p.unqueueLocked(w)
				w.gen = g
				p.queueLocked(w)
			}
		}
		return
	}
	if w, ok := p.asked[key]; ok {
		if w.gen.id >= g.id {
			return
		}
		p.unqueueLocked(w)
	}
	w := &aheadWant{key: key, gen: g, kind: wantFirst}
	p.asked[key] = w
	p.queueLocked(w)
}

// wantBefore orders asks: the newer walk first, then depth-first order of the folder, then a folder's
// own requests (bigFirst, pages in order) before its subfolders.
func wantBefore(a, b *aheadWant) bool {
	if a.gen.id != b.gen.id {
		return a.gen.id > b.gen.id
	}
	if a.key != b.key {
		return dfsBefore(a.key, b.key)
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.idx < b.idx
}

// dfsBefore reports whether a depth-first walk in readdir's order reaches folder a before folder b
// (different keys): a folder before what is below it, siblings in listorder's order.
func dfsBefore(a, b string) bool {
	for {
		ca, ra, moreA := strings.Cut(a, "/")
		cb, rb, moreB := strings.Cut(b, "/")
		if ca != cb {
			return nameBefore(ca, cb)
		}
		if !moreA || !moreB {
			return !moreA // a is b's ancestor (or they are equal)
		}
		a, b = ra, rb
	}
}

// nameBefore is the cleanup order of two different names of one folder (flinklayout.Class):
// `_metadata`, chk-* newest first, then the rest in the bucket's (byte) order of the folders' prefixes.
func nameBefore(a, b string) bool {
	ca, cb := flinklayout.Class(a), flinklayout.Class(b)
	if ca != cb {
		return ca < cb
	}
	if ca == 2 {
		na, aok := flinklayout.CheckpointNumber(a)
		nb, bok := flinklayout.CheckpointNumber(b)
		switch {
		case aok && bok && na != nb:
			return na > nb
		case aok != bok:
			return aok
		}
	}
	return a+"/" < b+"/"
}

// queueLocked inserts w in pending, dropping the last ask beyond listAheadMaxPending.
func (p *listAhead) queueLocked(w *aheadWant) {
	i, _ := slices.BinarySearchFunc(p.pending, w, func(x, y *aheadWant) int {
		if wantBefore(x, y) {
			return -1
		}
		if wantBefore(y, x) {
			return 1
		}
		return 0
	})
	p.pending = slices.Insert(p.pending, i, w)
	if w.dir != nil {
		w.dir.wants = append(w.dir.wants, w)
	}
	if len(p.pending) > listAheadMaxPending {
		p.forgetWantLocked(p.pending[len(p.pending)-1])
	}
}

// unqueueLocked removes w from pending (it stays in asked / dir.wants: the caller decides).
func (p *listAhead) unqueueLocked(w *aheadWant) {
	if i := slices.Index(p.pending, w); i >= 0 {
		p.pending = slices.Delete(p.pending, i, i+1)
	}
	if w.dir != nil {
		if i := slices.Index(w.dir.wants, w); i >= 0 {
			w.dir.wants = slices.Delete(w.dir.wants, i, i+1)
		}
	}
}

// forgetWantLocked removes w for good.
func (p *listAhead) forgetWantLocked(w *aheadWant) {
	p.unqueueLocked(w)
	if w.kind == wantFirst && p.asked[w.key] == w {
		delete(p.asked, w.key)
	}
}

// fillLocked lists again or discards stale held pages and starts waiting asks while there is room.
func (p *listAhead) fillLocked(now time.Time) {
	if p.stopped {
		return
	}
	p.expireLocked(now)
	for len(p.pending) > 0 && p.running < p.max && p.slots < listAheadMaxHeld &&
		p.bytes+int64(p.running+1)*p.estimate <= p.budget && p.bytes < p.budget {
		w := p.pending[0]
		p.forgetWantLocked(w)
		if now.Sub(w.gen.active) > p.ttl {
			continue // its walk took nothing for too long to want it still
		}
		p.startLocked(w, now)
	}
	if len(p.pending) == 0 {
		p.pending = nil // let the backing array go
	}
	p.armLocked(now)
}

// expireLocked handles the held pages older than ttl that nobody opened: listed again once while their
// walk is active, else dropped with the pages after them.
func (p *listAhead) expireLocked(now time.Time) {
	for _, a := range p.held {
		active := now.Sub(a.gen.active) <= p.ttl
		if b := a.big; b != nil && !b.started.IsZero() && isDone(b.done) && now.Sub(b.started) > p.ttl {
			p.releaseLocked(b)
			a.big = nil
			p.dropWantsLocked(a, func(w *aheadWant) bool { return w.kind == wantBig })
			if active && !b.relisted {
				p.queueBigLocked(a, true)
			}
		}
		for i, pg := range a.pages {
			if pg.started.IsZero() || !isDone(pg.done) || now.Sub(pg.started) <= p.ttl {
				continue
			}
			if active && !pg.relisted && pg.err == nil {
				p.releaseLocked(pg)
				a.pages[i] = &aheadPage{token: pg.token, relisted: true, prevNext: pg.pg.Next, done: make(chan struct{})}
				p.queueLocked(&aheadWant{key: a.key, gen: a.gen, kind: wantPage, dir: a, idx: i})
				p.relisted.Add(1)
				continue
			}
			p.truncateLocked(a, i)
			break
		}
		if len(a.pages) == 0 {
			p.dropLocked(a)
		}
	}
}

// armLocked sets the timer for the next held page to go stale (expireLocked runs then even when no
// readdir asks or takes anything).
func (p *listAhead) armLocked(now time.Time) {
	var next time.Time
	for _, a := range p.held {
		for _, pg := range append(slices.Clip(a.pages), a.big) {
			if pg != nil && !pg.started.IsZero() && isDone(pg.done) {
				next = earliest(next, pg.started.Add(p.ttl))
			}
		}
	}
	if next.IsZero() || (!p.timerAt.IsZero() && !p.timerAt.After(next)) {
		return // nothing to wait for, or the timer already fires by then
	}
	if p.timer != nil {
		p.timer()
	}
	p.timerAt = next
	// A little past the deadline: expireLocked wants the page strictly older than ttl.
	p.timer = p.clock.AfterFunc(next.Sub(now)+time.Millisecond, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.timer, p.timerAt = nil, time.Time{}
		p.fillLocked(p.clock.Now())
	})
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// truncateLocked drops the pages of a from i on (their requests in flight are left to end unseen).
func (p *listAhead) truncateLocked(a *aheadDir, i int) {
	for _, pg := range a.pages[i:] {
		p.releaseLocked(pg)
	}
	a.pages = a.pages[:i]
	p.dropWantsLocked(a, func(w *aheadWant) bool { return w.kind == wantPage && w.idx >= i })
}

// releaseLocked gives back the slot and the bytes a started page holds.
func (p *listAhead) releaseLocked(pg *aheadPage) {
	if pg.started.IsZero() {
		return
	}
	p.slots--
	p.bytes -= pg.bytes // 0 unless booked (completeLocked)
	pg.bytes = 0
}

func (p *listAhead) dropWantsLocked(a *aheadDir, which func(*aheadWant) bool) {
	for _, w := range slices.Clone(a.wants) {
		if which(w) {
			p.unqueueLocked(w)
		}
	}
}

// dropLocked removes a from held, cancelling its requests.
func (p *listAhead) dropLocked(a *aheadDir) {
	if p.held[a.key] != a {
		return
	}
	a.cancel()
	p.truncateLocked(a, 0)
	if a.big != nil {
		p.releaseLocked(a.big)
		a.big = nil
	}
	p.dropWantsLocked(a, func(*aheadWant) bool { return true })
	delete(p.held, a.key)
}

// queueBigLocked asks for the bigFirst of a (a folder whose first page has a continuation).
func (p *listAhead) queueBigLocked(a *aheadDir, relisted bool) {
	a.big = &aheadPage{relisted: relisted, done: make(chan struct{})}
	p.queueLocked(&aheadWant{key: a.key, gen: a.gen, kind: wantBig, dir: a})
}

// startLocked sends the request of w.
func (p *listAhead) startLocked(w *aheadWant, now time.Time) {
	var a *aheadDir
	var pg *aheadPage
	switch w.kind {
	case wantFirst:
		if _, ok := p.held[w.key]; ok {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		pg = &aheadPage{done: make(chan struct{})}
		a = &aheadDir{key: w.key, gen: w.gen, ctx: ctx, cancel: cancel, started: now, pages: []*aheadPage{pg}, again: w.again}
		p.held[w.key] = a
	case wantBig:
		a, pg = w.dir, w.dir.big
	case wantPage:
		a = w.dir
		if w.idx < len(a.pages) {
			pg = a.pages[w.idx]
		}
	}
	if p.held[a.key] != a || pg == nil || !pg.started.IsZero() {
		return
	}
	pg.started = now
	p.slots++
	p.running++
	prefix := ""
	if a.key != "" {
		prefix = a.key + "/"
	}
	go func() {
		if w.kind == wantBig {
			pg.big = listBigFirst(a.ctx, p.c, prefix, p.pageSize)
		} else {
			pg.pg, pg.err = p.c.ListPage(a.ctx, prefix, true, pg.token, "", p.pageSize)
		}
		p.mu.Lock()
		p.running--
		p.completeLocked(a, pg, w.kind)
		close(pg.done) // after the booking: a done page under the lock is booked
		p.fillLocked(p.clock.Now())
		ev := p.events
		p.mu.Unlock()
		if ev != nil {
			ev()
		}
	}()
}

// completeLocked books a request's result when its folder is still held: its size, and what it leads
// to (bigFirst and the next page of a big folder, the first pages of the subfolders it shows).
func (p *listAhead) completeLocked(a *aheadDir, pg *aheadPage, kind wantKind) {
	if p.stopped || p.held[a.key] != a {
		return // taken (the opendir has it), discarded or evicted meanwhile
	}
	if kind == wantBig {
		if a.big != pg {
			return
		}
		pg.bytes = bigBytes(pg.big)
		p.bytes += pg.bytes
		if pg.big.ok() {
			for _, cp := range pg.big.chk {
				p.askSubdirsLocked(a, cp)
			}
		}
		p.evictLocked()
		return
	}
	i := slices.Index(a.pages, pg)
	if i < 0 {
		return
	}
	if pg.err != nil {
		// Never served: the pages after it cannot be either; the opendir lists from here itself.
		p.truncateLocked(a, i+1)
		return
	}
	pg.bytes = aheadBytes(pg.pg)
	p.bytes += pg.bytes
	p.estimate = pg.bytes
	if pg.relisted && pg.pg.Next != pg.prevNext {
		p.truncateLocked(a, i+1) // the pages after it continued another token
	}
	p.askSubdirsLocked(a, pg.pg)
	if pg.pg.Next != "" {
		if i == 0 && a.big == nil {
			p.queueBigLocked(a, false)
		}
		if i == len(a.pages)-1 && len(a.pages) <= listAheadFollow {
			a.pages = append(a.pages, &aheadPage{token: pg.pg.Next, done: make(chan struct{})})
			p.queueLocked(&aheadWant{key: a.key, gen: a.gen, kind: wantPage, dir: a, idx: i + 1})
		}
	}
	p.evictLocked()
}

// askSubdirsLocked asks for the first pages of the subfolders pg shows, in the walk of a.
func (p *listAhead) askSubdirsLocked(a *aheadDir, pg s3client.Page) {
	for _, d := range pageSubdirs(a.key, pg) {
		p.askLocked(a.gen, d)
	}
}

// evictLocked drops held folders, the one a walk reaches last first, while the held pages are over
// the budget. An evicted folder is asked for again once (listed when there is room, if its walk is
// still active then); evicted a second time, it is dropped.
func (p *listAhead) evictLocked() {
	for p.bytes > p.budget {
		var worst *aheadDir
		for _, a := range p.held {
			if worst == nil || dirBefore(worst, a) {
				worst = a
			}
		}
		if worst == nil {
			return
		}
		p.dropLocked(worst)
		p.evicted.Add(1)
		if !worst.again {
			p.askLocked(worst.gen, worst.key)
			if w := p.asked[worst.key]; w != nil {
				w.again = true
			}
		}
	}
}

func dirBefore(a, b *aheadDir) bool {
	return wantBefore(&aheadWant{key: a.key, gen: a.gen}, &aheadWant{key: b.key, gen: b.gen})
}

// take hands over the pages listed ahead for key when its first page is fresh (nil otherwise), with the
// fresh pages after it and its bigFirst. They may still be under way: wait on their done channels. The
// caller owns them (cancel stops what is still in flight).
func (p *listAhead) take(key string) *aheadDir {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	if w, ok := p.asked[key]; ok {
		p.forgetWantLocked(w) // opened before it was listed ahead: the opendir lists it
	}
	a, ok := p.held[key]
	if !ok {
		p.fillLocked(now)
		return nil
	}
	// Detach it from the bookkeeping: its pages are the opendir's now.
	pages, big := a.pages, a.big
	a.pages, a.big = nil, nil
	for _, pg := range append(slices.Clip(pages), big) {
		if pg != nil {
			p.releaseLocked(pg)
		}
	}
	p.dropWantsLocked(a, func(*aheadWant) bool { return true })
	delete(p.held, key)
	// Only the fresh pages listed in a chain from the first are served.
	n := 0
	for n < len(pages) && !pages[n].started.IsZero() && now.Sub(pages[n].started) <= p.ttl {
		n++
	}
	if big != nil && (big.started.IsZero() || now.Sub(big.started) > p.ttl) {
		big = nil
	}
	if n == 0 {
		a.cancel()
		p.fillLocked(now)
		return nil
	}
	a.pages, a.big = pages[:n], big
	a.gen.active = now
	p.fillLocked(now)
	return a
}

// forget discards the held pages of dir (the mount changed a name in it).
func (p *listAhead) forget(dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a, ok := p.held[dir]; ok {
		p.dropLocked(a)
	}
}

// forgetTree discards the held pages of dir and of every folder below it ("": all).
func (p *listAhead) forgetTree(dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, a := range p.held {
		if dir == "" || k == dir || strings.HasPrefix(k, dir+"/") {
			p.dropLocked(a)
		}
	}
}

// stop discards every held page and pending ask, and lists nothing more (unmount).
func (p *listAhead) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	for _, a := range p.held {
		p.dropLocked(a)
	}
	p.held = map[string]*aheadDir{}
	p.pending, p.asked = nil, map[string]*aheadWant{}
	if p.timer != nil {
		p.timer()
		p.timer = nil
	}
}

// pageSubdirs are the subfolders (keys) a page of folder dir shows, as dirHandle.entries would list them.
func pageSubdirs(dir string, pg s3client.Page) []string {
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	var out []string
	seen := make(map[string]bool)
	add := func(name string) {
		if !validName(name) || seen[name] || guard.Reserved(prefix+name) {
			return
		}
		seen[name] = true
		out = append(out, prefix+name)
	}
	for _, pre := range pg.Prefixes {
		add(strings.TrimPrefix(pre, prefix))
	}
	for _, o := range pg.Objects {
		if name, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, prefix), "/"); ok {
			add(name)
		}
	}
	return out
}

// aheadBytes estimates the memory a page holds: its strings and the structures around them.
func aheadBytes(pg s3client.Page) int64 {
	const perObject, perPrefix, perPage = 136, 16, 128 // s3client.Object, a string header, the Page
	n := int64(perPage + len(pg.Next))
	for _, o := range pg.Objects {
		n += perObject + int64(len(o.Key)+len(o.ETag)+len(o.VersionID))
	}
	for _, s := range pg.Prefixes {
		n += perPrefix + int64(len(s))
	}
	return n
}

func bigBytes(b bigFirst) int64 {
	n := int64(256 + len(b.meta.Key) + len(b.meta.ETag))
	for _, cp := range b.chk {
		n += aheadBytes(cp)
	}
	return n
}

// bigFirst is what a big folder's readdir returns before the rest of its listing: its `_metadata`
// (HEAD) and its chk-* names (a delimiter listing of them), both listed at once.
type bigFirst struct {
	meta        s3client.Object
	metaErr     error // fs.ErrNotExist: there is none
	metaStarted time.Time
	chk         []s3client.Page
	chkErr      error
}

// ok reports whether both requests succeeded (a missing `_metadata` is an answer too).
func (b *bigFirst) ok() bool {
	return b.chkErr == nil && (b.metaErr == nil || errors.Is(b.metaErr, fs.ErrNotExist))
}

// listBigFirst HEADs prefix's `_metadata` beside listing its chk-* names.
func listBigFirst(ctx context.Context, c aheadLister, prefix string, size int32) bigFirst {
	var b bigFirst
	headed := make(chan struct{})
	go func() {
		defer close(headed)
		b.metaStarted = time.Now()
		b.meta, b.metaErr = c.Head(ctx, prefix+"_metadata")
	}()
	for tok := ""; ; {
		cp, err := c.ListPage(ctx, prefix+"chk-", true, tok, "", size)
		if err != nil {
			b.chkErr = err
			break
		}
		b.chk = append(b.chk, cp)
		if cp.Next == "" {
			break
		}
		tok = cp.Next
	}
	<-headed
	return b
}

// parentKey is the folder holding key ("" for the mount's root).
func parentKey(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return ""
}

// changed records that the mount changed key in the bucket: the pages listed ahead of its folder are
// discarded. Call it once the change reached the bucket (a listing started before may miss it).
func (f *filesystem) changed(key string) { f.ahead.forget(parentKey(key)) }

// changedTree is changed for a folder removed or renamed, with everything below it.
func (f *filesystem) changedTree(key string) {
	f.ahead.forget(parentKey(key))
	f.ahead.forgetTree(key)
}
