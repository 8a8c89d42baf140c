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
)

// A commit that removes references uncounts them in the filter only when no view can read a state
// that still has them: not while a view of the state before that commit (or of any older state) is
// held, even if views of newer states are released first.
func TestFilterDecrementsWaitForOlderViews(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tr, err := treegen.IncidentTwo(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	st, err := localstore.New(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	pol := DefaultPolicy()
	pol.MaxStaleness, pol.ActiveWindow = 0, 0
	pol.Now = func() time.Time { return now }
	ix, err := Open(t.TempDir(), st, pol, WithPathMap(tr.Maps, tr.EntropyKey), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// Two live checkpoints, each with a file no other checkpoint references.
	owners := map[string][]string{}
	for meta, c := range tr.Live {
		for _, r := range c.Refs {
			owners[r] = append(owners[r], meta)
		}
	}
	var metas, only []string
	for meta, c := range tr.Live {
		for _, r := range c.Refs {
			if len(owners[r]) == 1 {
				metas, only = append(metas, meta), append(only, r)
				break
			}
		}
		if len(metas) == 2 {
			break
		}
	}
	if len(metas) < 2 {
		t.Fatalf("scenario has no two checkpoints with exclusive files: %v", owners)
	}
	f := ix.mu.cur.filt.Load()
	slot := func(k string) uint32 { return f.count(f.hash(k)) }
	before := []uint32{slot(only[0]), slot(only[1])}
	if before[0] == 0 || before[1] == 0 {
		t.Fatalf("filter slots of referenced files: %v", before)
	}
	retire := func(meta string) {
		t.Helper()
		if err := os.Remove(filepath.Join(tr.Root, meta)); err != nil {
			t.Fatal(err)
		}
		if err := ix.Deleted(ctx, meta); err != nil {
			t.Fatal(err)
		}
	}

	// Views are released once, also when the test fails (the deferred Close waits for them).
	hold := func() (release func()) {
		t.Helper()
		v, err := ix.acquire()
		if err != nil {
			t.Fatal(err)
		}
		return func() {
			if v != nil {
				v.release()
				v = nil
			}
		}
	}
	release1 := hold() // reads the state where both checkpoints are live
	defer release1()
	retire(metas[0])
	release2 := hold() // reads the state where only metas[1] is live
	defer release2()
	retire(metas[1])
	if got := slot(only[0]); got != before[0] {
		t.Fatalf("slot of %s dropped to %d while a view of a state referencing it is held", only[0], got)
	}
	release2()
	if got := slot(only[1]); got != before[1] {
		t.Fatalf("slot of %s dropped to %d after the newer view was released, though the older one still reads a state referencing it", only[1], got)
	}
	release1()
	if got := []uint32{slot(only[0]), slot(only[1])}; got[0] != before[0]-1 || got[1] != before[1]-1 {
		t.Fatalf("after every view is released the slots are %v, want %v minus one each", got, before)
	}
	if err := CheckFilter(ix); err != nil {
		t.Fatal(err)
	}
}
