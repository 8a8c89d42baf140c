package guardd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pace"
)

// DefaultS3LossCheckBudget is the S3 mount's default --loss-check-budget: 1,000 requests per pass. A
// folder holding several referenced objects costs one listing request per 1,000 keys, a lone referenced
// object one HEAD, so in Flink's layout (a job's incremental state in one shared/ folder) one pass covers
// up to about 1,000,000 referenced objects in shared folders, or 1,000 scattered ones. A store that needs
// more is checked in a rotation of ckguard_loss_check_round_passes passes (WARN when it goes above 1);
// ckguard_loss_check_age_seconds says how old the last complete one is. On AWS (LIST $0.005 per 1,000
// requests) a full budget at every 30 s sync costs at most 2,880,000 requests a day, $14.40 (about $430
// a month); a store of N referenced objects in shared folders costs N/1,000 of it per sync.
const DefaultS3LossCheckBudget = 1000

// DefaultS3LossCheckRate is the S3 mount's default --loss-check-rate, requests per second: the default
// budget (1,000 requests) in 20 s, inside the default 30 s sync interval with a third to spare, so a
// store up to about 1,000,000 referenced objects in shared folders is checked completely between two
// syncs and a loss shows within the interval plus one pass (50 s). While the mount sends requests of its
// own (within the last lossBusyWindow) the check runs pace.DefaultYield (5) times slower (10 requests a
// second) and one request at a time: a find or rm through the mount shares the server with at most one
// listing of the check.
const DefaultS3LossCheckRate = 50

// Traffic is what the loss check needs of a backend's request counter (s3client.Traffic).
type Traffic interface {
	// Foreground is the number of requests sent so far on behalf of the mount.
	Foreground() int64
	// Background marks ctx: requests made with it are not counted.
	Background(ctx context.Context) context.Context
}

// Audit vocabulary of a loss: not a decision of the guard, a finding of the mount's loss check.
const (
	lossOp       = "loss-check"
	lossDecision = "missing"
	lossReason   = "referenced-object-missing"
)

// lossWatch runs the loss check after each successful sync and reports what it finds: the per-job
// gauges after every pass, and a WARN line and an audit record for each (object, checkpoint) pair the
// first pass that sees it missing.
type lossWatch struct {
	lc    *refindex.LossChecker
	met   *metrics.Metrics
	audit audit.Sink
	log   *slog.Logger

	busy     atomic.Bool   // a pass is running
	restTill atomic.Int64  // unix nanoseconds before which no pass starts (unpaced: see lossDuty)
	interval time.Duration // the sync interval: a pass longer than it is WARNed (once until one fits again)
	behind   bool
	// pacer spaces the passes' requests (nil: unpaced, a local store); budget is the requests per pass
	// (0: every object), for the bound's log line.
	pacer  *pace.Limiter
	budget int
	bound  time.Duration // the detection bound last logged (0: none yet)

	wg     sync.WaitGroup // the running pass
	passes int            // RoundPasses last logged (a WARN when it changes above 1)
}

// kick starts a pass beside the sync loop, unless one is still running (that pass covers the same
// store; the next sync kicks again). A pass never runs in the sync, so a long one (a big bucket at
// 20 ms per request) delays neither the next sync nor the decisions that wait for the index.
func (w *lossWatch) kick(ctx context.Context) {
	if time.Now().UnixNano() < w.restTill.Load() {
		w.log.Debug("loss check: resting after a long pass; this sync starts none")
		return
	}
	if !w.busy.CompareAndSwap(false, true) {
		w.log.Debug("loss check: the previous pass is still running; this sync starts none")
		return
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer w.busy.Store(false)
		w.run(ctx)
	}()
}

// wait waits for the running pass (cancel its context first to make it end soon).
func (w *lossWatch) wait() { w.wg.Wait() }

