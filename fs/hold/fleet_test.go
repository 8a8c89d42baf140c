package hold

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/store/shared/sharedtest"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// testFleet is shared.Holds with a lease the test hands out.
type testFleet struct {
	*shared.Holds
	lease *atomic.Bool
}

func (f testFleet) MayRelease(context.Context) bool { return f.lease.Load() }
func (f testFleet) StillMayRelease() bool           { return f.lease.Load() }

// TestFleetHolds: two mounts of one store (two engines, one shared area, one storage) hold what each
// protects. The lease holder never releases what the other still needs; the other never releases
// anything (it has no lease), even what it alone needed; once neither needs a hold, the lease holder
// releases it at its next pass, whichever mount let go last.
func TestFleetHolds(t *testing.T) {
	area := sharedtest.NewMem()
	prim := &flagPrim{held: map[string]bool{}} // one store: both mounts' holds are the same flags
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	type mount struct {
		e     *Engine
		ix    *setIndex
		lease *atomic.Bool
	}
	newMount := func(id string, lease bool) mount {
		l, err := OpenLedger(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		m := mount{ix: &setIndex{prot: map[string]bool{}}, lease: &atomic.Bool{}}
		m.lease.Store(lease)
		m.e = New(Options{Primitive: prim, Index: m.ix, Ledger: l, Logger: quiet, StatusDir: t.TempDir(),
			Fleet: testFleet{shared.NewHolds(area, id), m.lease}})
		t.Cleanup(func() { m.e.Close() })
		return m
	}
	a, b := newMount("host-a", false), newMount("host-b", true) // b holds the sweeper lease
	ctx := context.Background()
	pass := func(ms ...mount) {
		t.Helper()
		for _, m := range ms {
			if err := m.e.Pass(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	const k, only = "j/shared/k", "j/shared/only-a"
	a.ix.prot = map[string]bool{k: true, only: true}
	b.ix.prot = map[string]bool{k: true}
	pass(a, b)
	if !prim.on(k) || !prim.on(only) {
		t.Fatalf("held %v, want both keys", prim.held)
	}
	// b (the lease holder) lets k go; a still needs it.
	b.ix.prot = map[string]bool{}
	pass(b, a, b)
	if !prim.on(k) {
		t.Fatal("the lease holder released a hold the other mount still needs")
	}
	// a lets both go: a has no lease, so nothing is released by a.
	a.ix.prot = map[string]bool{}
	pass(a)
	if !prim.on(k) || !prim.on(only) {
		t.Fatalf("the mount without the lease released holds: %v", prim.held)
	}
	if s := a.e.Status(); s.Releasing != 2 {
		t.Errorf("a's status %+v, want 2 releasing (waiting for the lease holder)", s)
	}
	// b's next pass releases both orphans (even only-a, which b never held).
	pass(b)
	if prim.on(k) || prim.on(only) {
		t.Fatalf("after the lease holder's pass: held %v, want nothing", prim.held)
	}
	pass(a)
	if s := a.e.Status(); s.Releasing != 0 || s.Held != 0 {
		t.Errorf("a's status after the release %+v, want nothing held or releasing", s)
	}
	// A need recorded while the lease holder releases is honoured: the key is held again.
	a.ix.prot = map[string]bool{k: true}
	b.ix.prot = map[string]bool{k: true}
	pass(a, b)
	b.ix.prot = map[string]bool{}
	a.ix.prot = map[string]bool{}
	pass(a) // a lets go first
	hb := shared.NewHolds(area, "host-a")
	_, rec, err := hb.Drop(ctx, k, false)
	if err != nil || len(rec.Needers) != 1 {
		t.Fatalf("needers after a let go: %v, %v", rec.Needers, err)
	}
	// Between b's claim and its release, a needs k again: b must hold it again.
	wrapped := &needDuring{Fleet: b.e.o.Fleet, during: func() {
		if err := hb.Need(ctx, k, ""); err != nil {
			t.Error(err)
		}
	}}
	b.e.SetFleet(wrapped)
	pass(b)
	if !prim.on(k) {
		t.Fatal("a need recorded during the release was lost: the key is not held")
	}
}

// needDuring runs during once, when the engine records a release.
type needDuring struct {
	Fleet
	during func()
	done   bool
}

func (n *needDuring) Released(ctx context.Context, key string) (bool, error) {
	if !n.done {
		n.done = true
		n.during()
	}
	return n.Fleet.Released(ctx, key)
}

// TestFleetLiftedDropsNeed: a key the mount lifted for its own change (BeforeChange) and no longer
// protects loses this mount's need in the fleet's record at the next pass, so a later object at the
// key is not kept held for good by a stale need.
func TestFleetLiftedDropsNeed(t *testing.T) {
	area := sharedtest.NewMem()
	prim := &flagPrim{held: map[string]bool{}}
	l, err := OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ix := &setIndex{prot: map[string]bool{"j/f": true}}
	lease := &atomic.Bool{}
	holds := shared.NewHolds(area, "host-a")
	e := New(Options{Primitive: prim, Index: ix, Ledger: l, Lifted: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Fleet: testFleet{holds, lease}})
	defer e.Close()
	ctx := context.Background()
	if err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := holds.Get(ctx, "j/f"); len(r.Needers) != 1 {
		t.Fatalf("needers after the hold: %v", r.Needers)
	}
	e.BeforeChange(verdict.OpUnlink, "j/f") // the mount deletes it, as its guard allowed
	ix.mu.Lock()
	ix.prot = map[string]bool{}
	ix.mu.Unlock()
	if err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := holds.Get(ctx, "j/f"); len(r.Needers) != 0 {
		t.Errorf("needers after the mount's own change and a pass: %v, want none", r.Needers)
	}
}
