package procs

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
)

// fakeProcs records the values a governor sets, starting from start.
type fakeProcs struct {
	mu   sync.Mutex
	cur  int
	sets []int
}

func (f *fakeProcs) set(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	prev := f.cur
	if n > 0 {
		f.cur = n
		f.sets = append(f.sets, n)
	}
	return prev
}

// expect reports an error unless GOMAXPROCS is want at the step named when.
func (f *fakeProcs) expect(t *testing.T, when string, want int) {
	t.Helper()
	if got := f.now(); got != want {
		t.Errorf("%s: GOMAXPROCS %d, want %d", when, got, want)
	}
}

func (f *fakeProcs) now() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

func TestNewOff(t *testing.T) {
	for _, tc := range []struct{ start, serve int }{{2, 0}, {2, -1}, {2, 2}, {2, 3}, {1, 1}} {
		f := &fakeProcs{cur: tc.start}
		if g := New(tc.serve, f.set, nil); g != nil {
			t.Errorf("New(serve %d) with GOMAXPROCS %d = %+v, want nil (off)", tc.serve, tc.start, g)
		}
	}
	var g *Governor // off: every method is a no-op
	g.Serve()
	g.Work()()
	g.Stop()
	if g.Procs() != 0 {
		t.Error("a nil governor reports procs")
	}
}

func TestServeWork(t *testing.T) {
	f := &fakeProcs{cur: 4}
	g := New(1, f.set, nil)
	if f.now() != 4 {
		t.Fatalf("New changed GOMAXPROCS to %d", f.now())
	}
	// Work before serving (the initial sync): full, and still full after it (not serving yet).
	done := g.Work()
	done()
	f.expect(t, "after work before Serve", 4)
	g.Serve()
	f.expect(t, "serving", 1)
	// Overlapping works: full until the last ends; a second call of done changes nothing.
	d1, d2 := g.Work(), g.Work()
	f.expect(t, "working", 4)
	d1()
	d1()
	f.expect(t, "one of two works done", 4)
	d2()
	f.expect(t, "all works done", 1)
	g.Stop()
	f.expect(t, "stopped", 4)
	// Serve during work waits for it.
	g2 := New(1, f.set, nil)
	d := g2.Work()
	g2.Serve()
	f.expect(t, "Serve during work (full until it ends)", 4)
	d()
	f.expect(t, "work ended after Serve", 1)
	// Only changes are applied (each costs a stop-the-world).
	want := []int{1, 4, 1, 4, 1}
	if fmt.Sprint(f.sets) != fmt.Sprint(want) {
		t.Errorf("set calls %v, want %v", f.sets, want)
	}
}

// TestRuntime drives the real runtime setting through Runtime, with GOMAXPROCS from the environment
// (set back with the number) and without it (set back to the runtime's default).
func TestRuntime(t *testing.T) {
	for _, env := range []string{"", "2"} {
		t.Run("GOMAXPROCS="+env, func(t *testing.T) {
			if env != "" {
				t.Setenv("GOMAXPROCS", env)
			} else if _, set := os.LookupEnv("GOMAXPROCS"); set {
				t.Skip("GOMAXPROCS is set in this test's environment")
			}
			testRuntime(t)
		})
	}
}

func testRuntime(t *testing.T) {
	start := runtime.GOMAXPROCS(0)
	if start < 2 {
		t.Skip("needs GOMAXPROCS >= 2")
	}
	defer runtime.GOMAXPROCS(start)
	g := New(1, Runtime(), nil)
	g.Serve()
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Errorf("serving: GOMAXPROCS %d, want 1", n)
	}
	done := g.Work()
	if n := runtime.GOMAXPROCS(0); n != start {
		t.Errorf("working: GOMAXPROCS %d, want %d", n, start)
	}
	done()
	g.Stop()
	if n := runtime.GOMAXPROCS(0); n != start {
		t.Errorf("stopped: GOMAXPROCS %d, want %d", n, start)
	}
}

// TestConcurrentClients: requests that overlap in a sample raise the value (several clients), and it comes
// back down only after quietSamples samples without overlap; too few requests never count.
func TestConcurrentClients(t *testing.T) {
	f := &fakeProcs{cur: 2}
	g := New(1, f.set, nil)
	g.Serve()
	steps := []struct {
		begun, overlapped int64
		want              int
	}{
		{10, 10, 1},    // too few requests to judge
		{1000, 0, 1},   // one busy client
		{1000, 100, 1}, // 10 % overlapped: still one client (the kernel's own requests)
		{1000, 400, 2}, // several clients
		{0, 0, 2}, {0, 0, 2}, {0, 0, 2}, {0, 0, 2},
		{0, 0, 1}, // fifth quiet sample
		{1000, 300, 2},
		{1000, 0, 2},
		{1000, 300, 2}, // overlap again: the quiet count starts over
		{1000, 0, 2}, {1000, 0, 2}, {1000, 0, 2}, {1000, 0, 2},
		{1000, 0, 1},
	}
	for i, s := range steps {
		g.observe(s.begun, s.overlapped)
		if f.now() != s.want {
			t.Fatalf("step %d (%d begun, %d overlapped): GOMAXPROCS %d, want %d", i, s.begun, s.overlapped, f.now(), s.want)
		}
	}
	// Work during concurrency, and concurrency ending during work: the value stays full until both end.
	g.observe(1000, 1000)
	done := g.Work()
	for i := 0; i < quietSamples; i++ {
		g.observe(0, 0)
	}
	f.expect(t, "work still running", 2)
	done()
	f.expect(t, "work and concurrency over", 1)
	g.Stop()
}

// TestWatchSamples: Serve starts sampling the source, Stop ends it.
func TestWatchSamples(t *testing.T) {
	f := &fakeProcs{cur: 2}
	var mu sync.Mutex
	calls := 0
	g := New(1, f.set, func() (int64, int64) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return 1000, 1000
	})
	g.Serve()
	deadline := time.Now().Add(5 * time.Second)
	for f.now() != 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if f.now() != 2 {
		t.Fatalf("sampled concurrency never raised GOMAXPROCS: %d", f.now())
	}
	g.Stop()
	mu.Lock()
	n := calls
	mu.Unlock()
	time.Sleep(3 * sampleEvery)
	mu.Lock()
	defer mu.Unlock()
	if calls != n {
		t.Errorf("sampling went on after Stop: %d calls, then %d", n, calls)
	}
}

// TestConcurrentUse drives Work, observe, Serve and Stop from many goroutines at once (meant for
// `go test -race`; CI runs it without): the governor must end at the starting value, every work balanced.
func TestConcurrentUse(t *testing.T) {
	f := &fakeProcs{cur: 4}
	g := New(1, f.set, func() (int64, int64) { return 100, 50 })
	g.Serve()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				done := g.Work()
				g.observe(int64(j), int64(i))
				if j%50 == 0 {
					g.Serve()
				}
				done()
			}
		}(i)
	}
	wg.Wait()
	g.mu.Lock()
	busy := g.busy
	g.mu.Unlock()
	if busy != 0 {
		t.Errorf("%d works still counted after every done", busy)
	}
	g.Stop()
	f.expect(t, "after Stop", 4)
}
