package refindex

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// TestFilterStress: concurrent decisions against commits, a
// background fill after every reopen, syncs and rebuilds. Whenever a view's filter says "unreferenced",
// the exact scan on THE SAME snapshot must find no reverse entry.
func TestFilterStress(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	q := slog.New(slog.NewTextHandler(io.Discard, nil))
	tr, err := treegen.YoungOrphan(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	st, err := localstore.New(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	pol := DefaultPolicy()
	pol.MaxStaleness = 0
	dir := t.TempDir()
	open := func() *Index {
		ix, err := Open(dir, st, pol, WithPathMap(tr.Maps, tr.EntropyKey), WithLogger(q))
		if err != nil {
			t.Fatal(err)
		}
		return ix
	}
	objs := make([]string, 3000)
	for i := range objs {
		objs[i] = fmt.Sprintf("flink/j/shared/o-%d", i)
	}
	rnd := rand.New(rand.NewSource(1))
	var live []string
	seq := 0
	mk := func() string {
		seq++
		var sh []string
		for _, o := range objs {
			if rnd.Intn(100) == 0 {
				sh = append(sh, o)
			}
		}
		c, err := tr.Checkpoint(treegen.Spec{Dir: fmt.Sprintf("flink/j/chk-%d", seq), ID: int64(seq), Completed: now.Add(-2 * time.Hour), Shared: sh})
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, c.Metadata)
		return c.Metadata
	}
	for range 20 {
		mk()
	}
	ix := open()
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	rounds := 12
	if testing.Short() {
		rounds = 3
	}
	for round := 0; round < rounds; round++ {
		ix.Close()
		ix = open()
		var stop atomic.Bool
		var bad atomic.Int64
		var checked atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(seed int64) {
				defer wg.Done()
				r := rand.New(rand.NewSource(seed))
				for !stop.Load() {
					ix.Decide(ctx, objs[r.Intn(len(objs))], verdict.OpUnlink) // starts the fill
					v, err := ix.acquire()
					if err != nil {
						return
					}
					for k := 0; k < 50; k++ {
						o := objs[r.Intn(len(objs))]
						if v.filt.unreferenced(o, v.snap.seq) {
							checked.Add(1)
							ex := *v
							ex.filt = nil
							_, n, _, _ := ix.referencing(&ex, o, false, 5)
							if n > 0 {
								bad.Add(1)
								t.Errorf("round %d: filter says %s unreferenced, snapshot has %d reverse entries", round, o, n)
							}
						}
					}
					v.release()
				}
			}(int64(round*10 + w))
		}
		for i := 0; i < 60; i++ {
			switch x := rnd.Intn(10); {
			case x < 4:
				if err := ix.IndexMetadata(ctx, mk()); err != nil {
					t.Fatal(err)
				}
			case x < 9 && len(live) > 10:
				j := rnd.Intn(len(live))
				m := live[j]
				live = append(live[:j], live[j+1:]...)
				if err := tr.Retire(m); err != nil {
					t.Fatal(err)
				}
				if err := ix.Deleted(ctx, m); err != nil {
					t.Fatal(err)
				}
			default:
				if rnd.Intn(3) == 0 {
					if err := ix.Rebuild(ctx); err != nil {
						t.Fatal(err)
					}
				} else if err := ix.Sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		stop.Store(true)
		wg.Wait()
		t.Logf("round %d: %d filter-negative answers checked, %d wrong", round, checked.Load(), bad.Load())
		if err := CheckFilter(ix); err != nil {
			t.Errorf("round %d: %v", round, err)
		}
	}
	ix.Close()
}
