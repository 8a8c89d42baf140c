package guardd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pace"
)

// DefaultS3LossCheckBudget is the S3 mount's default --loss-check-budget: 2,000 requests per pass. A
// folder holding several referenced objects costs one listing request per 1,000 keys, a lone referenced
// object one HEAD, so in Flink's layout (a job's incremental state in one shared/ folder) one pass covers
// up to about 2,000,000 referenced objects in shared folders, or 2,000 scattered ones. A store that needs
// more is checked in a rotation of ckguard_loss_check_round_passes passes (WARN when it goes above 1).
// The period caps what the check costs: a store of N referenced objects in shared folders costs N/1,000
// requests per pass, a pass every lossPeriod (22.5 s at 30 s syncs, 3,840 a day) or back to back when
// one takes longer; on AWS (LIST $0.005 per 1,000 requests) 1,000,000 objects cost about $19 a day.
const DefaultS3LossCheckBudget = 2000

// DefaultS3LossCheckRate is the S3 mount's default --loss-check-rate, requests per second: a pass over
// 1,000,000 referenced objects in shared folders (about 1,000 listings) takes 13 s of paced requests,
// well inside lossPeriod (22.5 s at 30 s syncs) even when the syncs' own requests slow it down, so a
// loss shows within lossPeriod plus a chunk (26 s), inside one sync interval, up to about 1,600,000
// objects where the server answers as fast as the check is paced (at 50 a second a 1,000,000-object
// pass took 24.6 s on versitygw, and the bound was the interval to the second). While the mount sends
// requests of its own (within the last lossBusyWindow) the check slows down to the busy pace
// (fitBusyRate: lossBusyRate, 10 requests a second one at a time, or as fast as a pass fits twice in a
// sync interval, one request in flight per lossBusyRate, when that is faster) and takes the folders the mount just listed from
// those listings (refindex.ListingEvidence): a find or rm through the mount shares the server with
// fewer listings of the check than when it is idle. The rate only bounds a pass's speed, not its cost (the period does).
const DefaultS3LossCheckRate = 75

// lossBusyRate is the loss check's rate, requests per second, while the mount's own requests flow: the
// paced rate slowed by pace.DefaultYield, or down to this when that is faster; fitBusyRate raises it
// after a pass when a pass would not fit in the sync interval at this rate.
const lossBusyRate = 10

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
	// An object missing because Flink deletes its checkpoint itself (--flink-rest): not a loss.
	expectedDecision = "expected"
	expectedReason   = "flink-deletes"
)

// lossWatch runs the loss check pass after pass, beside the sync loop, from the first successful sync
// on, and reports what it finds: the per-job gauges after every chunk of a pass, and a WARN line and an
// audit record for each (object, checkpoint) pair the first time it is seen missing.
type lossWatch struct {
	lc    *refindex.LossChecker
	met   *metrics.Metrics
	audit audit.Sink
	log   *slog.Logger

	started  atomic.Bool   // the loop runs (kick starts it once)
	busy     atomic.Bool   // a pass is running
	interval time.Duration // the sync interval: passes start lossPeriod(interval) apart, and a bound above it is WARNed
	behind   bool
	// pacer spaces the passes' requests (nil: unpaced, a local store); budget is the requests per pass
	// (0: every object), for the bound's log line.
	pacer  *pace.Limiter
	budget int
	bound  time.Duration // the detection bound last logged (0: none yet)
	// clk schedules the passes (nil: the wall clock).
	clk pace.Clock
	// last is what the last pass measured; a chunk's report keeps it in the gauges.
	last metrics.LossStats

	wg     sync.WaitGroup // the loop
	passes int            // RoundPasses last logged (a WARN when it changes above 1)
	// listings, when set, is the mount's complete folder listings the check takes units from: its
	// figures (the listings' age, the gaps between checks of each unit) enter the bound.
	listings *refindex.ListingEvidence
	// heal, when set (--hold), is asked about every missing object of every report: a held object a
	// delete marker hides is brought back (Holds.Heal audits and counts it).
	heal func(ctx context.Context, key, checkpoint string) (bool, error)
	// observe, when set (a backend's Holds implementing LossObserver), gets every report.
	observe func(rep *refindex.LossReport)
	ctx     context.Context // the loop's, for heal
}

// lossEvidenceAge is the oldest mount listing the loss check takes instead of a request of its own: an
// eighth of the sync interval, as long as a chunk (the bound grows by at most that much).
func lossEvidenceAge(interval time.Duration) time.Duration { return interval / 8 }

