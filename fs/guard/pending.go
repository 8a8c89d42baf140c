package guard

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ckguard/ckguard/refindex/verdict"
)

// pendingUpdates is the set of index updates that run outside the enforcer's lock (reading, parsing and
// applying a _metadata can take seconds for a large one). Invariant: an update is added while the
// enforcer's lock is held exclusively, so every decision either finished before it was added or sees it;
// it is removed only after the index has applied it, so a decision that does not see it reads the index
// with the update in.
type pendingUpdates struct {
	n    atomic.Int64 // the number of updates in keys, for a lock-free any()
	mu   sync.Mutex
	keys map[string]int
	idle chan struct{} // closed (and cleared) when the last pending update is done; made by wait
}

// add registers an update of key. The caller holds Enforcer.mu exclusively.
func (p *pendingUpdates) add(key string) {
	p.mu.Lock()
	if p.keys == nil {
		p.keys = map[string]int{}
	}
	p.keys[key]++
	p.n.Add(1)
	p.mu.Unlock()
}

// done removes an update of key added before, once the index has applied it (or failed to).
func (p *pendingUpdates) done(key string) {
	p.mu.Lock()
	if p.keys[key]--; p.keys[key] <= 0 {
		delete(p.keys, key)
	}
	p.n.Add(-1)
	if p.n.Load() == 0 && p.idle != nil {
		close(p.idle)
		p.idle = nil
	}
	p.mu.Unlock()
}

// defaultPendingWait bounds how long a decision waits for pending index updates before it is taken (and, if
// one is still pending then, refused): a _metadata of normal size is indexed in milliseconds, and the
// caller that wrote it (Flink's commit, then its subsumption) expects its next change to be decided
// against the index with that _metadata in, not refused.
const defaultPendingWait = 10 * time.Second

// wait returns once no update is pending, after max, or when ctx ends. It holds no lock while it waits
// (the enforcer's lock is taken after it returns), so it blocks nothing but its caller.
func (p *pendingUpdates) wait(ctx context.Context, max time.Duration) {
	if max <= 0 || !p.any() {
		return
	}
	p.mu.Lock()
	if p.n.Load() == 0 {
		p.mu.Unlock()
		return
	}
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	idle := p.idle
	p.mu.Unlock()
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	case <-ctx.Done():
	}
}

// any reports whether an update is pending; cheap (one atomic load), for every decision.
func (p *pendingUpdates) any() bool { return p.n.Load() > 0 }

// refusal is the decision for a change the index would allow, made while updates are pending.
func (p *pendingUpdates) refusal(op verdict.Op, path string) verdict.Decision {
	p.mu.Lock()
	keys := make([]string, 0, len(p.keys))
	for k := range p.keys {
		keys = append(keys, "/"+k)
	}
	p.mu.Unlock()
	sort.Strings(keys)
	return indexPendingRefusal(op, path, keys)
}

// indexUpdate is an index notification that may read and parse _metadata (Written of a _metadata, a hard link's,
// Renamed): it runs outside the enforcer's lock while key is registered as pending.
type indexUpdate struct {
	kind, path, to string
	key            string // the pending entry
	ctx            context.Context
	run            func(context.Context) error
	undo           func() // run when run fails, before the update stops being pending
}

// start registers u as pending. The caller holds e.mu exclusively.
func (e *Enforcer) start(u *indexUpdate) { e.pending.add(u.key) }

// finish runs u (already started) without the enforcer's lock, then removes it from the pending set. The
// change it records already happened: an interrupted caller must not abort recording it.
func (e *Enforcer) finish(u *indexUpdate) syscall.Errno {
	defer e.pending.done(u.key)
	if err := u.run(context.WithoutCancel(u.ctx)); err != nil {
		e.notifyFailed(u.ctx, u.kind, u.path, u.to, err)
		if u.undo != nil {
			u.undo()
		}
		return syscall.EIO
	}
	return 0
}

// update records u. Renamed and linked are called from the do function of MutateExclusive, which holds
// the lock (inExclusive): u is started at once and finished by MutateExclusive after it releases the lock.
// Written is called with no lock held: it takes the lock to start u and finishes it before returning.
func (e *Enforcer) update(u *indexUpdate, fromDo bool) syscall.Errno {
	if fromDo && e.inExclusive.Load() {
		e.start(u)
		e.deferred = append(e.deferred, u)
		return 0
	}
	e.mu.Lock()
	e.start(u)
	e.mu.Unlock()
	return e.finish(u)
}

// RestoreMetadata puts the _metadata p back into the store with put (a quarantine restore: a rename
// on a local store, a copy on S3) without holding the enforcer's lock while put runs, so a slow put
// blocks no decision: the index update is pending from before put starts (taken under the lock, so
// every decision after it sees it: what the index would allow is refused meanwhile, index-pending), and
// once put succeeded p is indexed before RestoreMetadata returns. If it cannot be, undo (when set) takes
// p away again while the update is still pending, and the error wraps ErrNotRecorded. put's error is
// returned as is, with nothing recorded. A file other than a _metadata needs none of this: its reappearance changes no
// decision.
func (e *Enforcer) RestoreMetadata(ctx context.Context, p string, put func() error, undo func()) error {
	u := &indexUpdate{kind: "restored", path: p, key: p, ctx: ctx, undo: undo,
		run: func(ctx context.Context) error { return e.checker.Written(ctx, p) }}
	e.mu.Lock()
	e.start(u)
	e.mu.Unlock()
	if err := put(); err != nil {
		e.pending.done(u.key)
		return err
	}
	if errno := e.finish(u); errno != 0 {
		return fmt.Errorf("%s: %w (%v)", p, ErrNotRecorded, errno)
	}
	return nil
}

// ErrNotRecorded: the index could not record a change made through the mount (see the log).
var ErrNotRecorded = errors.New("the index could not record the change")
