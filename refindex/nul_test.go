package refindex_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// TestNULInReferenceFailsClosed: a _metadata naming a file with a NUL byte (hostile or corrupt: no file
// system or S3 key can hold one, and the index's keys use NUL as a separator) is unparseable and
// damaged (Flink could not restore that reference either): it protects nothing but itself, and stats
// names it and why.
func TestNULInReferenceFailsClosed(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tr, err := treegen.YoungOrphan(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	evil, err := tr.Checkpoint(treegen.Spec{Dir: "flink/evil/chk-1", ID: 1, Completed: now.Add(-48 * time.Hour), Shared: []string{"flink/evil/shared/a\x00b"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := localstore.New(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	pol := refindex.DefaultPolicy()
	pol.Now = func() time.Time { return now }
	ix, err := refindex.Open(filepath.Join(t.TempDir(), "index"), st, pol, refindex.WithPathMap(tr.Maps, tr.EntropyKey))
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var other string
	for k := range tr.Files {
		if !strings.HasPrefix(k, "flink/evil/") {
			other = k
			break
		}
	}
	// Damaged: no file system can hold the name, so Flink could not restore it either; it refuses
	// nothing else, and stats names it and the NUL.
	if d := ix.Decide(ctx, other, verdict.OpUnlink); !d.Allow && d.Reason == verdict.ReasonUnparseable {
		t.Fatalf("unlink %s with a NUL reference in %s: %+v, want decided as without it", other, evil.Metadata, d)
	}
	s, err := ix.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.DamagedMetadata != 1 || len(s.BadMetadata) != 1 || s.BadMetadata[0].Metadata != evil.Metadata || !strings.Contains(s.BadMetadata[0].Error, "NUL") || s.BadMetadata[0].Scope != "itself" {
		t.Fatalf("stats of the _metadata with a NUL reference: %+v", s)
	}
	if d := ix.Decide(ctx, evil.Metadata, verdict.OpUnlink); !d.Allow {
		t.Fatalf("deleting the damaged _metadata itself (48 h old) refused: %+v", d)
	}
}