// lossFitsAgain is how far below the sync interval the bound must come before the WARN "bound above
// interval" is called off: a sixteenth of it, so a bound near the interval does not log a WARN and an
// INFO at every pass.
func lossFitsAgain(interval time.Duration) time.Duration { return interval - interval/16 }

// lossPeriod is the shortest time from a pass's start to the next one's: three quarters of the sync
// interval, so that with a pass no longer than that and chunks of an eighth (lossChunk) a deletion
// right after an object's check is reported by the next pass within seven eighths of the interval. At
// least a second (no interval in tests: no busy loop).
func lossPeriod(interval time.Duration) time.Duration {
	return max(interval*3/4, time.Second)
}

// lossChunk is the requests of one chunk of a pass: what the pacer sends in an eighth of the sync
// interval (the loss check reports after each chunk, so a loss shows at most a chunk after its folder
// was listed). Unpaced (a local store, cheap stats): the pass is one chunk.
func lossChunk(interval time.Duration, pacer *pace.Limiter) int {
	if pacer == nil || pacer.Rate <= 0 || interval <= 0 {
		return 0
	}
	return max(1, int(pacer.Rate*(interval/8).Seconds()))
}

// kick starts the loop of passes beside the sync loop the first time (the first successful sync); the
// loop then schedules its passes itself (lossPeriod apart, or back to back when a pass outlasts that)
// and later kicks do nothing. A pass never runs in the sync, so a long one (a big bucket at 20 ms per
// request) delays neither the next sync nor the decisions that wait for the index.
func (w *lossWatch) kick(ctx context.Context) {
	if !w.started.CompareAndSwap(false, true) {
		return
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.loop(ctx)
	}()
}

// wait waits for the loop to end (cancel its context first to make it end soon).
func (w *lossWatch) wait() { w.wg.Wait() }

func (w *lossWatch) clock() pace.Clock {
	if w.clk != nil {
		return w.clk
	}
	return pace.Real{}
}

// loop runs passes until ctx ends: each starts lossPeriod after the previous one's start, or when it
// ended if it took longer (unpaced: after its rest, see lossDuty).
func (w *lossWatch) loop(ctx context.Context) {
	w.ctx = ctx
	clk := w.clock()
	for ctx.Err() == nil {
		t0 := clk.Now()
		w.busy.Store(true)
		w.run(ctx)
		w.busy.Store(false)
		d := clk.Now().Sub(t0)
		gap := d
		if w.pacer == nil {
			gap = lossDuty * d
		}
		if err := clk.Sleep(ctx, max(lossPeriod(w.interval), gap)-d); err != nil {
			return
		}
	}
}

// lossDuty bounds the share of time an unpaced loss check runs (a local store, or --loss-check-rate
// -1): after a pass of duration d the next starts no sooner than (lossDuty-1)·d later. A pass over a
// large store would otherwise run back to back, keeping the store, a core and memory busy all the time;
// on a small store d is far below lossPeriod, which then spaces the passes. A paced check (S3) needs no
// rest: its pacer bounds the requests per second, so a rest would only delay detection.
const lossDuty = 10

