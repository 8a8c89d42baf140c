package guardd

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pace/pacetest"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// gatedStore is a local store whose stats wait while the gate is closed (a slow S3 store).
type gatedStore struct {
	store.Store
	mu    sync.Mutex
	gate  chan struct{} // nil: open
	stats int           // while gated
	// inflight and maxInflight count the stats under way (each held for hold).
	inflight, maxInflight int
	hold                  time.Duration
}

func (g *gatedStore) Stat(ctx context.Context, p string) (store.ObjectInfo, error) {
	g.mu.Lock()
	gate := g.gate
	if gate != nil {
		g.stats++
	}
	g.inflight++
	g.maxInflight = max(g.maxInflight, g.inflight)
	hold := g.hold
	g.mu.Unlock()
	defer func() { g.mu.Lock(); g.inflight--; g.mu.Unlock() }()
	time.Sleep(hold)
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return store.ObjectInfo{}, ctx.Err()
		}
	}
	return g.Store.Stat(ctx, p)
}

// syncedIncident returns the first incident's tree in a local store seen through a gatedStore (open;
// counting: its stats counted from the start, the index's first sync among them) and an index of it,
// synced once and closed when the test ends.
func syncedIncident(t *testing.T, counting bool) (*treegen.Tree, *gatedStore, *refindex.Index) {
	t.Helper()
	tr, err := treegen.IncidentOne(filepath.Join(t.TempDir(), "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ls, err := localstore.New(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	st := &gatedStore{Store: ls}
	if counting {
		st.gate = make(chan struct{})
		close(st.gate)
	}
	ix, err := refindex.Open(filepath.Join(t.TempDir(), "index"), st, refindex.DefaultPolicy(), refindex.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	if err := ix.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	return tr, st, ix
}

type nopSink struct{}

func (nopSink) Record(*audit.Record) error { return nil }

// stepClock is a pace.Clock on the wall clock whose sleeps wait for the test: each is announced on
// slept with its length, and returns once the test sends on wake (or ctx ends).
type stepClock struct {
	slept chan time.Duration
	wake  chan struct{}
}

func newStepClock() *stepClock {
	return &stepClock{slept: make(chan time.Duration), wake: make(chan struct{})}
}

func (c *stepClock) Now() time.Time { return time.Now() }

func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error {
	select {
	case c.slept <- d:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-c.wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestLossWatchLoop: the loss check runs beside the caller (the sync loop): the first kick returns at
// once while the pass waits on the store and later kicks start nothing; the loop itself starts the next
// pass, without a kick, after the rest an unpaced pass needs (nine times its duration beyond it); a
// bound longer than the sync interval is logged as a WARN with ckguard_loss_check_duration_seconds set.
func TestLossWatchLoop(t *testing.T) {
	_, st, ix := syncedIncident(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs bytes.Buffer
	met := metrics.New()
	clk := newStepClock()
	w := &lossWatch{lc: ix.NewLossChecker(refindex.LossCheckOptions{}), met: met, audit: nopSink{},
		log: slog.New(slog.NewTextHandler(&logs, nil)), interval: 100 * time.Millisecond, clk: clk}
	defer w.wait()
	defer cancel()
	gate := make(chan struct{})
	st.mu.Lock()
	st.gate = gate
	st.mu.Unlock()

	for i := range 3 {
		t0 := time.Now()
		w.kick(ctx)
		if d := time.Since(t0); d > 2*time.Second {
			t.Fatalf("kick %d took %s while the store was blocked: the pass runs in the caller", i+1, d)
		}
	}
	time.Sleep(200 * time.Millisecond) // the pass outlasts the sync interval
	close(gate)
	rest := <-clk.slept // the first pass ended; the loop rests
	if !strings.Contains(logs.String(), "loss check: a loss shows only within") {
		t.Fatalf("no WARN of a bound above the interval:\n%s", logs.String())
	}
	dur, objects := gauge(t, met, "ckguard_loss_check_duration_seconds"), gauge(t, met, "ckguard_loss_check_objects")
	st.mu.Lock()
	stats := st.stats
	st.mu.Unlock()
	if stats != int(objects) || objects <= 0 {
		t.Fatalf("%d stats for %v referenced objects: want exactly one pass (the later kicks start none)", stats, objects)
	}
	if dur < 0.2 {
		t.Fatalf("ckguard_loss_check_duration_seconds = %v, want the blocked pass's duration (>= 0.2 s)", dur)
	}
	if rest.Seconds() < (lossDuty-1)*dur {
		t.Fatalf("rest of %s after a %.2f s unpaced pass, want at least %d times the pass", rest, dur, lossDuty-1)
	}
	clk.wake <- struct{}{}
	<-clk.slept // the second pass ended
	st.mu.Lock()
	again := st.stats - stats
	st.mu.Unlock()
	if again != stats {
		t.Fatalf("the loop's second pass sent %d stats, want a whole pass of %d without a kick", again, stats)
	}
	if !w.busy.Load() && gauge(t, met, "ckguard_loss_check_age_seconds") < 0 {
		t.Fatal("no complete check recorded after two passes")
	}
}

// TestLossWatchChunkGauges: a loss found in a chunk of a pass moves the job's gauges at that chunk's
// report, before the pass has checked the rest of the store.
func TestLossWatchChunkGauges(t *testing.T) {
	tr, st, ix := syncedIncident(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The object checked first (units are in folder, then key order): a chunk's report names it.
	var victim string
	for _, c := range tr.Live {
		for _, k := range c.Refs {
			if victim == "" || path.Dir(k)+"\x00"+k < path.Dir(victim)+"\x00"+victim {
				victim = k
			}
		}
	}
	if victim == "" {
		t.Fatal("no referenced object in the scenario")
	}
	if err := os.Remove(filepath.Join(tr.Root, filepath.FromSlash(victim))); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	met := metrics.New()
	w := &lossWatch{met: met, audit: nopSink{}, log: slog.New(slog.NewTextHandler(&logs, nil)), interval: time.Hour, clk: newStepClock()}
	statsAtShown := -1
	w.lc = ix.NewLossChecker(refindex.LossCheckOptions{Chunk: 1, Parallel: 1, Progress: func(rep *refindex.LossReport) {
		w.progress(rep)
		if statsAtShown < 0 && len(rep.Missing) > 0 {
			fams, err := met.Registry.Gather()
			if err != nil {
				t.Error(err)
				return
			}
			for _, f := range fams {
				if f.GetName() == "ckguard_missing_referenced_objects" && len(f.GetMetric()) > 0 {
					for _, m := range f.GetMetric() {
						if m.GetGauge().GetValue() > 0 {
							st.mu.Lock()
							statsAtShown = st.stats
							st.mu.Unlock()
						}
					}
				}
			}
		}
	}})
	w.run(ctx)
	objects := int(gauge(t, met, "ckguard_loss_check_objects"))
	if statsAtShown < 0 || statsAtShown >= st.stats || objects < 2 {
		t.Fatalf("gauge shown after %d of %d stats (%d objects): want it set by a chunk's report before the pass ended\n%s", statsAtShown, st.stats, objects, logs.String())
	}
	if !strings.Contains(logs.String(), victim) {
		t.Fatalf("no WARN naming %s:\n%s", victim, logs.String())
	}
}

// TestDetectionBound: a loss shows within the period between two passes' starts (lossPeriod, or the
// pass, or an unpaced pass and its rest) plus a chunk; under a rotation of several passes, that many
// periods plus a pass; never less than the revisit the last pass measured.
func TestDetectionBound(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		name                           string
		interval, pass, chunk, revisit time.Duration
		roundPasses                    int
		unpaced                        bool
		want                           time.Duration
	}{
		{"paced, fits", 30 * s, 20 * s, 4 * s, 0, 1, false, 22500*time.Millisecond + 4*s},
		{"paced, 1 M objects", 30 * s, 21 * s, 3 * s, 25 * s, 1, false, 22500*time.Millisecond + 3*s},
		{"paced, slower than the last pass", 30 * s, 21 * s, 3 * s, 31 * s, 1, false, 31 * s},
		{"paced, longer than the period", 30 * s, 45 * s, 4 * s, 0, 1, false, 49 * s},
		{"paced, rotation of three", 30 * s, 20 * s, 4 * s, 0, 3, false, 3*22500*time.Millisecond + 20*s},
		{"unpaced, short pass", 30 * s, 1 * s, 1 * s, 0, 1, true, 23500 * time.Millisecond},
		{"unpaced, rest beyond the period", 30 * s, 10 * s, 10 * s, 0, 1, true, 110 * s},
		{"no interval", 0, 2 * s, 2 * s, 0, 1, false, 4 * s},
	} {
		if got := detectionBound(tc.interval, tc.pass, tc.chunk, tc.revisit, tc.roundPasses, tc.unpaced); got != tc.want {
			t.Errorf("%s: bound %s, want %s", tc.name, got, tc.want)
		}
	}
}

// countingTraffic is a backend's request counter whose foreground moves by step at every look.
type countingTraffic struct {
	mu   sync.Mutex
	n    int64
	step int64
}

func (c *countingTraffic) Foreground() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += c.step
	return c.n
}

func (c *countingTraffic) Background(ctx context.Context) context.Context { return ctx }

// TestLossWatchPaced: a paced loss check spaces its requests by the rate, five times further while the
// mount's own requests flow, needs no rest after a pass (the loop starts the next one lossPeriod after
// its start), and exports and logs the detection bound.
func TestLossWatchPaced(t *testing.T) {
	_, st, ix := syncedIncident(t, true)
	ctx := context.Background()
	st.hold = 5 * time.Millisecond
	for _, tc := range []struct {
		name     string
		step     int64 // the mount's requests between two looks of the pacer
		gapWant  time.Duration
		inflight int // at most, with 16 workers
	}{
		{"idle mount", 0, 100 * time.Millisecond, 16},
		{"busy mount", 3, 500 * time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := pacetest.NewClock(time.Unix(1e9, 0))
			p := lossPacer(0, 10, &countingTraffic{step: tc.step})
			p.Clock = clk
			var logs bytes.Buffer
			met := metrics.New()
			wclk := newStepClock()
			w := &lossWatch{lc: ix.NewLossChecker(refindex.LossCheckOptions{Pacer: p, Parallel: 16}), met: met, audit: nopSink{},
				log: slog.New(slog.NewTextHandler(&logs, nil)), interval: time.Hour, pacer: p, clk: wclk}
			ctx, cancel := context.WithCancel(ctx)
			defer w.wait()
			defer cancel()
			st.mu.Lock()
			st.stats, st.maxInflight = 0, 0
			st.mu.Unlock()
			w.kick(ctx)
			rest := <-wclk.slept
			st.mu.Lock()
			stats, inflight := st.stats, st.maxInflight
			st.mu.Unlock()
			if inflight > tc.inflight {
				t.Errorf("%d stats in flight at once, want at most %d", inflight, tc.inflight)
			}
			if stats < 2 {
				t.Fatalf("%d stats", stats)
			}
			// Idle, the sleeps are exactly the spacing; busy, requests held back behind the one in flight
			// also sleep while they poll.
			if want := time.Duration(stats-1) * tc.gapWant; clk.Slept() < want || tc.step == 0 && clk.Slept() != want {
				t.Errorf("%d requests slept %s in all, want %s (%s apart)", stats, clk.Slept(), want, tc.gapWant)
			}
			if p.Sent() != int64(stats) {
				t.Errorf("%d requests paced, %d sent", p.Sent(), stats)
			}
			// No rest beyond the period: the next pass starts lossPeriod after this one's start.
			if rest > lossPeriod(time.Hour) || rest < lossPeriod(time.Hour)-time.Minute {
				t.Errorf("the loop waits %s after a paced pass, want the period %s less the pass", rest, lossPeriod(time.Hour))
			}
			wclk.wake <- struct{}{}
			<-wclk.slept
			st.mu.Lock()
			again := st.stats - stats
			st.mu.Unlock()
			if again != stats {
				t.Errorf("the loop's next pass sent %d stats, want a full pass of %d", again, stats)
			}
			// The period (45 min) plus the pass's one chunk, measured on the real clock: seconds under load.
			if !regexp.MustCompile(`a loss shows within 45m\d+s at this store's size`).MatchString(logs.String()) {
				t.Errorf("no INFO line with the bound (the period plus a chunk):\n%s", logs.String())
			}
			fams, err := met.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			bound := -1.0
			for _, f := range fams {
				if f.GetName() == "ckguard_loss_check_bound_seconds" {
					bound = f.GetMetric()[0].GetGauge().GetValue()
				}
			}
			if bound < 2700 || bound > 2800 {
				t.Errorf("ckguard_loss_check_bound_seconds = %v, want the 45 min period plus a chunk", bound)
			}
		})
	}
}

// TestLossPacerBusyRate: while the mount is busy the check keeps to lossBusyRate whatever its idle rate
// (a faster default gives the mount's own requests no more competition), or to a fifth of a rate slower
// than five times that.
func TestLossPacerBusyRate(t *testing.T) {
	for _, tc := range []struct {
		rate, busy float64 // requests per second, idle and busy
	}{
		{DefaultS3LossCheckRate, lossBusyRate},
		{200, lossBusyRate},
		{20, 4},
		{10, 2},
	} {
		p := lossPacer(tc.rate, 0, &countingTraffic{step: 1})
		clk := pacetest.NewClock(time.Unix(1e9, 0))
		p.Clock = clk
		ctx := context.Background()
		const n = 11
		for range n {
			release, err := p.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			release()
		}
		// Every look of the pacer sees the mount's count move: busy throughout.
		if want := time.Duration(float64(n-1) / tc.busy * float64(time.Second)); clk.Slept() < want-time.Millisecond || clk.Slept() > want+time.Millisecond {
			t.Errorf("rate %g: %d busy requests slept %s, want %s (%g a second)", tc.rate, n, clk.Slept(), want, tc.busy)
		}
	}
}

// TestBoundWarnHysteresis: a bound above the sync interval is WARNed once; it is called back ("within
// the sync interval again") only once the bound is a sixteenth of the interval below it, so a bound
// hovering at the interval does not log a WARN and an INFO pass after pass.
func TestBoundWarnHysteresis(t *testing.T) {
	const interval = 32 * time.Second // fits again at 30 s
	for _, tc := range []struct {
		name      string
		bounds    []time.Duration // one pass each
		warns     int
		fitsAgain int
	}{
		{"within all along", []time.Duration{20 * time.Second, 32 * time.Second}, 0, 0},
		{"hovering at the interval", []time.Duration{33 * time.Second, 31 * time.Second, 33 * time.Second, 31 * time.Second, 32 * time.Second}, 1, 0},
		{"well back within", []time.Duration{40 * time.Second, 31 * time.Second, 30 * time.Second, 31 * time.Second}, 1, 1},
		{"above again after fitting", []time.Duration{40 * time.Second, 29 * time.Second, 33 * time.Second}, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			w := &lossWatch{log: slog.New(slog.NewTextHandler(&logs, nil)), interval: interval}
			for _, b := range tc.bounds {
				w.noteBound(metrics.LossStats{Bound: b}, &refindex.LossReport{})
			}
			out := logs.String()
			if n := strings.Count(out, "longer than the sync interval"); n != tc.warns {
				t.Errorf("%d WARNs of a bound above the interval, want %d:\n%s", n, tc.warns, out)
			}
			if n := strings.Count(out, "within the sync interval again"); n != tc.fitsAgain {
				t.Errorf("%d lines saying it fits again, want %d:\n%s", n, tc.fitsAgain, out)
			}
		})
	}
}

// TestLossBusyRateFitsStore: after a pass the pace while the mount is busy is set to send a pass's
// requests twice over in a sync interval, never below lossPacer's busy pace (10 a second, or a fifth of
// a slower rate) nor above the idle rate, with one request in flight per 10 a second of that pace.
func TestLossBusyRateFitsStore(t *testing.T) {
	for _, tc := range []struct {
		name         string
		rate         float64
		budget       int
		roundReqs    int
		latency      time.Duration // the last pass's mean request time (0: unknown)
		wantBusy     float64
		wantInflight int
	}{
		{"small store keeps the floor", 75, 2000, 50, 0, 10, 1},
		{"1,000 listings at 30 s syncs", 75, 2000, 1000, 0, 2000.0 / 30, 7},
		{"capped at the idle rate", 75, 2000, 1800, 0, 75, 8},
		{"a pass is at most the budget", 75, 500, 5000, 0, 1000.0 / 30, 4},
		{"slow rate keeps a fifth of it", 20, 0, 10, 0, 4, 1},
		{"fast store keeps one per 10/s", 75, 2000, 1000, 20 * time.Millisecond, 2000.0 / 30, 7},
		{"slow store: enough in flight for the pace", 75, 2000, 1000, 200 * time.Millisecond, 2000.0 / 30, 14},
		{"very slow store: at most the idle parallelism", 75, 2000, 1000, 2 * time.Second, 2000.0 / 30, refindex.DefaultLossParallel},
		{"small store on a slow server", 75, 2000, 50, 250 * time.Millisecond, 10, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := lossPacer(0, tc.rate, nil)
			w := &lossWatch{pacer: p, interval: 30 * time.Second, budget: tc.budget}
			w.fitBusyRate(&refindex.LossReport{RoundRequests: tc.roundReqs, Latency: tc.latency})
			if busy := p.Rate / p.Yield; math.Abs(busy-tc.wantBusy) > 1e-9 || p.BusyInflight != tc.wantInflight {
				t.Errorf("busy pace %.3f/s with %d in flight, want %.3f/s with %d", busy, p.BusyInflight, tc.wantBusy, tc.wantInflight)
			}
		})
	}
}
