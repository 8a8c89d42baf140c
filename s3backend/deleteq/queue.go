// Package deleteq is the S3 mount's queue of acknowledged deletions: an unlink the guard allowed returns at
// once, and the queue deletes the objects afterwards, many per round (DeleteObjects batches of up to 1,000
// keys where the server honours per-key ETag conditions, else parallel conditional DeleteObject requests).
//
// Invariants:
//   - An entry is in the journal (deletes.jsonl in the index directory, beside the index generations, so
//     `ckguard index rebuild` keeps it) before the unlink returns: a killed mount applies it after restart.
//   - An entry is deleted only after the guard decided it again, at apply time, under the guard's shared
//     lock, with the version it first judged (a `_metadata` indexed meanwhile refuses it: the object is
//     kept, the refusal audited).
//   - Every delete is conditional on the ETag the first decision judged; an entry older than VerifyAfter is
//     HEADed first and skipped when its Last-Modified changed (a same-content rewrite keeps its ETag).
//   - A failed deletion stays pending (and the name hidden), retried with backoff, counted and logged.
//   - The requests sent while the guard's lock is held (apply) are sent once (s3client.OneAttempt): the
//     retry is a later round, outside the lock, after the entry was decided again.
package deleteq

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// Deleter is the S3 side (s3client.Client).
type Deleter interface {
	Head(ctx context.Context, key string) (s3client.Object, error)
	Delete(ctx context.Context, key, ifMatch string) error
	DeleteBatch(ctx context.Context, items []s3client.DeleteItem) ([]error, error)
}

// Verdict is a decision taken again at apply time.
type Verdict int

const (
	// Apply: still allowed; delete.
	Apply Verdict = iota
	// Keep: refused for this object (referenced, pinned, protected): the object stays, the entry goes.
	Keep
	// Later: refused for the whole index (stale, sync failed, store error): asked again later.
	Later
)

// Rechecker decides entries again and runs apply with the verdicts while the decisions still hold (the
// guard's shared lock). It records the Keep refusals itself.
type Rechecker interface {
	Recheck(ctx context.Context, es []Entry, apply func([]Verdict))
}

// Outcome is how an entry left the queue.
type Outcome int

const (
	Applied Outcome = iota // deleted (or found gone)
	Kept                   // refused at apply time, or refused by the server for good: the object stays
	Skipped                // the object changed since the decision: nothing of ours was left to delete
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Kept:
		return "kept"
	}
	return "skipped"
}

// Options configure a Queue.
type Options struct {
	Dir     string // the index directory (the journal lives there)
	Deleter Deleter
	Recheck Rechecker
	// Batch: the server honours per-key ETags in DeleteObjects (ProbeBatchIfMatch): delete in batches.
	// Otherwise Parallel conditional DeleteObject requests at a time.
	Batch    bool
	Parallel int // default 32
	// Limit bounds pending entries (default 100,000): a full queue refuses Add, and the caller deletes
	// synchronously (backpressure without blocking).
	Limit int
	// Linger is how long a round waits for more entries before it starts (default 5 ms).
	Linger time.Duration
	// VerifyAfter: an entry queued longer ago than this is HEADed before it is deleted (default 60 s, the
	// mount's ETagTTL), so the delete never relies on an ETag older than a synchronous one may be.
	VerifyAfter time.Duration
	// MaxBackoff caps the wait before a failed entry is tried again (default 30 s).
	MaxBackoff time.Duration
	// Done is told every entry's outcome, outside the queue's lock.
	Done     func(Entry, Outcome)
	Logger   *slog.Logger
	Registry *prometheus.Registry // nil: no metrics
	Now      func() time.Time
}

// Stats is the queue's state.
type Stats struct {
	Pending   int
	Oldest    time.Time // queue time of the oldest pending entry (zero when none)
	Failures  int64     // failed attempts since start
	Applied   int64
	Kept      int64
	Skipped   int64
	Fallbacks int64 // deletions done synchronously because the queue was full or its journal failed
	Damaged   int   // journal lines that could not be read at start
}

type item struct {
	Entry
	inflight  bool
	notBefore time.Time
	done      chan struct{}
}

