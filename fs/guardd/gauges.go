package guardd

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/fs/procs"
	"github.com/ckguard/ckguard/refindex"
)

// walkGaugesEvery is the shortest interval between two refreshes of the byte gauges; the interval is also
// at least walkGaugesFactor times the last refresh's duration, so the walk takes at most a tenth of the
// daemon's time whatever the store's size (it used to walk the store twice after every sync: at 1 M files
// most of a core, all the time).
const (
	walkGaugesEvery  = 10 * time.Minute
	walkGaugesFactor = 10
)

// gauges refreshes the index gauges after a sync. The counts and the lag come from the index's memory at
// every sync, on every backend. The byte gauges need a walk of the store (ckguard orphans' walk, which
// also sums the store's bytes: one walk for both): it runs in the background, one at a time and never
// more often than above, and only where walk is set (not over S3, where a walk lists the bucket).
type gauges struct {
	walk bool

	mu       sync.Mutex
	busy     bool
	lastWalk time.Time
	took     time.Duration
	now      func() time.Time // tests; nil = time.Now
}

func (g *gauges) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

func (g *gauges) refresh(ctx context.Context, q refindex.Querier, met *metrics.Metrics, gov *procs.Governor, log *slog.Logger) {
	s, err := q.Stats(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			log.Warn("index stats for metrics", "err", err)
		}
		return
	}
	met.SetIndexCounts(metrics.IndexStats{LiveCheckpoints: int64(s.Checkpoints), LiveSavepoints: int64(s.Savepoints), LastSync: s.LastSync, ClockBehind: time.Duration(s.StoreClockBehind),
		UnmappedReferences: int64(s.UnmappedReferences), InferredMaps: int64(len(s.InferredMaps)), UnknownSubtrees: int64(len(s.UnknownSubtrees)),
		DamagedMetadata: int64(s.DamagedMetadata), ConfinedMetadata: int64(s.ConfinedMetadata), BlockingMetadata: int64(s.BlockingMetadata)})
	if !g.startWalk() {
		return
	}
	go func() {
		t0 := g.clock()
		defer func() {
			g.mu.Lock()
			g.busy, g.lastWalk, g.took = false, t0, g.clock().Sub(t0)
			g.mu.Unlock()
		}()
		defer gov.Work()()
		if o, err := q.Orphans(ctx, 0); err == nil && o.Blocked == "" {
			met.SetStoreBytes(o.StoreBytes-o.Bytes, o.Bytes)
		}
	}()
}

// startWalk reports whether a byte-gauge walk is due now, and marks it running.
func (g *gauges) startWalk() bool {
	if !g.walk {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.busy || !g.lastWalk.IsZero() && g.clock().Sub(g.lastWalk) < max(walkGaugesEvery, walkGaugesFactor*g.took) {
		return false
	}
	g.busy = true
	return true
}
