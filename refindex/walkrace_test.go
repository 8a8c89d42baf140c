package refindex_test

import (
	"context"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// hookAtListing runs hook once, when its store's listing reaches the `_metadata` at key: what the
// listing reports after that was read after the hook's changes, what it reported before, before them.
type hookAtListing struct {
	store.Store
	key  string
	hook func()
}

func (h *hookAtListing) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	return h.Store.ListMetadata(ctx, func(oi store.ObjectInfo) error {
		if oi.Path == h.key && h.hook != nil {
			hk := h.hook
			h.hook = nil
			hk()
		}
		return fn(oi)
	})
}

// newLister is hookAtListing with store.NewLister: its second listing leaves out what the caller
// knows, as the S3 store's does, and counts what it left out.
type newLister struct {
	*hookAtListing
	calls, skipped int
}

func (n *newLister) ListNewMetadata(ctx context.Context, known func(string) bool, fn func(store.ObjectInfo) error) error {
	n.calls++
	return n.ListMetadata(ctx, func(oi store.ObjectInfo) error {
		if known(oi.Path) {
			n.skipped++
			return nil
		}
		return fn(oi)
	})
}

// TestCheckpointHandOverDuringSyncListing: a checkpoint completes and the one it subsumes is deleted
// while the listing of a sync (or a rebuild) runs, the new one where the listing has already been, the old one where it
// has not yet: the listing sees neither. A file both reference (an old shared SST; a job restored in
// CLAIM mode, or chk-10 listed before chk-9) must stay protected: it is referenced by a live
// checkpoint all along.
func TestCheckpointHandOverDuringSyncListing(t *testing.T) {
	for _, tc := range []struct {
		name      string
		update    func(*refindex.Index, context.Context) error
		newLister bool
	}{
		{"sync", (*refindex.Index).Sync, false},
		{"rebuild", (*refindex.Index).Rebuild, false},
		// The second listing of a sync that retires leaves out what the first one reported.
		{"sync, second listing of new keys only", (*refindex.Index).Sync, true},
	} {
		t.Run(tc.name, func(t *testing.T) { testHandOverDuringListing(t, tc.update, tc.newLister) })
	}
}

func testHandOverDuringListing(t *testing.T, update func(*refindex.Index, context.Context) error, withNewLister bool) {
	ctx := context.Background()
	tr, ls := youngOrphanStore(t)
	// The hook point: the young-orphan scenario's live checkpoint, in a job folder listed after the
	// new job's and before the old one's.
	var hookKey string
	for k := range tr.Live {
		hookKey = k
	}
	const (
		newJob = "flink/00000000000000000000000000000001"
		oldJob = "flink/ffffffffffffffffffffffffffffffff"
	)
	sst := oldJob + "/shared/sst-handed-over"
	old := testNow.Add(-48 * time.Hour)
	c4, err := tr.Checkpoint(treegen.Spec{Dir: oldJob + "/chk-4", Job: oldJob, ID: 4, Completed: old, Shared: []string{sst}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Data(c4, old.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The new checkpoint's folder exists (Flink creates it when the checkpoint starts); its _metadata
	// does not yet.
	if err := tr.Write(newJob+"/chk-5/private", 64, testNow.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	st := &hookAtListing{Store: ls, key: hookKey}
	var ix *refindex.Index
	var nl *newLister
	if withNewLister {
		nl = &newLister{hookAtListing: st}
		ix = openSynced(t, nl)
	} else {
		ix = openSynced(t, st)
	}
	if d := ix.Decide(ctx, sst, verdict.OpUnlink); d.Allow {
		t.Fatalf("%s allowed before the hand-over: %+v", sst, d)
	}
	st.hook = func() {
		if _, err := tr.Checkpoint(treegen.Spec{Dir: newJob + "/chk-5", Job: newJob, ID: 5, Completed: testNow, Shared: []string{sst}}); err != nil {
			t.Error(err)
		}
		if err := tr.Retire(c4.Metadata); err != nil {
			t.Error(err)
		}
	}
	if err := update(ix, ctx); err != nil {
		t.Fatal(err)
	}
	if st.hook != nil {
		t.Fatal("the listing never reached the hook point")
	}
	if nl != nil && (nl.calls != 1 || nl.skipped == 0) {
		t.Fatalf("ListNewMetadata called %d times, left out %d keys; want one second listing that left out the known ones", nl.calls, nl.skipped)
	}
	if d := ix.Decide(ctx, sst, verdict.OpUnlink); d.Allow {
		t.Errorf("%s, referenced by %s/chk-5/_metadata all along, is deletable after an update whose listing missed the hand-over: %+v", sst, newJob, d)
	}
	// The next sync sees the new checkpoint.
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, sst, verdict.OpUnlink); d.Allow {
		t.Errorf("%s deletable after the second sync: %+v", sst, d)
	}
}