// publish sets the gauges from a report and logs and audits its new losses.
func (w *lossWatch) publish(rep *refindex.LossReport, st metrics.LossStats) {
	st.Jobs = make(map[string]metrics.JobLoss, len(rep.Jobs))
	for j, l := range rep.Jobs {
		st.Jobs[j] = metrics.JobLoss{BrokenCheckpoints: l.BrokenCheckpoints, MissingObjects: l.MissingObjects}
	}
	st.Objects, st.LastComplete = rep.Objects, rep.LastComplete
	st.Expected = expectedObjects(rep.Expected)
	w.met.SetLoss(st)
	w.healMissing(rep)
	if w.observe != nil {
		w.observe(rep)
	}
	w.recordExpected(rep)
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

// recordExpected logs (INFO) and audits the pairs of a report first found missing because Flink
// deletes their checkpoint itself: the audit has them, as "expected" with the reason, not as losses.
func (w *lossWatch) recordExpected(rep *refindex.LossReport) {
	for _, m := range rep.NewExpected {
		msg := fmt.Sprintf("loss check: %s, referenced by %s, is gone from the store as expected: %s", m.Path, m.Checkpoint, m.Expected)
		w.log.Info(msg, "file", m.Path, "checkpoint", m.Checkpoint, "job", m.Job)
		rec := audit.Record{Time: rep.Time, Op: lossOp, Decision: expectedDecision, Reason: expectedReason, Message: msg,
			Referencing: []string{m.Checkpoint}, RefCount: 1}
		rec.SetNames(m.Path, "")
		if err := w.audit.Record(&rec); err != nil {
			w.log.Error("audit record of an expected deletion not written", "file", m.Path, "checkpoint", m.Checkpoint, "err", err)
		}
	}
}

// expectedObjects counts the distinct objects of expected pairs.
func expectedObjects(ps []refindex.LostReference) int {
	seen := map[string]bool{}
	for _, p := range ps {
		seen[p.Path] = true
	}
	return len(seen)
}

// progress is the LossChecker's Progress: a chunk's report moves the gauges (and names its new losses)
// at once; the pass's figures stay the last pass's until it ends.
func (w *lossWatch) progress(rep *refindex.LossReport) { w.publish(rep, w.last) }

func (w *lossWatch) run(ctx context.Context) {
	clk := w.clock()
	t0 := clk.Now()
	rep, err := w.lc.Check(ctx)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, context.Canceled) {
			return
		}
		w.met.LossCheckFailed()
		w.log.Warn("loss check failed: referenced objects were not checked by this pass", "err", err)
		return
	}
	st := metrics.LossStats{RoundPasses: rep.RoundPasses, Duration: clk.Now().Sub(t0)}
	st.Bound = detectionBound(w.interval, st.Duration, rep.LongestChunk, rep.Revisit, rep.RoundPasses, w.pacer == nil)
	var ev refindex.EvidenceStats
	if w.listings != nil {
		ev = w.listings.TakeStats()
		st.Bound = evidenceBound(st.Bound, rep.LongestChunk, ev)
	}
	w.fitBusyRate(rep)
	w.noteBound(st, rep)
	if rep.RoundPasses != w.passes {
		if rep.RoundPasses > 1 {
			w.log.Warn(fmt.Sprintf("loss check: a complete check of the %d referenced objects takes %d passes (%d requests against a budget per pass): a loss shows only within %s; raise --loss-check-budget to check everything in every pass",
				rep.Objects, rep.RoundPasses, rep.RoundRequests, st.Bound.Round(time.Second)),
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
			"budget", w.budget, "took", st.Duration.Round(time.Millisecond), "longest_chunk", rep.LongestChunk.Round(time.Millisecond),
			"revisit", rep.Revisit.Round(time.Millisecond), "unit_gap", ev.MaxGap.Round(time.Millisecond), "from_listings", ev.Objects,
			"planning", rep.Planning.Round(time.Millisecond), "latency", rep.Latency.Round(time.Millisecond))
		w.bound = st.Bound
	}
	w.last = st
	w.publish(rep, st)
}

