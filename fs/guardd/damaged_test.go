package guardd_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/internal/fusetest"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store/localstore"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestDamagedIndexRebuiltAtMount: the index is derived data, so a mount whose index cannot be opened
// (a damaged badger manifest here; kill -9 or a full disk in life) rebuilds it from the store instead of
// refusing to start, and guards as before.
func TestDamagedIndexRebuiltAtMount(t *testing.T) {
	fusetest.Require(t)
	dir := t.TempDir()
	tr, err := treegen.IncidentOne(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(dir, "index")
	st, err := localstore.New(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := refindex.Open(idx, st, refindex.DefaultPolicy(), refindex.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	ix.Close()
	manifests, _ := filepath.Glob(filepath.Join(idx, "gen-*", "MANIFEST"))
	if len(manifests) != 1 {
		t.Fatalf("manifests: %v", manifests)
	}
	if err := os.WriteFile(manifests[0], []byte("not a badger manifest"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ix, err := refindex.Open(idx, st, refindex.DefaultPolicy(), refindex.WithLogger(slog.New(slog.DiscardHandler))); err == nil {
		ix.Close()
		t.Fatal("the damaged index opens: the test damages nothing")
	}

	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	runDaemon(t, guardd.Config{StoreDir: tr.Root, IndexDir: idx, Mountpoint: mnt, Policy: refindex.DefaultPolicy()})
	for _, k := range tr.Referenced() {
		if err := os.Remove(filepath.Join(mnt, k)); !errors.Is(err, syscall.EPERM) {
			t.Fatalf("rm %s (referenced) through the mount over a rebuilt index: %v, want EPERM", k, err)
		}
	}
	orphans := tr.Orphans(treegen.DefaultPolicy, 0)
	if len(orphans) == 0 {
		t.Fatal("the scenario has no orphan to delete")
	}
	for _, k := range orphans {
		if err := os.Remove(filepath.Join(mnt, k)); err != nil {
			t.Errorf("rm %s (orphan) through the mount over a rebuilt index: %v", k, err)
		}
	}
}