// Queue is the durable queue of one mount.
type Queue struct {
	o Options

	mu      sync.Mutex
	j       *journal
	byKey   map[string]*item
	fifo    []*item
	nextID  uint64
	urgent  map[string]bool // prefixes a caller waits for (Flush): no linger
	stats   Stats
	closed  bool
	wake    chan struct{}
	stopped chan struct{}
	cancel  context.CancelFunc

	lastSync time.Time // last fsync of the journal before a round (under mu)

	warnMu     sync.Mutex
	lastWarn   time.Time
	suppressed int // failures not logged since lastWarn
}

// Open replays the journal in o.Dir and starts applying what is pending.
func Open(o Options) (*Queue, error) {
	if o.Deleter == nil || o.Recheck == nil {
		return nil, errors.New("delete queue: no deleter or rechecker")
	}
	if o.Parallel <= 0 {
		o.Parallel = 32
	}
	if o.Limit <= 0 {
		o.Limit = 100_000
	}
	if o.Linger <= 0 {
		o.Linger = 5 * time.Millisecond
	}
	if o.VerifyAfter <= 0 {
		o.VerifyAfter = time.Minute
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	j, rp, err := openJournal(o.Dir)
	if err != nil {
		return nil, err
	}
	q := &Queue{o: o, j: j, byKey: map[string]*item{}, nextID: rp.NextID, urgent: map[string]bool{},
		wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	q.stats.Damaged = rp.Damaged
	if rp.Damaged > 0 {
		o.Logger.Error("delete queue journal has lines that cannot be read; the deletions they held are not applied (their objects stay)",
			"journal", j.f.Name(), "lines", rp.Damaged, "first", rp.FirstBad)
	}
	for _, e := range rp.Pending {
		if _, dup := q.byKey[e.Key]; dup {
			continue
		}
		it := &item{Entry: e, done: make(chan struct{})}
		q.byKey[e.Key] = it
		q.fifo = append(q.fifo, it)
	}
	if n := len(rp.Pending); n > 0 {
		o.Logger.Info("delete queue: deletions acknowledged before the last stop are applied now", "pending", n)
	}
	if o.Registry != nil {
		q.register(o.Registry)
	}
	ctx, cancel := context.WithCancel(context.Background())
	q.cancel = cancel
	go q.run(ctx)
	q.poke()
	return q, nil
}

func (q *Queue) register(r *prometheus.Registry) {
	s := func() Stats { return q.Stats() }
	r.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ckguard_delete_queue_length",
			Help: "Deletions acknowledged through the S3 mount and not applied to the bucket yet."},
			func() float64 { return float64(s().Pending) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ckguard_delete_queue_oldest_seconds",
			Help: "Age of the oldest pending deletion (0 when none)."},
			func() float64 {
				st := s()
				if st.Oldest.IsZero() {
					return 0
				}
				return q.o.Now().Sub(st.Oldest).Seconds()
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ckguard_delete_queue_failures_total",
			Help: "Failed attempts to apply a queued deletion (each is retried)."},
			func() float64 { return float64(s().Failures) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ckguard_delete_queue_kept_total",
			Help: "Queued deletions not applied because the guard or the server refused them at apply time (the object stays)."},
			func() float64 { return float64(s().Kept) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ckguard_delete_queue_applied_total",
			Help: "Queued deletions applied."},
			func() float64 { return float64(s().Applied) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ckguard_delete_queue_sync_fallbacks_total",
			Help: "Deletions done synchronously because the queue was full or its journal could not be written."},
			func() float64 { return float64(s().Fallbacks) }),
	)
}

// Add queues the deletion of o (the version the guard's decision judged), asked for by who, and returns
// once it is in the journal. false: not queued (queue full, journal failed, key not representable): the
// caller deletes synchronously.
func (q *Queue) Add(o s3client.Object, who quarantine.Decision) bool {
	if o.ETag == "" || o.IsDir || !utf8.ValidString(o.Key) {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || len(q.byKey) >= q.o.Limit {
		q.stats.Fallbacks++
		return false
	}
	if it := q.byKey[o.Key]; it != nil {
		// Hidden names cannot be unlinked twice; a second entry would hold another version. Not queued.
		q.stats.Fallbacks++
		return false
	}
	e := Entry{ID: q.nextID, Key: o.Key, ETag: o.ETag, Size: o.Size, ModTime: o.ModTime, Queued: q.o.Now(), Who: who}
	if err := q.j.append(record{Op: "q", ID: e.ID, Key: e.Key, ETag: e.ETag, Size: e.Size, ModTime: e.ModTime, At: e.Queued, Who: e.Who}); err != nil {
		q.o.Logger.Error("delete queue: cannot write the journal; deleting synchronously", "key", o.Key, "err", err)
		q.stats.Fallbacks++
		return false
	}
	q.nextID++
	it := &item{Entry: e, done: make(chan struct{})}
	q.byKey[e.Key] = it
	q.fifo = append(q.fifo, it)
	q.poke()
	return true
}

// Pending reports whether a deletion of key is acknowledged and not applied yet: the mount shows the
// name as gone.
func (q *Queue) Pending(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.byKey[key] != nil
}

// AnyPending reports whether anything is queued (a cheap test before per-name lookups).
func (q *Queue) AnyPending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.byKey) > 0
}

