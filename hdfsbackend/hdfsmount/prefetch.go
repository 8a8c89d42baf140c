package hdfsmount

import (
	"strings"
	"sync"
	"time"
)

// prefetcher lists the subdirectories a readdir has just served before they are opened, a few at a
// time, so a recursive walk (find, rm -rf, du) finds each directory's listing under way or done
// when it opens it: the NameNode's latency overlaps with the kernel's and the walker's work instead
// of adding up directory after directory.
//
// Invariants:
//   - Bounded: at most maxHeld (Options.ListAhead) listings are running or held (each a stream: about two pages), and at
//     most maxPending names wait; beyond that, asks are dropped (the directory is then listed when
//     opened, as without prefetching).
//   - Fresh: a listing is served only to the first opendir within ttl of its start, else discarded;
//     so a readdir answered from a prefetch is at most ttl older than one listed at opendir (the
//     kernel's own entry cache keeps names 1 s). Its attributes carry the stamp of the RPC that listed
//     them (attrCache), so a decision never takes them for younger than they are.
//   - The mount's own changes discard the held listing of the directory they change (and of every
//     directory below a removed or renamed one): a name created, removed or renamed through the mount
//     shows in the next readdir, as without prefetching.
type prefetcher struct {
	fsys    *filesystem
	maxHeld int // listings running or held at once (concurrent getListing RPCs)

	mu      sync.Mutex
	held    map[string]*stream // started, not yet taken by an opendir
	pending []pendingDir       // asked for, not started yet (FIFO)
}

type pendingDir struct {
	key string
	at  time.Time
}

const (
	// defaultListAhead is Options.ListAhead's default.
	defaultListAhead = 8
	// prefetchMaxPending bounds the names waiting to be prefetched.
	prefetchMaxPending = 4096
	// prefetchTTL is the age past which a prefetched listing is discarded rather than served.
	prefetchTTL = time.Second
)

func newPrefetcher(f *filesystem, ahead int) *prefetcher {
	if ahead == 0 {
		ahead = defaultListAhead
	}
	return &prefetcher{fsys: f, maxHeld: max(ahead, 0), held: make(map[string]*stream)}
}

// want asks for the listings of dirs (keys), in order.
func (p *prefetcher) want(dirs []string) {
	if len(dirs) == 0 || p.maxHeld == 0 {
		return
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range dirs {
		if len(p.pending) >= prefetchMaxPending {
			break
		}
		p.pending = append(p.pending, pendingDir{key: d, at: now})
	}
	p.fillLocked(now)
}

// fillLocked discards stale held listings and starts pending ones while there is room.
func (p *prefetcher) fillLocked(now time.Time) {
	for k, st := range p.held {
		if now.Sub(st.started) > prefetchTTL {
			st.cancel()
			delete(p.held, k)
		}
	}
	for len(p.held) < p.maxHeld && len(p.pending) > 0 {
		d := p.pending[0]
		p.pending = p.pending[1:]
		if _, ok := p.held[d.key]; ok || now.Sub(d.at) > prefetchTTL {
			continue // already under way, or asked for too long ago to be wanted still
		}
		p.held[d.key] = p.fsys.stream(d.key)
	}
	if len(p.pending) == 0 {
		p.pending = nil // let the backing array go
	}
}

// take hands over the prefetched listing of key when there is a fresh one (nil otherwise).
func (p *prefetcher) take(key string) *stream {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.held[key]
	if ok {
		delete(p.held, key)
		if now.Sub(st.started) > prefetchTTL {
			st.cancel()
			st = nil
		}
	}
	p.fillLocked(now)
	return st
}

// forget discards the held listing of dir (the mount changed a name in it).
func (p *prefetcher) forget(dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.held[dir]; ok {
		st.cancel()
		delete(p.held, dir)
	}
}

// forgetTree discards the held listings of dir and of every directory below it.
func (p *prefetcher) forgetTree(dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, st := range p.held {
		if k == dir || strings.HasPrefix(k, dir+"/") || dir == "" {
			st.cancel()
			delete(p.held, k)
		}
	}
}