// lossDuty bounds the share of time an unpaced loss check runs (a local store, or --loss-check-rate
// -1): after a pass of duration d the next starts no sooner than (lossDuty-1)·d later. A pass over a
// large store would otherwise run back to back, keeping the store, a core and memory busy all the time;
// on a small store d is far below the sync interval and every sync still starts one. A paced check
// (S3) needs no rest: its pacer bounds the requests per second, so a rest would only delay detection.
const lossDuty = 10

func (w *lossWatch) run(ctx context.Context) {
	t0 := time.Now()
	if w.pacer == nil {
		defer func() { w.restTill.Store(time.Now().Add((lossDuty - 1) * time.Since(t0)).UnixNano()) }()
	}
	rep, err := w.lc.Check(ctx)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, context.Canceled) {
			return
		}
		w.met.LossCheckFailed()
		w.log.Warn("loss check failed: referenced objects were not checked by this pass", "err", err)
		return
	}
	st := metrics.LossStats{Jobs: make(map[string]metrics.JobLoss, len(rep.Jobs)), Objects: rep.Objects, LastComplete: rep.LastComplete,
		RoundPasses: rep.RoundPasses, Duration: time.Since(t0)}
	st.Bound = detectionBound(w.interval, st.Duration, rep.RoundPasses, w.pacer == nil)
	switch {
	case w.interval > 0 && st.Duration > w.interval && !w.behind:
		w.behind = true
		w.log.Warn(fmt.Sprintf("loss check: a pass took %s, longer than the sync interval %s: the syncs meanwhile start no pass, so a loss shows only within %s; raise --loss-check-rate or --sync-interval, or look at the store's latency",
			st.Duration.Round(time.Millisecond), w.interval, st.Bound.Round(time.Second)), "took", st.Duration.Round(time.Millisecond), "objects", rep.Objects, "requests", rep.Requests,
			"bound", st.Bound.Round(time.Second))
	case w.behind && st.Duration <= w.interval:
		w.behind = false
		w.log.Info("loss check: a pass fits in the sync interval again", "took", st.Duration.Round(time.Millisecond))
	}
	if rep.RoundPasses != w.passes {
		if rep.RoundPasses > 1 {
			w.log.Warn(fmt.Sprintf("loss check: a complete check of the %d referenced objects takes %d passes (one per sync, %d requests against a budget per pass): a loss shows only within %s, %d sync intervals after it happened; raise --loss-check-budget to check everything at every sync",
				rep.Objects, rep.RoundPasses, rep.RoundRequests, st.Bound.Round(time.Second), rep.RoundPasses),
				"objects", rep.Objects, "round_requests", rep.RoundRequests, "round_passes", rep.RoundPasses, "bound", st.Bound.Round(time.Second))
		} else if w.passes > 1 {
			w.log.Info("loss check: a complete check fits in one pass again", "objects", rep.Objects, "round_requests", rep.RoundRequests)
		}
		w.passes = rep.RoundPasses
	}
	// The bound is logged after the first pass (the mount's start) and again whenever it doubles or halves.
	if w.bound == 0 || st.Bound > 2*w.bound || 2*st.Bound < w.bound {
		rate := "unpaced"
		if w.pacer != nil {
			rate = fmt.Sprintf("%g requests/s", w.pacer.Rate)
		}
		w.log.Info(fmt.Sprintf("loss check: a loss shows within %s at this store's size (%d referenced objects, %d requests per complete check, %d pass(es), the last %s, %s)",
			st.Bound.Round(time.Second), rep.Objects, rep.RoundRequests, rep.RoundPasses, st.Duration.Round(time.Millisecond), rate),
			"bound", st.Bound.Round(time.Second), "objects", rep.Objects, "round_requests", rep.RoundRequests, "round_passes", rep.RoundPasses,
			"budget", w.budget, "took", st.Duration.Round(time.Millisecond))
		w.bound = st.Bound
	}
	for j, l := range rep.Jobs {
		st.Jobs[j] = metrics.JobLoss{BrokenCheckpoints: l.BrokenCheckpoints, MissingObjects: l.MissingObjects}
	}
	w.met.SetLoss(st)
	for _, m := range rep.New {
		msg := lossMessage(m)
		attrs := []any{"file", m.Path, "checkpoint", m.Checkpoint, "job", m.Job}
		if m.Quarantine != nil {
			attrs = append(attrs, "quarantined_since", m.Quarantine.Since.Format(time.RFC3339), "restore", m.Quarantine.Restore)
			if m.Quarantine.DeleteMarker != "" {
				attrs = append(attrs, "delete_marker", m.Quarantine.DeleteMarker)
			}
		}
		w.log.Warn(msg, attrs...)
		rec := audit.Record{Time: rep.Time, Op: lossOp, Decision: lossDecision, Reason: lossReason, Message: msg,
			Referencing: []string{m.Checkpoint}, RefCount: 1}
		rec.SetNames(m.Path, "")
		if err := w.audit.Record(&rec); err != nil {
			w.log.Error("audit record of a lost referenced object not written", "file", m.Path, "checkpoint", m.Checkpoint, "err", err)
		}
	}
}

