package refindex_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/localstore"
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
// for a pass that checks everything (no budget, no chunks: an unpaced local store), by its segment:
// it plans, checks and forgets one stretch of the reverse table after the other.
func TestLossCheckPassHeldKeys(t *testing.T) {
	ix, lr := lossIndex(t, t.TempDir(), 10, 500, 500)
	for _, tc := range []struct {
		name          string
		budget, seg   int
		complete      bool
		checked, held int
	}{
		{"budget", 50, 0, false, 50, 50},
		{"segments", 0, 100, true, lr.Distinct, 100},
		{"budget and segments", 250, 100, false, 250, 100},
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

// BenchmarkLossCheckPass measures one loss-check pass under the S3 default budget (2,000 requests)
// over stores of 100 k and 1 M referenced objects (4 references per object), stats only: "rotating"
// passes go on one rotation (the steady state), "begin" passes each begin a rotation (a new checker).
func BenchmarkLossCheckPass(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		ix, lr := lossIndex(b, b.TempDir(), n/250, 1000, 250)
		for _, mode := range []string{"rotating", "begin"} {
			b.Run(fmt.Sprintf("objects=%dk/%s", lr.Distinct/1000, mode), func(b *testing.B) {
				lc := ix.NewLossChecker(refindex.LossCheckOptions{Budget: 2000})
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
	}
}
