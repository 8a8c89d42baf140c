package s3mount

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/verdict"
	"github.com/ckguard/ckguard/s3backend/deleteq"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// openQueue starts the mount's queue of acknowledged deletions (deleteq) when the options ask for one
// and the server honours If-Match on deletes (without it a queued delete could not be conditional on the
// version decided, and unlink stays synchronous, as before).
func (f *filesystem) openQueue() error {
	o := f.opts
	if o.DeleteQueueDir == "" || o.FreshETags {
		return nil
	}
	qo := deleteq.Options{Dir: o.DeleteQueueDir, Deleter: f.deleter(), Recheck: f, Batch: o.DeleteBatch && o.Quarantine == nil,
		Limit: o.DeleteQueueLimit, VerifyAfter: o.ETagTTL, Done: f.queueDone, Logger: f.log}
	if o.Metrics != nil {
		qo.Registry = o.Metrics.Registry
	}
	if o.tuneQueue != nil {
		o.tuneQueue(&qo)
	}
	q, err := deleteq.Open(qo)
	if err != nil {
		return fmt.Errorf("delete queue in %s: %w", o.DeleteQueueDir, err)
	}
	f.q = q
	return nil
}

// hidden reports whether key's deletion was acknowledged and is not applied yet: the mount shows it gone.
func (f *filesystem) hidden(key string) bool {
	return f.q != nil && f.q.Pending(key)
}

// enqueue acknowledges the allowed deletion of o (the version judged) by queueing it; false: the caller
// deletes synchronously. A _metadata is never queued: its deletion retires a checkpoint in the index
// (Checker.Deleted), which must only follow the object really being gone.
func (f *filesystem) enqueue(key string, o s3client.Object, who quarantine.Decision) bool {
	if f.q == nil || flinklayout.IsMetadata(key) {
		return false
	}
	o.Key = key
	if !f.q.Add(o, who) {
		return false
	}
	f.cache.Put(key, s3client.Object{Key: key}, false)
	return true
}

// settleTimeout bounds how long a create waits for the queued deletion of the same name.
const settleTimeout = 30 * time.Second

// settle applies a queued deletion of key now, before the mount creates an object of that name: the
// create is create-only (If-None-Match), and the queued delete must not meet the new object. EIO when it
// cannot be applied (the server keeps failing).
func (f *filesystem) settle(ctx context.Context, key string) syscall.Errno {
	if !f.hidden(key) {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	f.q.Flush(ctx, key)
	if f.hidden(key) {
		f.log.Warn("a create waits for the queued deletion of the same name, which keeps failing", "key", key)
		return syscall.EIO
	}
	return 0
}

// Recheck decides queued deletions again at apply time (deleteq.Rechecker), each on the version the first
// decision judged, under the enforcer's shared lock for as long as apply runs.
func (f *filesystem) Recheck(ctx context.Context, es []deleteq.Entry, apply func([]deleteq.Verdict)) {
	checks := make([]guard.Check, len(es))
	for i, e := range es {
		o := s3client.Object{Key: e.Key, Size: e.Size, ModTime: e.ModTime, ETag: e.ETag}
		checks[i] = guard.Check{Op: verdict.OpUnlink, Path: e.Key, Observed: f.observed(o.Key, o)}
	}
	f.g.Redecide(ctx, checks, func(ds []verdict.Decision) {
		vs := make([]deleteq.Verdict, len(ds))
		for i, d := range ds {
			switch {
			case d.Allow:
				vs[i] = deleteq.Apply
			case indexWide(d.Reason):
				vs[i] = deleteq.Later
			default:
				vs[i] = deleteq.Keep
				f.g.RecordKept(ctx, checks[i], d, fmt.Sprintf("the deletion of %s acknowledged at %s is not applied: %s; the object is kept",
					es[i].Key, es[i].Queued.UTC().Format(time.RFC3339), d.Message))
			}
		}
		apply(vs)
	})
}

// indexWide: refusals that say nothing about the object (the index cannot decide anything now); the
// deletion waits for the index rather than being dropped.
func indexWide(r verdict.Reason) bool {
	switch r {
	case verdict.ReasonIndexStale, verdict.ReasonSyncFailed, verdict.ReasonStoreError, verdict.ReasonUnparseable,
		verdict.ReasonUnmappedReferences, guard.ReasonIndexPending:
		return true
	}
	return false
}

// queueDone updates the mount's view when a queued deletion leaves the queue.
func (f *filesystem) queueDone(e deleteq.Entry, out deleteq.Outcome) {
	// A page listed ahead while the entry was hidden may show the object applied, or hide one kept.
	defer f.changed(e.Key)
	switch out {
	case deleteq.Applied:
		f.cache.Put(e.Key, s3client.Object{Key: e.Key}, false)
		f.g.Deleted(context.Background(), e.Key)
	case deleteq.Kept:
		f.unstage(e)
		f.cache.Drop(e.Key) // the object is shown again
	default:
		f.cache.Drop(e.Key) // the object (or its replacement) is shown again
	}
}

// closeQueue applies what it can within drainTimeout, then stops the queue; the rest stays in the journal.
func (f *filesystem) closeQueue() {
	if f.q == nil {
		return
	}
	f.qClose.Do(f.closeQueueOnce)
}

// closeQueueOnce: Unmount and Wait both clean up (the daemon calls both); the queue is closed once, and
// f.q stays set (a request still in flight reads it; a closed queue refuses Add, so unlink then deletes
// synchronously).
func (f *filesystem) closeQueueOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	if left := f.q.Flush(ctx, ""); left > 0 {
		f.log.Warn("unmounting with queued deletions not applied; the next mount applies them", "pending", left)
	}
	if err := f.q.Close(); err != nil {
		f.log.Warn("delete queue close", "err", err)
	}
}

