package refindex_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// presentStore is a local store of `_metadata` files only whose Stat finds every other key: a store
// of many referenced objects without writing them (unit tests and benchmarks of the loss check).
type presentStore struct{ store.Store }

func (s presentStore) Stat(ctx context.Context, p string) (store.ObjectInfo, error) {
	oi, err := s.Store.Stat(ctx, p)
	if errors.Is(err, fs.ErrNotExist) && filepath.Base(p) != "_metadata" {
		return store.ObjectInfo{Path: p, Size: 1, ModTime: time.Now().Add(-48 * time.Hour)}, nil
	}
	return oi, err
}

// lossIndex indexes a generated store of one job whose checkpoints each reference refs objects, new
// of them not referenced by the previous one: about ckpts × new distinct referenced objects.
func lossIndex(tb testing.TB, dir string, ckpts, refs, fresh int) (*refindex.Index, *treegen.LargeResult) {
	tb.Helper()
	root := filepath.Join(dir, "store")
	lr, err := treegen.Large(root, treegen.LargeSpec{Jobs: 1, CheckpointsPerJob: ckpts, RefsPerCheckpoint: refs, NewPerCheckpoint: fresh, Seed: "lossmem"}, time.Now().Add(-48*time.Hour))
	if err != nil {
		tb.Fatal(err)
	}
	ls, err := localstore.New(root)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := pathnorm.ParseMapping("file:" + root + "=")
	if err != nil {
		tb.Fatal(err)
	}
	ix, err := refindex.Open(filepath.Join(dir, "index"), presentStore{ls}, refindex.DefaultPolicy(), refindex.WithLogger(quiet), refindex.WithPathMap([]pathnorm.Mapping{m}, ""))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ix.Close() })
	if err := ix.Sync(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return ix, lr
}

// passAlloc returns the bytes and objects one pass of lc allocates.
func passAlloc(tb testing.TB, lc *refindex.LossChecker) (bytes, objects uint64, rep *refindex.LossReport) {
	tb.Helper()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	rep, err := lc.Check(context.Background())
	runtime.ReadMemStats(&m1)
	if err != nil {
		tb.Fatal(err)
	}
	return m1.TotalAlloc - m0.TotalAlloc, m1.Mallocs - m0.Mallocs, rep
}

// TestLossCheckPassMemoryFlat: under a budget, a pass allocates for what it checks (its budget's
// worth of objects), not for every referenced object of the store: a pass in the middle of a rotation
// over ten times the objects allocates about the same.
func TestLossCheckPassMemoryFlat(t *testing.T) {
	const budget = 50
	var bytes [2]uint64
	for i, ckpts := range []int{4, 40} {
		ix, lr := lossIndex(t, t.TempDir(), ckpts, 500, 500)
		lc := ix.NewLossChecker(refindex.LossCheckOptions{Budget: budget, Parallel: 1})
		if _, err := lc.Check(context.Background()); err != nil { // begins the rotation
			t.Fatal(err)
		}
		b, n, rep := passAlloc(t, lc)
		t.Logf("%d referenced objects: a pass of %d requests allocated %d kB in %d objects", lr.Distinct, rep.Requests, b>>10, n)
		if rep.Complete || rep.Checked != budget || rep.Objects != lr.Distinct || len(rep.Missing) != 0 {
			t.Fatalf("pass in the middle of a rotation: %+v; want %d checked of %d, not complete", rep, budget, lr.Distinct)
		}
		bytes[i] = b
	}
	if bytes[1] > 3*bytes[0] {
		t.Fatalf("a pass allocated %d kB at 10× the objects against %d kB: it grows with the store", bytes[1]>>10, bytes[0]>>10)
	}
}

// TestLossCheckPassHeldKeys: the referenced keys a pass holds at once are bounded by its budget, or,
// for a pass that checks everything (no budget, no chunks: an unpaced local store), by two segments:
// it plans a stretch of the reverse table while the previous one's requests are under way, then
// forgets that one.
func TestLossCheckPassHeldKeys(t *testing.T) {
	ix, lr := lossIndex(t, t.TempDir(), 10, 500, 500)
	for _, tc := range []struct {
		name          string
		budget, seg   int
		complete      bool
		checked, held int
	}{
		{"budget", 50, 0, false, 50, 50},
		{"segments", 0, 100, true, lr.Distinct, 200},
		{"budget and segments", 250, 100, false, 250, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lc := ix.NewLossChecker(refindex.LossCheckOptions{Budget: tc.budget})
			if tc.seg > 0 {
				refindex.SetLossSegment(lc, tc.seg)
			}
			for pass := range 3 {
				rep, err := lc.Check(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				held := refindex.LossMaxHeld(lc)
				if rep.Complete != tc.complete || rep.Checked != tc.checked || held > tc.held || len(rep.Missing) != 0 {
					t.Fatalf("pass %d over %d objects: complete %v, %d checked, %d keys held at once; want %v, %d, at most %d", pass+1, lr.Distinct, rep.Complete, rep.Checked, held, tc.complete, tc.checked, tc.held)
				}
			}
		})
	}
}