// lossMessage names the file, the checkpoint and what to do.
func lossMessage(m refindex.LostReference) string {
	head := fmt.Sprintf("referenced object %s of live checkpoint %s (job %s) is missing from the store: it was removed outside the mount, and a restore from that checkpoint would fail", m.Path, m.Checkpoint, m.Job)
	if q := m.Quarantine; q != nil && q.DeleteMarker != "" {
		return fmt.Sprintf("%s; a delete marker (version %s, %s) hides it on this versioned bucket: remove the marker with `%s`", head, q.DeleteMarker, q.Since.Format(time.RFC3339), q.Restore)
	}
	if q := m.Quarantine; q != nil {
		return fmt.Sprintf("%s; it is in quarantine since %s: restore it with `%s`", head, q.Since.Format(time.RFC3339), q.Restore)
	}
	return head + "; put it back from a backup or another copy, or restore the job from the checkpoint `ckguard latest --job " + m.Job + "` names"
}

// detectionBound is how long after it happens a loss shows at most: a pass starts at a sync, no sooner
// than the previous one's end (unpaced: its rest, lossDuty times its duration after its start), so the
// passes of one object's checks are period = the interval rounded up past that apart; a complete check
// takes roundPasses of them, and the loss shows at the end of the pass that lists the object.
func detectionBound(interval, pass time.Duration, roundPasses int, unpaced bool) time.Duration {
	gap := pass
	if unpaced {
		gap = lossDuty * pass
	}
	period := interval
	if interval > 0 && gap > interval {
		period = interval * ((gap + interval - 1) / interval)
	}
	return time.Duration(max(1, roundPasses))*period + pass
}

// lossBusyWindow is how long after the mount's last request of its own the loss check keeps yielding
// (its slots five times further apart, one request in flight): a find or rm through the mount sends a
// request every few tens of milliseconds, with gaps while the kernel consumes a page.
const lossBusyWindow = time.Second

// lossPacer is the loss check's pacer for a mount: the flag when given (negative: unpaced), else the
// backend's default (0: unpaced). It slows down while the backend's Traffic counts the mount's own
// requests.
func lossPacer(flag, backend float64, tr Traffic) *pace.Limiter {
	rate := backend
	switch {
	case flag < 0:
		return nil
	case flag > 0:
		rate = flag
	}
	if rate <= 0 {
		return nil
	}
	l := &pace.Limiter{Rate: rate}
	if tr != nil {
		last := tr.Foreground()
		var moved time.Time
		// Called under the limiter's lock: last and moved need no lock of their own.
		l.Busy = func(now time.Time) bool {
			if n := tr.Foreground(); n != last {
				last, moved = n, now
			}
			return !moved.IsZero() && now.Sub(moved) < lossBusyWindow
		}
	}
	return l
}

// lossBudget is the loss check's budget for a mount: the flag when given (negative: every object at
// every pass), else the backend's default (0: every object).
func lossBudget(flag, backend int) int {
	switch {
	case flag < 0:
		return 0
	case flag > 0:
		return flag
	}
	return backend
}
