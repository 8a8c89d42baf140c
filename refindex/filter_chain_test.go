package refindex

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// TestSnapshotChainOrdersDecrements: a decision on snapshot S-1 must not see the filter decrement
// of a commit that ended S0 while S-1 is read: S-1 says X is referenced by M, the newest state says
// M is unparseable (refuse everything). A decision mixing S-1's memState with the newest reverse
// counts would allow X (neither state does).
func TestSnapshotChainOrdersDecrements(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	q := slog.New(slog.NewTextHandler(io.Discard, nil))
	tr, err := treegen.YoungOrphan(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	x := "flink/j/shared/x.sst"
	m, err := tr.Checkpoint(treegen.Spec{Dir: "flink/j/chk-1", ID: 1, Completed: now.Add(-48 * time.Hour), Shared: []string{x}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Data(m, now.Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	st, err := localstore.New(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	pol := DefaultPolicy()
	pol.Now = func() time.Time { return now }
	pol.MaxStaleness = 0
	ix, err := Open(t.TempDir(), st, pol, WithPathMap(tr.Maps, tr.EntropyKey), WithLogger(q))
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if err := ix.Sync(ctx); err != nil { // rebuild: filter ready
		t.Fatal(err)
	}
	v, err := ix.acquire() // S-1
	if err != nil {
		t.Fatal(err)
	}
	// Commit 0: anything (another checkpoint).
	c2, err := tr.Checkpoint(treegen.Spec{Dir: "flink/k/chk-1", ID: 1, Completed: now.Add(-48 * time.Hour), Shared: []string{"flink/k/shared/y"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Data(c2, now.Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := ix.IndexMetadata(ctx, c2.Metadata); err != nil {
		t.Fatal(err)
	}
	// Commit 1: M rewritten unparseable (its references leave the reverse table).
	if err := os.WriteFile(filepath.Join(tr.Root, m.Metadata), []byte("garbage, not a _metadata"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = ix.IndexMetadata(ctx, m.Metadata) // ErrUnparseable expected
	if d := ix.Decide(ctx, x, verdict.OpUnlink); d.Allow {
		t.Fatalf("newest state allows %s: %+v", x, d)
	}
	d := ix.decide(ctx, v, x, verdict.OpUnlink, maxNamed, nil)
	v.release()
	t.Logf("decision on the old view: allow=%v reason=%s", d.Allow, d.Reason)
	if d.Allow {
		t.Fatalf("the old view allows unlinking %s, referenced in its own state and refused (unparseable) in the newest", x)
	}
}