// noteBound WARNs when the bound goes above the sync interval and says so once when it fits again: a
// sixteenth of the interval below it (lossFitsAgain), so a bound hovering at the interval logs once,
// not a WARN and an INFO pass after pass.
func (w *lossWatch) noteBound(st metrics.LossStats, rep *refindex.LossReport) {
	switch {
	case w.interval > 0 && st.Bound > w.interval && !w.behind:
		w.behind = true
		w.log.Warn(fmt.Sprintf("loss check: a loss shows only within %s, longer than the sync interval %s (a pass took %s, %d requests): raise --loss-check-rate or --sync-interval, or look at the store's latency",
			st.Bound.Round(time.Second), w.interval, st.Duration.Round(time.Millisecond), rep.Requests), "took", st.Duration.Round(time.Millisecond), "objects", rep.Objects, "requests", rep.Requests,
			"bound", st.Bound.Round(time.Second), "revisit", rep.Revisit.Round(time.Millisecond))
	case w.behind && st.Bound <= lossFitsAgain(w.interval):
		w.behind = false
		w.log.Info("loss check: a loss shows within the sync interval again", "bound", st.Bound.Round(time.Second), "took", st.Duration.Round(time.Millisecond))
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

// detectionBound is how long after it happens a loss shows at most. Passes start lossPeriod apart, or
// back to back when a pass (unpaced: with its rest, lossDuty times its duration) takes longer: that is
// the period. A pass checks the objects in the same order at the same pace, so an object is checked
// again a period after its last check and its loss reported at the end of that chunk: the period plus
// a chunk. Under a budget a complete check takes roundPasses passes and the loss shows at the end of
// the pass that lists it: roundPasses periods plus a pass. revisit, when known, is what the last pass
// measured (a pass slower than the one before, the mount's own traffic meanwhile); the bound is never
// below it.
func detectionBound(interval, pass, chunk, revisit time.Duration, roundPasses int, unpaced bool) time.Duration {
	gap := pass
	if unpaced {
		gap = lossDuty * pass
	}
	period := max(lossPeriod(interval), gap)
	est := period + min(chunk, pass)
	if roundPasses > 1 {
		est = time.Duration(roundPasses)*period + pass
	}
	return max(est, revisit)
}

// evidenceBound adds to the bound what the mount's listings change: a unit taken from a listing counts
// as checked when the listing was requested, up to lossEvidenceAge before the pass got to it, so the
// period between two checks grows by the oldest listing taken; and it is never below the longest gap
// measured between two checks of one unit plus a chunk (the report of the chunk that held the second
// check), which also holds when the pass's requests came slower than the chunk marks assume.
func evidenceBound(bound, chunk time.Duration, ev refindex.EvidenceStats) time.Duration {
	if ev.Units > 0 {
		bound += ev.MaxAge
	}
	if ev.MaxGap > 0 {
		bound = max(bound, ev.MaxGap+chunk)
	}
	return bound
}

// fitBusyRate sets the pace while the mount is busy from the requests a pass takes: enough to send
// them twice over in a sync interval (a pass fits in lossPeriod, three quarters of it, with room for
// a server slowed down by the mount's own traffic), never below the floor (lossPacer's busy pace:
// lossBusyRate, or a fifth of the rate when slower) and never above the idle rate. Requests in flight
// grow with the pace, one per lossBusyRate (the floor's one at a time assumes a listing of up to
// 100 ms): with a fixed few in flight the server's latency, not the pace, would set the speed (at
// 1,000,000 objects on a loaded test server a listing took about a second, and two in flight would
// make a pass last 500 s), or more when the last pass measured a slower store (pace × its mean
// latency, at most DefaultLossParallel: at 1,000,000 objects during a find on a loaded test server a
// pass reached 25 of the 67 requests a second with 7 in flight). At 1,000,000 referenced objects in
// shared folders (1,000 listings) and 30 s syncs: 67 requests a second, 7 in flight (up to 16 on a
// slow store), against 75 and 16 when idle. The competition is the
// server's own capacity, far above that on S3 (5,500 requests a second per prefix).
func (w *lossWatch) fitBusyRate(rep *refindex.LossReport) {
	if w.pacer == nil || w.pacer.Rate <= 0 || w.interval <= 0 {
		return
	}
	perPass := rep.RoundRequests
	if w.budget > 0 {
		perPass = min(perPass, w.budget)
	}
	floor := min(lossBusyRate, w.pacer.Rate/pace.DefaultYield) // lossPacer's busy pace
	busy := min(w.pacer.Rate, max(floor, 2*float64(perPass)/w.interval.Seconds()))
	// The pace is reached only with pace × latency requests in flight: when the last pass measured
	// the store slower than the 100 ms one per lossBusyRate assumes, as many as that takes, never more
	// than the idle pass's DefaultLossParallel. The pace, not the requests in flight, caps what the
	// check asks of the store.
	inflight := int(math.Ceil(busy / lossBusyRate))
	if rep.Latency > 0 {
		inflight = max(inflight, int(math.Ceil(busy*rep.Latency.Seconds())))
	}
	w.pacer.SetBusy(max(1, w.pacer.Rate/busy), max(1, min(inflight, refindex.DefaultLossParallel)))
}

// lossBusyWindow is how long after the mount's last request of its own the loss check keeps yielding
// (at lossBusyRate, one request in flight): a find or rm through the mount sends a
// request every few tens of milliseconds, with gaps while the kernel consumes a page.
const lossBusyWindow = time.Second

// lossPacer is the loss check's pacer for a mount: the flag when given (negative: unpaced), else the
// backend's default (0: unpaced). It slows down to lossBusyRate (or by pace.DefaultYield when that is
// slower) while the backend's Traffic counts the mount's own requests.
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
	// While the mount is busy the check keeps to lossBusyRate (or rate/DefaultYield when slower): a
	// higher idle rate gives the mount's own traffic no more competition.
	l := &pace.Limiter{Rate: rate, Yield: max(pace.DefaultYield, rate/lossBusyRate)}
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

// healMissing asks heal about each missing object of rep, once per object. It runs in the pass, outside
// any lock of the enforcer; a failure is logged and retried at the next report that still lists it.
func (w *lossWatch) healMissing(rep *refindex.LossReport) {
	if w.heal == nil || w.ctx == nil {
		return
	}
	done := map[string]bool{}
	for _, m := range rep.Missing {
		if done[m.Path] {
			continue
		}
		done[m.Path] = true
		if _, err := w.heal(w.ctx, m.Path, m.Checkpoint); err != nil && w.ctx.Err() == nil {
			w.log.Warn("could not bring back a held referenced object hidden by a delete marker; retried at the next loss check pass", "file", m.Path, "checkpoint", m.Checkpoint, "err", err)
		}
	}
}
