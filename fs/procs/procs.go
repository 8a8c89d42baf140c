// Package procs lowers GOMAXPROCS while a mount daemon only answers FUSE requests and raises it again
// while index work runs.
//
// Why: go-fuse keeps spare reader goroutines blocked in read(2) on /dev/fuse, and a goroutine blocked in a
// system call keeps its P. With every P held like that, the runtime's sysmon thread takes a P back from a
// blocked reader at every tick (20 µs while it keeps finding one) and wakes a thread to look for work that
// is not there. On the 2-core test VM that is 5.0–5.7 context switches of the daemon per file of an
// `rm -rf` instead of 2.7–2.9 with a single P, and each switch costs about 10 µs there. With one P the
// request handlers run one at a time, but the system calls they make (the unlinks, stats, audit writes)
// still run in parallel: a goroutine in a system call needs no P.
//
// CPU-heavy index work (a sync or rebuild, the reference filter's fill, verify and orphans walks) wants
// every core, so it raises GOMAXPROCS for as long as it runs. (Badger's own background compactions are
// not covered: after the small transactions of an incremental sync they are rare and short, and a rebuild
// writes its tables without compaction.)
package procs

import "sync"

// Governor switches GOMAXPROCS between the serving value and the value the process started with. A nil
// *Governor does nothing (the setting is off).
type Governor struct {
	set   func(int) int // runtime.GOMAXPROCS
	serve int           // while only serving
	full  int           // while index work runs: the value the process started with

	mu      sync.Mutex
	serving bool // Serve was called and Stop was not
	busy    int  // works running
	cur     int  // the value last set
}

// New returns a governor that serves with serve procs and works with what set(0) reports now (the
// GOMAXPROCS of the process: the runtime's choice, or the environment's). It returns nil (no governor)
// when serve <= 0 or serve is not below that.
func New(serve int, set func(int) int) *Governor {
	full := set(0)
	if serve <= 0 || serve >= full {
		return nil
	}
	return &Governor{set: set, serve: serve, full: full, cur: full}
}

// Procs reports the value set now.
func (g *Governor) Procs() int {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cur
}

// Serve switches to the serving value unless work is running (then it switches once the work is done).
func (g *Governor) Serve() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.serving = true
	if g.busy == 0 {
		g.apply(g.serve)
	}
}

// Stop gives the process its starting value back for good (the mount is gone).
func (g *Governor) Stop() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.serving = false
	g.apply(g.full)
}

// Work raises GOMAXPROCS to the starting value until the returned function is called (once; more calls do
// nothing). Works may overlap; the serving value returns when the last one ends.
func (g *Governor) Work() (done func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	g.busy++
	g.apply(g.full)
	g.mu.Unlock()
	var once sync.Once
	return func() { once.Do(g.done) }
}

func (g *Governor) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.busy--
	if g.busy == 0 && g.serving {
		g.apply(g.serve)
	}
}

// apply sets n (g.mu held). runtime.GOMAXPROCS stops the world for a moment, so only real changes call it.
func (g *Governor) apply(n int) {
	if g.cur != n {
		g.set(n)
		g.cur = n
	}
}
