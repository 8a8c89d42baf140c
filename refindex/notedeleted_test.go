package refindex_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// TestDeletedConfirmsWithStore: a mount's report that it deleted a key retires only the checkpoints
// the store confirms gone. On S3 the file "a" and the folder "a/" can both exist, and a rmdir of a folder
// marker leaves what lies below it: retiring a/chk-1 on the mount's word made its files deletable while
// its _metadata still existed.
func TestDeletedConfirmsWithStore(t *testing.T) {
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
		if d := ix.Decide(ctx, "a/shared/x", verdict.OpUnlink); d.Allow {
			t.Errorf("%s: unlink a/shared/x allowed (%s); a/chk-1/_metadata still exists and references it", when, d.Message)
		}
	}
	refused("before")
	for _, reported := range []string{"a", "a/chk-1", "a/chk-1/_metadata"} {
		if err := ix.Deleted(ctx, reported); err != nil {
			t.Fatal(err)
		}
		refused("after a reported deletion of " + reported + " that did not happen")
	}
	// Really gone: retired at once, and its files become deletable.
	if err := os.Remove(filepath.Join(tr.Root, c.Metadata)); err != nil {
		t.Fatal(err)
	}
	if err := ix.Deleted(ctx, "a/chk-1"); err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, "a/shared/x", verdict.OpUnlink); !d.Allow {
		t.Errorf("after the real deletion of %s: unlink a/shared/x refused: %s", c.Metadata, d.Message)
	}
}

// TestOrphansBlockedByUnreadCheckpoint: a _metadata that appeared, or changed, beside the index since its
// last sync references files the index does not know of, so `orphans` (which scripts delete from
// directly) lists nothing until a sync has read it.
func TestOrphansBlockedByUnreadCheckpoint(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, tr)
	before, err := ix.Orphans(ctx, 0)
	if err != nil || before.Blocked != "" || len(before.Files) == 0 {
		t.Fatalf("orphans after the sync: %+v %v; want garbage listed", before, err)
	}
	victim := before.Files[0].Path
	// A checkpoint written beside the index that references one of the listed files.
	c, err := tr.Checkpoint(treegen.Spec{Dir: "late/chk-2", Job: "late", ID: 2, Completed: testNow.Add(-48 * time.Hour), Shared: []string{victim}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := ix.Orphans(ctx, 0)
	if err != nil || !strings.Contains(res.Blocked, c.Metadata) || len(res.Files) != 0 {
		t.Fatalf("orphans with %s unread: %+v %v; want blocked, naming it", c.Metadata, res, err)
	}
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	res, err = ix.Orphans(ctx, 0)
	if err != nil || res.Blocked != "" {
		t.Fatalf("orphans after the sync read it: %+v %v", res, err)
	}
	for _, f := range res.Files {
		if f.Path == victim {
			t.Errorf("%s listed as an orphan; %s references it", victim, c.Metadata)
		}
	}
	// Changed in place (another size) beside the index: blocked again.
	if err := os.WriteFile(filepath.Join(tr.Root, c.Metadata), []byte("rewritten"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := ix.Orphans(ctx, 0); err != nil || !strings.Contains(res.Blocked, "changed") {
		t.Fatalf("orphans with %s changed: %+v %v; want blocked", c.Metadata, res, err)
	}
}
