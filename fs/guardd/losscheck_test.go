package guardd

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pace/pacetest"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/localstore"
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

type nopSink struct{}

func (nopSink) Record(*audit.Record) error { return nil }

// TestLossWatchBesideSync: a loss check pass runs beside the caller (the sync loop): kick returns at
// once while the pass waits on the store, a kick during a running pass starts none, and a pass longer
// than the sync interval is logged as a WARN with ckguard_loss_check_duration_seconds set.
func TestLossWatchBesideSync(t *testing.T) {
	tr, err := treegen.IncidentOne(filepath.Join(t.TempDir(), "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ls, err := localstore.New(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	st := &gatedStore{Store: ls}
	ix, err := refindex.Open(filepath.Join(t.TempDir(), "index"), st, refindex.DefaultPolicy(), refindex.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	ctx := context.Background()
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	met := metrics.New()
	w := &lossWatch{lc: ix.NewLossChecker(refindex.LossCheckOptions{}), met: met, audit: nopSink{},
		log: slog.New(slog.NewTextHandler(&logs, nil)), interval: 100 * time.Millisecond}
	gate := make(chan struct{})
	st.mu.Lock()
	st.gate = gate
	st.mu.Unlock()

	for i := range 2 {
		t0 := time.Now()
		w.kick(ctx)
		if d := time.Since(t0); d > 2*time.Second {
			t.Fatalf("kick %d took %s while the store was blocked: the pass runs in the caller", i+1, d)
		}
	}
	time.Sleep(200 * time.Millisecond) // the pass outlasts the sync interval
	close(gate)
	w.wait()
	if w.busy.Load() {
		t.Fatal("a pass still marked running after wait")
	}
	if n := strings.Count(logs.String(), "loss check: a pass took"); n != 1 {
		t.Fatalf("%d WARNs of a pass longer than the interval, want 1 (the second kick started no pass):\n%s", n, logs.String())
	}
	fams, err := met.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var dur, objects float64 = -1, -1
	for _, f := range fams {
		switch f.GetName() {
		case "ckguard_loss_check_duration_seconds":
			dur = f.GetMetric()[0].GetGauge().GetValue()
		case "ckguard_loss_check_objects":
			objects = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if st.stats != int(objects) || objects <= 0 {
		t.Fatalf("%d stats for %v referenced objects: want exactly one pass (the second kick starts none)", st.stats, objects)
	}
	if dur < 0.2 {
		t.Fatalf("ckguard_loss_check_duration_seconds = %v, want the blocked pass's duration (>= 0.2 s)", dur)
	}
	// After a long pass the check rests nine times as long: a sync right after it starts none.
	before := st.stats
	w.kick(ctx)
	w.wait()
	if st.stats != before {
		t.Fatalf("a kick right after a %.1f s pass started another (%d stats): the check must rest after a long pass", dur, st.stats-before)
	}
	w.restTill.Store(time.Now().UnixNano()) // the rest is over
	w.kick(ctx)
	w.wait()
	if st.stats == before {
		t.Fatal("a kick after the rest started no pass")
	}
}

// TestDetectionBound: a loss shows at most the passes of a complete check times the time between two
// passes (the sync interval, or the first sync after the pass, or after the rest of an unpaced one),
// plus one pass.
func TestDetectionBound(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		name           string
		interval, pass time.Duration
		roundPasses    int
		unpaced        bool
		want           time.Duration
	}{
		{"paced, fits", 30 * s, 20 * s, 1, false, 50 * s},
		{"paced, longer than the interval", 30 * s, 45 * s, 1, false, 60*s + 45*s},
		{"paced, rotation of three", 30 * s, 20 * s, 3, false, 90*s + 20*s},
		{"unpaced, short pass", 30 * s, 1 * s, 1, true, 31 * s},
		{"unpaced, rest beyond the interval", 30 * s, 10 * s, 1, true, 120*s + 10*s},
		{"no interval", 0, 2 * s, 1, false, 2 * s},
	} {
		if got := detectionBound(tc.interval, tc.pass, tc.roundPasses, tc.unpaced); got != tc.want {
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
// mount's own requests flow, needs no rest after a pass (the next sync starts one), and exports and logs
// the detection bound.
func TestLossWatchPaced(t *testing.T) {
	tr, err := treegen.IncidentOne(filepath.Join(t.TempDir(), "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ls, err := localstore.New(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	st := &gatedStore{Store: ls, gate: make(chan struct{})}
	close(st.gate) // open, counting stats
	ix, err := refindex.Open(filepath.Join(t.TempDir(), "index"), st, refindex.DefaultPolicy(), refindex.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	ctx := context.Background()
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
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
			w := &lossWatch{lc: ix.NewLossChecker(refindex.LossCheckOptions{Pacer: p, Parallel: 16}), met: met, audit: nopSink{},
				log: slog.New(slog.NewTextHandler(&logs, nil)), interval: time.Hour, pacer: p}
			st.mu.Lock()
			st.stats, st.maxInflight = 0, 0
			st.mu.Unlock()
			w.kick(ctx)
			w.wait()
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
			// No rest: the next sync's kick starts a pass at once.
			w.kick(ctx)
			w.wait()
			st.mu.Lock()
			again := st.stats - stats
			st.mu.Unlock()
			if again != stats {
				t.Errorf("the kick after a paced pass sent %d stats, want a full pass of %d (a paced check rests not)", again, stats)
			}
			if !strings.Contains(logs.String(), "a loss shows within 1h0m0s at this store's size") {
				t.Errorf("no INFO line with the bound (the interval plus a pass):\n%s", logs.String())
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
			if bound < 3600 || bound > 3700 {
				t.Errorf("ckguard_loss_check_bound_seconds = %v, want the 1 h interval plus one pass", bound)
			}
		})
	}
}
