package refindex_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestVerifyCheckpointRetiredDuringCheck: Flink deletes a subsumed checkpoint's `_metadata` first and
// its files after, so between two syncs the index still lists a checkpoint whose files are going. Verify
// must not call it broken (it is no longer live) but must name it; a live checkpoint missing a file is
// still broken.
func TestVerifyCheckpointRetiredDuringCheck(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, tr)
	var live []*treegen.Checkpoint
	for _, c := range tr.Live {
		live = append(live, c)
	}
	slices.SortFunc(live, func(a, b *treegen.Checkpoint) int {
		if a.Metadata < b.Metadata {
			return -1
		}
		return 1
	})
	if len(live) == 0 || len(live[0].Refs) == 0 {
		t.Fatalf("tree has no live checkpoint with references: %+v", live)
	}
	gone := live[0]
	// Subsumed after the index's last sync: _metadata first, then a file only it needs.
	for _, p := range []string{gone.Metadata, gone.Refs[0]} {
		if err := os.Remove(filepath.Join(tr.Root, p)); err != nil {
			t.Fatal(err)
		}
	}
	vr, err := ix.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range vr.Broken {
		if b.Metadata == gone.Metadata {
			t.Errorf("a checkpoint whose _metadata is gone is reported broken: %+v", b)
		}
	}
	if !slices.Contains(vr.RetiredDuringCheck, gone.Metadata) {
		t.Errorf("RetiredDuringCheck = %v, want it to name %s", vr.RetiredDuringCheck, gone.Metadata)
	}
	// Its file gone while the _metadata stays: broken, as before.
	if err := os.WriteFile(filepath.Join(tr.Root, gone.Metadata), []byte("restored"), 0o644); err != nil {
		t.Fatal(err)
	}
	vr, err = ix.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if vr.OK || len(vr.Broken) == 0 || vr.Broken[0].Metadata != gone.Metadata {
		t.Errorf("a live checkpoint missing a file: ok=%v broken=%+v", vr.OK, vr.Broken)
	}
}

// TestLossCheckCheckpointRetiringBetweenSyncs: the loss check does not raise an alarm for a checkpoint
// Flink is subsuming (its `_metadata` already gone from the store, its files going), but does for a live
// one missing a file.
func TestLossCheckCheckpointRetiringBetweenSyncs(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, tr)
	var gone *treegen.Checkpoint
	for _, c := range tr.Live {
		if len(c.Refs) > 0 && (gone == nil || c.Metadata < gone.Metadata) {
			gone = c
		}
	}
	if gone == nil {
		t.Fatal("tree has no live checkpoint with references")
	}
	lc := ix.NewLossChecker(refindex.LossCheckOptions{})
	for _, p := range []string{gone.Metadata, gone.Refs[0]} {
		if err := os.Remove(filepath.Join(tr.Root, p)); err != nil {
			t.Fatal(err)
		}
	}
	reported := func() bool {
		rep, err := lc.Check(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range rep.Missing {
			if m.Checkpoint == gone.Metadata {
				return true
			}
		}
		return false
	}
	if reported() {
		t.Errorf("loss reported for %s, whose _metadata is gone (being retired)", gone.Metadata)
	}
	if err := os.WriteFile(filepath.Join(tr.Root, gone.Metadata), []byte("still here"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !reported() {
		t.Errorf("no loss reported for %s, live and missing %s", gone.Metadata, gone.Refs[0])
	}
}