// Stats returns the queue's state.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.stats
	s.Pending = len(q.byKey)
	for _, it := range q.fifo {
		if q.byKey[it.Key] == it {
			s.Oldest = it.Queued
			break
		}
	}
	return s
}

// Flush applies now, without lingering, every entry whose key is key or lies below key+"/" (key ""
// means all), and waits until each has left the queue or ctx ends. Entries still pending then (failing)
// stay queued; the result says how many.
func (q *Queue) Flush(ctx context.Context, key string) int {
	q.mu.Lock()
	var waits []chan struct{}
	for k, it := range q.byKey {
		if under(k, key) {
			waits = append(waits, it.done)
			it.notBefore = time.Time{}
		}
	}
	if len(waits) > 0 {
		q.urgent[key] = true
	}
	q.mu.Unlock()
	if len(waits) == 0 {
		return 0
	}
	q.poke()
	left := 0
	for i, w := range waits {
		select {
		case <-w:
		case <-ctx.Done():
			left = len(waits) - i
		}
		if left > 0 {
			break
		}
	}
	q.mu.Lock()
	delete(q.urgent, key)
	q.mu.Unlock()
	return left
}

func under(k, prefix string) bool {
	return prefix == "" || k == prefix || (len(k) > len(prefix) && k[len(prefix)] == '/' && k[:len(prefix)] == prefix)
}

// Close stops applying (a round in flight finishes) and closes the journal; pending entries stay in it
// for the next Open.
func (q *Queue) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.mu.Unlock()
	// A round in flight is cut short: an entry whose request was cancelled stays pending (a request the
	// server applied but whose answer was lost is replayed by the next Open: deleting a missing key is a
	// no-op).
	q.cancel()
	q.poke()
	<-q.stopped
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.j.close()
}

