package deleteq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/s3backend/deleteq"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// guarded is a rechecker over a model's protected set, with the guard's locking: Recheck and the deletes
// it allows run under the shared lock; protecting a key (a _metadata indexed) takes it exclusively.
type guarded struct {
	lock      sync.RWMutex
	mu        sync.Mutex
	protected map[string]bool
}

func (g *guarded) Recheck(_ context.Context, es []deleteq.Entry, apply func([]deleteq.Verdict)) {
	g.lock.RLock()
	defer g.lock.RUnlock()
	vs := make([]deleteq.Verdict, len(es))
	g.mu.Lock()
	for i, e := range es {
		if g.protected[e.Key] {
			vs[i] = deleteq.Keep
		}
	}
	g.mu.Unlock()
	apply(vs)
}

func (g *guarded) protect(k string) {
	g.lock.Lock()
	defer g.lock.Unlock()
	g.mu.Lock()
	g.protected[k] = true
	g.mu.Unlock()
}

func (g *guarded) isProtected(k string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.protected[k]
}

// watched is the bucket of the model: every delete it performs is checked against the guard at that
// moment (a protected key deleted is a violation) and against the versions acknowledged.
type watched struct {
	*bucket
	g          *guarded
	mu         sync.Mutex
	acked      map[string]string // key -> ETag of an acknowledged version
	violations []string
}

func (w *watched) check(key, ifMatch string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.g.isProtected(key) {
		w.violations = append(w.violations, "deleted protected "+key)
	}
	if w.acked[key] != ifMatch {
		w.violations = append(w.violations, fmt.Sprintf("deleted %s conditional on %q, acknowledged %q", key, ifMatch, w.acked[key]))
	}
}

func (w *watched) Delete(ctx context.Context, key, ifMatch string) error {
	if w.has(key) && obj(w.bucket, key).ETag == ifMatch {
		w.check(key, ifMatch)
	}
	return w.bucket.Delete(ctx, key, ifMatch)
}

func (w *watched) DeleteBatch(ctx context.Context, items []s3client.DeleteItem) ([]error, error) {
	for _, it := range items {
		if w.has(it.Key) && obj(w.bucket, it.Key).ETag == it.IfMatch {
			w.check(it.Key, it.IfMatch)
		}
	}
	return w.bucket.DeleteBatch(ctx, items)
}

// TestQueueModel: random unlinks (acknowledged into the queue), checkpoints appearing that reference
// queued keys, objects replaced beside the mount, 503s, restarts of the queue from its journal, and
// rounds applied asynchronously in between. Whatever the interleaving: nothing protected at the moment
// its deletion is applied is deleted, no delete removes a version other than the one acknowledged, a
// queued name stays pending until it leaves the queue, a restart keeps every pending entry, and after
// a final flush every acknowledged, unprotected, unreplaced object is gone.
func TestQueueModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir := t.TempDir()
		var keys []string
		for i := range 12 {
			keys = append(keys, fmt.Sprintf("j/shared/k%02d", i))
		}
		b := newBucket(keys...)
		g := &guarded{protected: map[string]bool{}}
		w := &watched{bucket: b, g: g, acked: map[string]string{}}
		batch := rapid.Bool().Draw(rt, "batch")
		openQ := func() *deleteq.Queue {
			q, err := deleteq.Open(deleteq.Options{Dir: dir, Deleter: w, Recheck: g, Batch: batch, Logger: quiet,
				MaxBackoff: time.Millisecond, VerifyAfter: time.Hour})
			if err != nil {
				rt.Fatal(err)
			}
			return q
		}
		q := openQ()
		defer func() { q.Close() }()
		acked := map[string]bool{} // acknowledged and not known to have left the queue
		replaced := map[string]bool{}
		for step := range rapid.IntRange(1, 40).Draw(rt, "steps") {
			k := rapid.SampledFrom(keys).Draw(rt, fmt.Sprintf("key%d", step))
			switch rapid.IntRange(0, 5).Draw(rt, fmt.Sprintf("op%d", step)) {
			case 0, 1: // unlink through the mount: allowed now, acknowledged
				if !b.has(k) || q.Pending(k) || g.isProtected(k) {
					continue
				}
				o := obj(b, k)
				w.mu.Lock()
				w.acked[k] = o.ETag
				w.mu.Unlock()
				if !q.Add(o, quarantine.Decision{}) {
					rt.Fatalf("Add %s refused", k)
				}
				acked[k] = true
			case 2: // a checkpoint referencing k is indexed
				g.protect(k)
			case 3: // replaced beside the mount
				b.mu.Lock()
				if o, ok := b.objs[k]; ok {
					o.ETag += "'"
					b.objs[k] = o
					replaced[k] = true
				}
				b.mu.Unlock()
			case 4: // a storm of 503s for k
				b.mu.Lock()
				b.fail[k] += 3
				b.mu.Unlock()
			case 5: // the mount restarts
				before := map[string]bool{}
				for _, k := range keys {
					before[k] = q.Pending(k)
				}
				q.Close()
				for _, k := range keys {
					if !before[k] && q.Pending(k) {
						rt.Fatalf("%s pending after close, not before", k)
					}
				}
				pendingAtClose := map[string]bool{}
				for _, k := range keys {
					pendingAtClose[k] = q.Pending(k)
				}
				q = openQ()
				for _, k := range keys {
					if pendingAtClose[k] != q.Pending(k) {
						rt.Fatalf("%s: pending %v at close, %v after reopen", k, pendingAtClose[k], q.Pending(k))
					}
				}
			}
		}
		if left := q.Flush(context.Background(), ""); left != 0 {
			rt.Fatalf("%d pending after the final flush", left)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.violations) > 0 {
			rt.Fatalf("violations: %v", w.violations)
		}
		for k := range acked {
			if q.Pending(k) {
				rt.Fatalf("%s still pending", k)
			}
			if b.has(k) && !g.isProtected(k) && !replaced[k] {
				rt.Fatalf("%s acknowledged, never protected nor replaced, still in the bucket", k)
			}
		}
	})
}