// drainTimeout bounds how long an unmount applies the queue before it stops (the rest stays in the
// journal): well within a service manager's stop timeout.
const drainTimeout = 10 * time.Second

// QueueStats returns the delete queue's state (zero without a queue).
func (m *Mounted) QueueStats() deleteq.Stats {
	if m.fsys.q == nil {
		return deleteq.Stats{}
	}
	return m.fsys.q.Stats()
}

// ProbeBatchIfMatch checks that the server honours per-key ETags in DeleteObjects (AWS S3 does; versitygw
// v1.8.0 ignores them): a probe object deleted in a batch with a wrong ETag must be refused with
// PreconditionFailed, then deleted with its own. Only then are queued deletions sent in batches; otherwise
// they go as parallel conditional DeleteObject requests. An error means "not shown": the safe side.
func ProbeBatchIfMatch(ctx context.Context, c *s3client.Client) (bool, error) {
	key, etag, wrong, err := putProbe(ctx, c, "batch", "batch if-match probe")
	if err != nil {
		return false, err
	}
	defer func() { _ = c.Delete(context.WithoutCancel(ctx), key, "") }()
	errs, err := c.DeleteBatch(ctx, []s3client.DeleteItem{{Key: key, IfMatch: wrong}})
	if err != nil {
		return false, fmt.Errorf("batch if-match probe: %w", err)
	}
	if !errors.Is(errs[0], s3client.ErrPrecondition) {
		return false, nil // deleted despite the wrong ETag, or refused for another reason
	}
	errs, err = c.DeleteBatch(ctx, []s3client.DeleteItem{{Key: key, IfMatch: etag}})
	if err != nil || errs[0] != nil {
		return false, fmt.Errorf("batch if-match probe: delete of %s with its own ETag failed: %v %v", key, err, errs)
	}
	return true, nil
}

// FlushDeletes applies the queued deletions now and waits until each has left the queue or ctx ends; it
// returns how many are still pending.
func (m *Mounted) FlushDeletes(ctx context.Context) int {
	if m.fsys.q == nil {
		return 0
	}
	return m.fsys.q.Flush(ctx, "")
}