func (q *Queue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// ready takes up to n entries due now, marking them in flight, and says when the next one is due.
func (q *Queue) ready(n int, now time.Time) (out []*item, next time.Time) {
	live := q.fifo[:0]
	for _, it := range q.fifo {
		if q.byKey[it.Key] != it {
			continue // left the queue
		}
		live = append(live, it)
		if it.inflight {
			continue
		}
		if it.notBefore.After(now) {
			if next.IsZero() || it.notBefore.Before(next) {
				next = it.notBefore
			}
			continue
		}
		if len(out) < n {
			it.inflight = true
			out = append(out, it)
		}
	}
	clear(q.fifo[len(live):])
	q.fifo = live
	return out, next
}

func (q *Queue) roundSize() int {
	if q.o.Batch {
		return s3client.MaxBatch
	}
	return q.o.Parallel * 4
}

func (q *Queue) run(ctx context.Context) {
	defer close(q.stopped)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return
		}
		urgent := len(q.urgent) > 0
		due := len(q.byKey)
		q.mu.Unlock()
		if due > 0 && due < q.roundSize() && !urgent {
			time.Sleep(q.o.Linger) // gather a fuller round from an rm -rf in progress
		}
		q.mu.Lock()
		its, next := q.ready(q.roundSize(), q.o.Now())
		q.mu.Unlock()
		if len(its) > 0 {
			q.round(ctx, its)
			continue
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Millisecond, next.Sub(q.o.Now()))
		}
		timer.Reset(wait)
		select {
		case <-q.wake:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// result of one entry in a round: an outcome, or err (a failed attempt, retried).
type result struct {
	out Outcome
	err error
	set bool
}

func (q *Queue) round(ctx context.Context, its []*item) {
	// The journal's records reach the disk (at most syncEvery late): after a power loss of the host an
	// applied deletion may be replayed (a no-op), or one acknowledged in the last moments lost (its
	// object shows again; nothing is deleted that was not decided).
	// Outside the lock: an fsync can take long on a busy disk, and unlinks append meanwhile. A journal
	// replaced meanwhile (compaction) was fsynced by its rewrite.
	// At most one fsync per syncEvery: at 0 ms latency rounds follow each other with a few entries each,
	// and a flush per round would make the disk, not S3, the bound.
	q.mu.Lock()
	f := q.j.f
	due := time.Since(q.lastSync) >= syncEvery
	if due {
		q.lastSync = time.Now()
	}
	q.mu.Unlock()
	if due {
		if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
			q.o.Logger.Warn("delete queue: journal fsync failed (entries survive a crash of the mount, not of the host)", "err", err)
		}
	}
	res := make([]result, len(its))
	// Old entries: their ETag is older than a synchronous unlink may use; a HEAD shows whether the object
	// is still the version decided on (same ETag and Last-Modified).
	now := q.o.Now()
	q.parallel(len(its), func(i int) {
		it := its[i]
		if now.Sub(it.Queued) < q.o.VerifyAfter {
			return
		}
		o, err := q.o.Deleter.Head(ctx, it.Key)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			res[i] = result{out: Applied, set: true} // gone already (deleted beside the mount, or by an earlier run)
		case err != nil:
			res[i] = result{err: err, set: true}
		case o.ETag != it.ETag || (!it.ModTime.IsZero() && !o.ModTime.Equal(it.ModTime)):
			res[i] = result{out: Skipped, set: true}
		}
	})
	var ask []Entry
	var askIdx []int
	for i, it := range its {
		if !res[i].set {
			ask = append(ask, it.Entry)
			askIdx = append(askIdx, i)
		}
	}
	if len(ask) > 0 {
		called := false
		q.o.Recheck.Recheck(ctx, ask, func(vs []Verdict) {
			called = true
			var del []int
			for k, v := range vs {
				i := askIdx[k]
				switch v {
				case Apply:
					del = append(del, i)
				case Keep:
					res[i] = result{out: Kept, set: true}
				default:
					res[i] = result{err: errors.New("the index cannot decide now (stale, sync failed or store error); asked again later"), set: true}
				}
			}
			// Under the guard's lock: each request is sent once (a failure is retried by a later
			// round, decided again first), so a failing server costs the lock one request, never a
			// retry loop.
			q.delete(s3client.OneAttempt(ctx), its, del, res)
		})
		if !called {
			for _, i := range askIdx {
				res[i] = result{err: errors.New("the guard did not decide the deletion again"), set: true}
			}
		}
	}
	q.finish(its, res)
}

// delete sends the deletes of its[idx] and fills res.
func (q *Queue) delete(ctx context.Context, its []*item, idx []int, res []result) {
	if len(idx) == 0 {
		return
	}
	if q.o.Batch {
		items := make([]s3client.DeleteItem, len(idx))
		for k, i := range idx {
			items[k] = s3client.DeleteItem{Key: its[i].Key, IfMatch: its[i].ETag}
		}
		errs, err := q.o.Deleter.DeleteBatch(ctx, items)
		for k, i := range idx {
			if err != nil {
				res[i] = classify(err)
			} else {
				res[i] = classify(errs[k])
			}
		}
		return
	}
	q.parallel(len(idx), func(k int) {
		i := idx[k]
		ictx := ctx
		if its[i].Who.Op != "" {
			ictx = quarantine.WithDecision(ctx, its[i].Who) // a staging deleter records who asked
		}
		res[i] = classify(q.o.Deleter.Delete(ictx, its[i].Key, its[i].ETag))
	})
}

func classify(err error) result {
	switch {
	case err == nil, errors.Is(err, fs.ErrNotExist):
		return result{out: Applied, set: true}
	case errors.Is(err, s3client.ErrPrecondition):
		return result{out: Skipped, set: true}
	case errors.Is(err, fs.ErrPermission), errors.Is(err, s3client.ErrNotImplemented):
		return result{out: Kept, err: err, set: true}
	}
	return result{err: err, set: true}
}

