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
// The single P serves one client at a time best (an rm -rf, a find -delete: each waits for every reply
// before it sends the next request). Several clients at once are served faster with every P (measured:
// four concurrent rm -rf 12–20 % slower with one), so the governor watches how many requests begin while
// another is being answered and raises GOMAXPROCS while that is common.
//
// CPU-heavy index work (a sync or rebuild, the reference filter's fill, verify and orphans walks) wants
// every core too, so it raises GOMAXPROCS for as long as it runs. (Badger's own background compactions are
// not covered: after the small transactions of an incremental sync they are rare and short, and a rebuild
// writes its tables without compaction.)
package procs

import (
	"os"
	"runtime"
	"sync"
	"time"
)

// Concurrency sampling: every sampleEvery, the requests begun and those begun while another was being
// answered. At least minBegun requests with overlapRatio or more of them overlapped count as several
// clients; quietSamples samples without that switch back to serving one.
const (
	sampleEvery  = 100 * time.Millisecond
	minBegun     = 20
	overlapRatio = 4 // overlapped*overlapRatio >= begun
	quietSamples = 5
)

// Governor switches GOMAXPROCS between the serving value and the value the process started with. A nil
// *Governor does nothing (the setting is off).
type Governor struct {
	set    func(int) int                    // runtime.GOMAXPROCS
	serve  int                              // while serving one client
	full   int                              // otherwise: the value the process started with
	sample func() (begun, overlapped int64) // requests since the last call (nil: not watched)

	mu         sync.Mutex
	serving    bool // Serve was called and Stop was not
	busy       int  // works running
	concurrent bool // the last samples saw several clients
	quiet      int  // samples in a row without them
	cur        int  // the value last set
	stop       chan struct{}
	stopped    chan struct{}
}

// New returns a governor that serves with serve procs and otherwise uses what set(0) reports now (the
// GOMAXPROCS of the process: the runtime's choice, or the environment's). sample, when not nil, reports
// the FUSE requests begun since its last call and how many of them overlapped another (see
// metrics.Concurrency). It returns nil (no governor) when serve <= 0 or serve is not below that.
func New(serve int, set func(int) int, sample func() (begun, overlapped int64)) *Governor {
	full := set(0)
	if serve <= 0 || serve >= full {
		return nil
	}
	return &Governor{set: set, serve: serve, full: full, sample: sample, cur: full}
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
	g.update()
	if g.sample != nil && g.stop == nil {
		g.stop, g.stopped = make(chan struct{}), make(chan struct{})
		go g.watch(g.stop, g.stopped)
	}
}

// watch samples the request concurrency until stop is closed.
func (g *Governor) watch(stop, stopped chan struct{}) {
	defer close(stopped)
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			g.observe(g.sample())
		}
	}
}

// observe takes one concurrency sample into account.
func (g *Governor) observe(begun, overlapped int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if begun >= minBegun && overlapped*overlapRatio >= begun {
		g.concurrent, g.quiet = true, 0
	} else if g.concurrent {
		if g.quiet++; g.quiet >= quietSamples {
			g.concurrent, g.quiet = false, 0
		}
	}
	g.update()
}

// Stop gives the process its starting value back for good (the mount is gone).
func (g *Governor) Stop() {
	if g == nil {
		return
	}
	g.mu.Lock()
	stop, stopped := g.stop, g.stopped
	g.stop = nil
	g.serving = false
	g.update()
	g.mu.Unlock()
	if stop != nil {
		close(stop)
		<-stopped
	}
}

// Work raises GOMAXPROCS to the starting value until the returned function is called (once; more calls do
// nothing). Works may overlap; the serving value returns when the last one ends.
func (g *Governor) Work() (done func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	g.busy++
	g.update()
	g.mu.Unlock()
	var once sync.Once
	return func() { once.Do(g.done) }
}

func (g *Governor) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.busy--
	g.update()
}

// update sets the value the state asks for (g.mu held): the serving value only while serving, with no
// index work running and one client.
func (g *Governor) update() {
	if g.serving && g.busy == 0 && !g.concurrent {
		g.apply(g.serve)
	} else {
		g.apply(g.full)
	}
}

// apply sets n (g.mu held). runtime.GOMAXPROCS stops the world for a moment, so only real changes call it.
func (g *Governor) apply(n int) {
	if g.cur != n {
		g.set(n)
		g.cur = n
	}
}

// Runtime returns the setter New wants for the process's own GOMAXPROCS. Going back to the value the
// process started with restores the runtime's default instead of setting that number, when the
// environment did not set GOMAXPROCS: Go tracks the container's CPU limit only until GOMAXPROCS is set
// explicitly, and runtime.SetDefaultGOMAXPROCS turns that tracking back on.
func Runtime() func(int) int {
	start := runtime.GOMAXPROCS(0)
	_, fromEnv := os.LookupEnv("GOMAXPROCS")
	return func(n int) int {
		if n == start && !fromEnv {
			prev := runtime.GOMAXPROCS(0)
			runtime.SetDefaultGOMAXPROCS()
			return prev
		}
		return runtime.GOMAXPROCS(n)
	}
}
