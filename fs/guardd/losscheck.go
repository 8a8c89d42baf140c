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
)

// DefaultS3LossCheckBudget is the S3 mount's default --loss-check-budget: 1,000 requests per pass
// (about 1.3 s at 20 ms each with 16 in flight). A folder holding several referenced objects costs one
// listing request per 1,000 keys, a lone referenced object one HEAD, so in Flink's layout (a job's
// incremental state in one shared/ folder) one pass covers up to about 1,000,000 referenced objects in
// shared folders, or 1,000 scattered ones. A store that needs more is checked in a rotation of
// ckguard_loss_check_round_passes passes (WARN when it goes above 1); ckguard_loss_check_age_seconds
// says how old the last complete one is.
const DefaultS3LossCheckBudget = 1000

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
	restTill atomic.Int64  // unix nanoseconds before which no pass starts (see lossDuty)
	interval time.Duration // the sync interval: a pass longer than it is WARNed (once until one fits again)
	behind   bool

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

// lossDuty bounds the share of time the loss check runs: after a pass of duration d the next starts no
// sooner than (lossDuty-1)·d later. A pass over a large bucket (listings of every folder that holds
// referenced objects, and every reference read from the index) would otherwise run back to back,
// keeping the store, a core and memory busy all the time; on a small store d is far below the sync
// interval and every sync still starts one.
const lossDuty = 10

func (w *lossWatch) run(ctx context.Context) {
	t0 := time.Now()
	defer func() { w.restTill.Store(time.Now().Add((lossDuty - 1) * time.Since(t0)).UnixNano()) }()
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
	switch {
	case w.interval > 0 && st.Duration > w.interval && !w.behind:
		w.behind = true
		w.log.Warn(fmt.Sprintf("loss check: a pass took %s, longer than the sync interval %s: the syncs meanwhile start no pass, so a loss may show only after this long; raise --sync-interval or look at the store's latency",
			st.Duration.Round(time.Millisecond), w.interval), "took", st.Duration.Round(time.Millisecond), "objects", rep.Objects, "requests", rep.Requests)
	case w.behind && st.Duration <= w.interval:
		w.behind = false
		w.log.Info("loss check: a pass fits in the sync interval again", "took", st.Duration.Round(time.Millisecond))
	}
	if rep.RoundPasses != w.passes {
		if rep.RoundPasses > 1 {
			w.log.Warn(fmt.Sprintf("loss check: a complete check of the %d referenced objects takes %d passes (one per sync, %d requests against a budget per pass): a loss may show only %d sync intervals after it happened; raise --loss-check-budget to check everything at every sync",
				rep.Objects, rep.RoundPasses, rep.RoundRequests, rep.RoundPasses),
				"objects", rep.Objects, "round_requests", rep.RoundRequests, "round_passes", rep.RoundPasses)
		} else if w.passes > 1 {
			w.log.Info("loss check: a complete check fits in one pass again", "objects", rep.Objects, "round_requests", rep.RoundRequests)
		}
		w.passes = rep.RoundPasses
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