func (q *Queue) parallel(n int, fn func(int)) {
	if n == 0 {
		return
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < min(n, q.o.Parallel); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

// finish records each entry's result: outcomes leave the queue, failures are retried after a backoff.
func (q *Queue) finish(its []*item, res []result) {
	type done struct {
		e    Entry
		out  Outcome
		left chan struct{} // closed once the entry's outcome is final and Done has seen it
	}
	var dones []done
	var failed int
	var firstErr error
	q.mu.Lock()
	now := q.o.Now()
	for i, it := range its {
		r := res[i]
		it.inflight = false
		if r.err != nil && !(r.out == Kept && r.set && isPermanent(r.err)) {
			it.Attempts++
			it.LastErr = r.err.Error()
			q.stats.Failures++
			failed++
			if firstErr == nil {
				firstErr = r.err
			}
			_ = q.j.append(record{Op: "f", ID: it.ID, Err: it.LastErr})
			back := min(q.o.MaxBackoff, 200*time.Millisecond<<min(it.Attempts, 10))
			it.notBefore = now.Add(back/2 + rand.N(back/2+1))
			continue
		}
		op := map[Outcome]string{Applied: "a", Kept: "k", Skipped: "s"}[r.out]
		rec := record{Op: op, ID: it.ID}
		if r.err != nil {
			rec.Err = r.err.Error()
			q.o.Logger.Error("delete queue: the server refuses to delete an object whose deletion was acknowledged; it is kept",
				"key", it.Key, "err", r.err)
		}
		if err := q.j.append(rec); err != nil {
			q.o.Logger.Warn("delete queue: cannot record an outcome; the entry is replayed after a restart (harmless)", "key", it.Key, "err", err)
		}
		switch r.out {
		case Applied:
			q.stats.Applied++
		case Kept:
			q.stats.Kept++
		case Skipped:
			q.stats.Skipped++
		}
		delete(q.byKey, it.Key)
		dones = append(dones, done{it.Entry, r.out, it.done})
	}
	if len(q.byKey) == 0 && !q.closed {
		// Nothing pending: the journal starts over (a truncate, cheap enough for every time the queue
		// drains; a host crash that brings the old content back replays deletions already applied, which
		// are no-ops or skipped as replaced).
		if err := q.j.truncate(); err != nil {
			q.o.Logger.Warn("delete queue: cannot truncate the journal", "err", err)
		}
	} else if q.j.size > 64<<20 {
		q.compactLocked()
	}
	q.mu.Unlock()
	if failed > 0 {
		q.warnFailed(failed, firstErr)
	}
	// A Flush waiter wakes only after Done ran for its entries, so what it looks at next (the mount's
	// view of the name) already reflects the outcome.
	for _, d := range dones {
		if q.o.Done != nil {
			q.o.Done(d.e, d.out)
		}
		close(d.left)
	}
}

func isPermanent(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, s3client.ErrNotImplemented)
}

func (q *Queue) compactLocked() {
	var pend []Entry
	for _, it := range q.fifo {
		if q.byKey[it.Key] == it {
			pend = append(pend, it.Entry)
		}
	}
	if err := q.j.rewrite(pend); err != nil {
		q.o.Logger.Warn("delete queue: cannot compact the journal", "err", err)
	}
}

// String describes the queue for logs.
func (s Stats) String() string {
	return fmt.Sprintf("%d pending, %d applied, %d kept, %d skipped, %d failed attempts", s.Pending, s.Applied, s.Kept, s.Skipped, s.Failures)
}

// warnFailed logs failed deletions, at most once every warnEvery (a server that is down fails every
// round; the log says so without flooding).
func (q *Queue) warnFailed(failed int, firstErr error) {
	q.warnMu.Lock()
	now := time.Now()
	if now.Sub(q.lastWarn) < warnEvery {
		q.suppressed += failed
		q.warnMu.Unlock()
		return
	}
	n := failed + q.suppressed
	q.lastWarn, q.suppressed = now, 0
	q.warnMu.Unlock()
	q.o.Logger.Warn("delete queue: deletions failed; they stay pending (their names hidden in the mount) and are retried",
		"failed_attempts", n, "since", warnEvery, "pending", q.Stats().Pending, "last_err", firstErr)
}

const warnEvery = 5 * time.Second

// syncEvery bounds how often a round fsyncs the journal: what a power loss of the host can take back.
const syncEvery = 100 * time.Millisecond
