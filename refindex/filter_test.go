package refindex_test

import (
	"context"
	"fmt"
	"path"
	"reflect"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// sameAsExact checks that Decide (with the reference filter) answers exactly as the exact scan for
// every file and folder of the tree, and that the filter counts the reverse table exactly.
func sameAsExact(t *testing.T, ix *refindex.Index, tr *treegen.Tree) {
	t.Helper()
	ctx := context.Background()
	if err := refindex.CheckFilter(ix); err != nil {
		t.Fatal(err)
	}
	keys := tr.AllFiles()
	dirs := map[string]bool{}
	for _, k := range keys {
		dirs[path.Dir(k)] = true
	}
	check := func(k string, ops ...verdict.Op) {
		for _, op := range ops {
			got, want := ix.Decide(ctx, k, op), refindex.DecideExact(ix, ctx, k, op)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s %s: with the filter %+v, exact %+v", op, k, got, want)
			}
		}
	}
	for _, k := range keys {
		check(k, verdict.OpUnlink, verdict.OpRename, verdict.OpTruncate, verdict.OpLink)
		check(k+"-never-written", verdict.OpUnlink)
	}
	for d := range dirs {
		check(d, verdict.OpRmdir, verdict.OpRename)
	}
}

func waitFilter(t *testing.T, ix *refindex.Index) {
	t.Helper()
	for t0 := time.Now(); !refindex.FilterReady(ix); time.Sleep(time.Millisecond) {
		if time.Since(t0) > 30*time.Second {
			t.Fatal("the reference filter was not built within 30s")
		}
	}
}

// The reference filter of a rebuilt generation, of a generation reopened from disk (built in the
// background on the first decision) and after incremental updates (checkpoints added through the
// mount, retired, a sync) never changes a decision: every scenario tree, every file and folder.
func TestFilterDecidesAsExactScan(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ctx := context.Background()
			tr, err := sc.gen(t.TempDir(), testNow)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			open := func() *refindex.Index { return openTreeIn(t, tr, dir) }
			ix := open()
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if !refindex.FilterReady(ix) {
				t.Fatal("a rebuild left no reference filter")
			}
			sameAsExact(t, ix, tr)
			ix.Close()

			ix = open()
			defer ix.Close()
			if refindex.FilterReady(ix) {
				t.Fatal("a reopened generation has a filter before its first decision")
			}
			// Incremental updates while the filter is built in the background.
			live := tr.Referenced()
			ix.Decide(ctx, live[0], verdict.OpUnlink)
			var added []*treegen.Checkpoint
			for i := range 3 {
				c, err := tr.Checkpoint(treegen.Spec{Dir: fmt.Sprintf("flink/filtertest/chk-%d", i+1), ID: int64(i + 1), Completed: testNow.Add(-2 * time.Hour),
					Shared: append(live[:min(len(live), 2):min(len(live), 2)], fmt.Sprintf("flink/filtertest/shared/sst-%d", i)), Private: []string{"priv"}})
				if err != nil {
					t.Fatal(err)
				}
				if err := tr.Data(c, testNow.Add(-2*time.Hour)); err != nil {
					t.Fatal(err)
				}
				if err := ix.IndexMetadata(ctx, c.Metadata); err != nil {
					t.Fatal(err)
				}
				added = append(added, c)
			}
			waitFilter(t, ix)
			sameAsExact(t, ix, tr)
			// Retire one through the mount and one behind the index's back (found by a sync).
			if err := tr.Retire(added[0].Metadata); err != nil {
				t.Fatal(err)
			}
			if err := ix.Deleted(ctx, added[0].Metadata); err != nil {
				t.Fatal(err)
			}
			if err := tr.Retire(added[1].Metadata); err != nil {
				t.Fatal(err)
			}
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			sameAsExact(t, ix, tr)
		})
	}
}
