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
}

func (g *gatedStore) Stat(ctx context.Context, p string) (store.ObjectInfo, error) {
	g.mu.Lock()
	gate := g.gate
	if gate != nil {
		g.stats++
	}
	g.mu.Unlock()
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
