package refindex_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestNoteDeletedConfirmsWithStore: a mount's report that it deleted a key retires only the checkpoints
// the store confirms gone. On S3 the file "a" and the folder "a/" can both exist, and a rmdir of a folder
// marker leaves what lies below it: retiring a/chk-1 on the mount's word made its files deletable while
// its _metadata still existed (review 5 M2).
func TestNoteDeletedConfirmsWithStore(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tr.Checkpoint(treegen.Spec{Dir: "a/chk-1", Job: "a", ID: 1, Completed: testNow.Add(-48 * time.Hour),
		Shared: []string{"a/shared/x"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Data(c, testNow.Add(-49*time.Hour)); err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, tr)
	refused := func(when string) {
		t.Helper()
		if d := ix.Decide(ctx, "a/shared/x", refindex.OpUnlink); d.Allow {
			t.Errorf("%s: unlink a/shared/x allowed (%s); a/chk-1/_metadata still exists and references it", when, d.Message)
		}
	}
	refused("before")
	for _, reported := range []string{"a", "a/chk-1", "a/chk-1/_metadata"} {
		if err := ix.NoteDeleted(ctx, reported); err != nil {
			t.Fatal(err)
		}
		refused("after a reported deletion of " + reported + " that did not happen")
	}
	// Really gone: retired at once, and its files become deletable.
	if err := os.Remove(filepath.Join(tr.Root, c.Metadata)); err != nil {
		t.Fatal(err)
	}
	if err := ix.NoteDeleted(ctx, "a/chk-1"); err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, "a/shared/x", refindex.OpUnlink); !d.Allow {
		t.Errorf("after the real deletion of %s: unlink a/shared/x refused: %s", c.Metadata, d.Message)
	}
}
