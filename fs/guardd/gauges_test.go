package guardd

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex"
)

// fakeQuerier answers Stats and counts the orphans walks (blocked on release while running).
type fakeQuerier struct {
	refindex.Querier
	last    time.Time
	walks   atomic.Int32
	release chan struct{}
}

func (f *fakeQuerier) Stats(context.Context) (*refindex.StatsResult, error) {
	return &refindex.StatsResult{Checkpoints: 7, LastSync: f.last}, nil
}

func (f *fakeQuerier) Orphans(context.Context, time.Duration) (*refindex.OrphansResult, error) {
	f.walks.Add(1)
	<-f.release
	return &refindex.OrphansResult{Bytes: 5, StoreBytes: 12}, nil
}

func gauge(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestGaugesLagOnEveryBackend: the lag and the counts are set after every sync even where the byte gauges
// are off (an S3 mount: the lag stayed at -1 there, so the lag alert never fired where the lag happens).
func TestGaugesLagOnEveryBackend(t *testing.T) {
	q := &fakeQuerier{last: time.Now().Add(-3 * time.Second), release: make(chan struct{})}
	close(q.release)
	m := metrics.New()
	g := &gauges{walk: false}
	g.refresh(context.Background(), q, m, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if lag := gauge(t, m, "ckguard_index_lag_seconds"); lag < 3 || lag > 60 {
		t.Errorf("lag = %v, want about 3 s", lag)
	}
	if n := gauge(t, m, "ckguard_live_checkpoints"); n != 7 {
		t.Errorf("live checkpoints = %v", n)
	}
	if q.walks.Load() != 0 {
		t.Errorf("the byte gauges walked the store with walking off")
	}
}

// TestGaugesWalkRarely: the byte gauges' walk runs one at a time and at most every walkGaugesEvery (or ten
// times its own duration), not after every sync: a local mount used to walk the whole store twice per sync.
func TestGaugesWalkRarely(t *testing.T) {
	q := &fakeQuerier{last: time.Now(), release: make(chan struct{})}
	m := metrics.New()
	now := time.Unix(1_000_000, 0)
	g := &gauges{walk: true, now: func() time.Time { return now }}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for range 5 {
		g.refresh(context.Background(), q, m, nil, log) // syncs while the first walk runs
	}
	close(q.release)
	waitIdle(t, g)
	if n := q.walks.Load(); n != 1 {
		t.Fatalf("%d walks for 5 syncs during one walk, want 1", n)
	}
	if got := gauge(t, m, "ckguard_referenced_bytes"); got != 7 {
		t.Errorf("referenced bytes = %v, want store bytes minus orphaned (12-5) from the one walk", got)
	}
	for _, tc := range []struct {
		after time.Duration
		walks int32
	}{
		{time.Minute, 1},                     // a sync a minute later: no walk
		{walkGaugesEvery - 2*time.Minute, 1}, // still within the interval
		{2 * time.Minute, 2},                 // due
	} {
		now = now.Add(tc.after)
		g.refresh(context.Background(), q, m, nil, log)
		waitIdle(t, g)
		if n := q.walks.Load(); n != tc.walks {
			t.Errorf("after %v more: %d walks, want %d", tc.after, n, tc.walks)
		}
	}
}

func waitIdle(t *testing.T, g *gauges) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		busy := g.busy
		g.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("gauge walk did not finish")
		}
		time.Sleep(time.Millisecond)
	}
}