// TestLossCheckRotationCarried: the first rotation's first pass counts the whole rotation; once a
// rotation has ended, the next reports it (objects, requests, passes as its passes took them) and no
// pass reads the whole table only to count, and the rotation still takes the passes it says.
func TestLossCheckRotationCarried(t *testing.T) {
	ix, lr := lossIndex(t, t.TempDir(), 4, 500, 500)
	lc := ix.NewLossChecker(refindex.LossCheckOptions{Budget: 300})
	want := (lr.Distinct + 299) / 300
	for rotation := range 3 {
		passes := 0
		for rep := (*refindex.LossReport)(nil); rep == nil || !rep.Complete; passes++ {
			var err error
			if rep, err = lc.Check(context.Background()); err != nil {
				t.Fatal(err)
			}
			counted := refindex.LossCounted(lc)
			if wantCounted := map[bool]int{true: lr.Distinct}[rotation == 0 && passes == 0]; counted != wantCounted {
				t.Fatalf("rotation %d pass %d counted %d keys, want %d", rotation+1, passes+1, counted, wantCounted)
			}
			if rep.RoundPasses != want || rep.RoundRequests != lr.Distinct || rep.Objects != lr.Distinct {
				t.Fatalf("rotation %d pass %d: %d round passes, %d round requests, %d objects; want %d, %d, %d", rotation+1, passes+1, rep.RoundPasses, rep.RoundRequests, rep.Objects, want, lr.Distinct, lr.Distinct)
			}
		}
		if passes != want {
			t.Fatalf("rotation %d took %d passes, want %d", rotation+1, passes, want)
		}
	}
}

// BenchmarkLossCheckPass measures one loss-check pass under the S3 default budget (2,000 requests)
// over stores of 100 k and 1 M referenced objects (4 references per object), stats only: "rotating"
// passes go on one rotation begun before the measurement (the steady state), "begin" passes each begin
// a rotation (a new checker), which counts the whole rotation.
func BenchmarkLossCheckPass(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("objects=%dk", n/1000), func(b *testing.B) {
			ix, _ := lossIndex(b, b.TempDir(), n/250, 1000, 250)
			for _, mode := range []string{"rotating", "begin"} {
				b.Run(mode, func(b *testing.B) {
					lc := ix.NewLossChecker(refindex.LossCheckOptions{Budget: 2000})
					if mode == "rotating" {
						// Begin the rotation outside the measurement: the passes measured go on it.
						if _, err := lc.Check(context.Background()); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportAllocs()
					for b.Loop() {
						if mode == "begin" {
							lc = ix.NewLossChecker(refindex.LossCheckOptions{Budget: 2000})
						}
						if _, err := lc.Check(context.Background()); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// holdingStore is a presentStore whose first Stat of a referenced object once armed waits until
// `after` more stats have begun (or a minute has passed, a guard against a pass that never sends them:
// then timedOut is set), counting the stats begun.
type holdingStore struct {
	presentStore
	armed    atomic.Bool
	after    int64
	begun    atomic.Int64
	release  chan struct{}
	once     sync.Once
	timedOut atomic.Bool
}

func (s *holdingStore) Stat(ctx context.Context, p string) (store.ObjectInfo, error) {
	if !s.armed.Load() || filepath.Base(p) == "_metadata" {
		return s.presentStore.Stat(ctx, p)
	}
	n := s.begun.Add(1)
	if n == s.after+1 {
		s.once.Do(func() { close(s.release) })
	}
	if n == 1 {
		select {
		case <-s.release:
		case <-time.After(time.Minute):
			s.timedOut.Store(true)
		case <-ctx.Done():
		}
	}
	return s.presentStore.Stat(ctx, p)
}

// TestLossCheckPlansWhileRequestsFlow: a pass plans its next segment from the index while the
// previous segment's requests are under way and starts its requests beside them (one bound on the
// requests in flight for both): the planning of a large store (seconds of CPU at 1,000,000 objects)
// does not stop the requests, so a pass lasts what its pace says. The first stat is held until a stat
// of the next segment begins; a pass that waits for every request of a segment before it plans the
// next never gets there.
func TestLossCheckPlansWhileRequestsFlow(t *testing.T) {
	for _, tc := range []struct {
		name          string
		seg, parallel int
	}{
		{"two in flight", 10, 2},
		{"segment of one", 1, 2},
		{"many in flight", 25, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "store")
			lr, err := treegen.Large(root, treegen.LargeSpec{Jobs: 1, CheckpointsPerJob: 2, RefsPerCheckpoint: 100, NewPerCheckpoint: 100, Seed: "plan"}, time.Now().Add(-48*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			ls, err := localstore.New(root)
			if err != nil {
				t.Fatal(err)
			}
			m, err := pathnorm.ParseMapping("file:" + root + "=")
			if err != nil {
				t.Fatal(err)
			}
			st := &holdingStore{presentStore: presentStore{ls}, after: int64(tc.seg), release: make(chan struct{})}
			ix, err := refindex.Open(filepath.Join(dir, "index"), st, refindex.DefaultPolicy(), refindex.WithLogger(quiet), refindex.WithPathMap([]pathnorm.Mapping{m}, ""))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ix.Close() })
			ctx := context.Background()
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			st.armed.Store(true)
			lc := ix.NewLossChecker(refindex.LossCheckOptions{Parallel: tc.parallel})
			refindex.SetLossSegment(lc, tc.seg)
			rep, err := lc.Check(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.timedOut.Load() {
				t.Fatalf("segments of %d keys: no stat of the next segment began while the first segment's first stat was under way", tc.seg)
			}
			if !rep.Complete || rep.Checked != lr.Distinct || len(rep.Missing) != 0 {
				t.Fatalf("pass: complete %v, %d of %d checked, missing %+v", rep.Complete, rep.Checked, lr.Distinct, rep.Missing)
			}
			if held := refindex.LossMaxHeld(lc); held > 2*tc.seg {
				t.Errorf("%d keys held at once, want at most two segments (%d)", held, 2*tc.seg)
			}
		})
	}
}
