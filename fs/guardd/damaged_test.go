package guardd_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/internal/fusetest"
	"github.com/ckguard/ckguard/localbackend/localguardd"
	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestDamagedIndexRebuiltAtMount: the index is derived data, so a mount whose index cannot be opened
// (a damaged badger manifest here; kill -9 or a full disk in life) rebuilds it from the store instead of
// refusing to start, and guards as before.
func TestDamagedIndexRebuiltAtMount(t *testing.T) {
	dir, tr, idx, gen, st := syncedIncident(t)
	if err := os.WriteFile(filepath.Join(gen, "MANIFEST"), []byte("not a badger manifest"), 0o600); err != nil {
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
	if aside, _ := filepath.Glob(filepath.Join(idx, "damaged-gen-*")); len(aside) != 1 {
		t.Errorf("the unusable generation was not set aside: %v", aside)
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

// syncedIncident skips without FUSE; otherwise it writes the IncidentOne store in a temp dir, builds
// and closes an index of it there and returns the dir, the tree, the index and its generation
// directory, and the store.
func syncedIncident(t *testing.T) (dir string, tr *treegen.Tree, idx, gen string, st *localstore.Store) {
	t.Helper()
	fusetest.Require(t)
	dir = t.TempDir()
	tr, err := treegen.IncidentOne(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st, err = localstore.New(tr.Root); err != nil {
		t.Fatal(err)
	}
	idx = filepath.Join(dir, "index")
	ix, err := refindex.Open(idx, st, refindex.DefaultPolicy(), refindex.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	ix.Close()
	gens, _ := filepath.Glob(filepath.Join(idx, "gen-*"))
	if len(gens) != 1 {
		t.Fatalf("generations: %v", gens)
	}
	return dir, tr, idx, gens[0], st
}

// TestBusyIndexNotDiscarded: a generation another process holds open through badger (a badger tool)
// is not damaged; the mount refuses to start and says so instead of setting it aside.
func TestBusyIndexNotDiscarded(t *testing.T) {
	dir, tr, idx, gen, _ := syncedIncident(t)
	db, err := badger.Open(badger.DefaultOptions(gen).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = localguardd.Run(ctx, guardd.Config{StoreDir: tr.Root, IndexDir: idx, Mountpoint: mnt, Policy: refindex.DefaultPolicy(),
		Ready: func(*guardd.Mounted) { t.Error("mounted over an index generation another process holds"); cancel() }})
	if err == nil || !strings.Contains(err.Error(), "another process") {
		t.Errorf("mount over a busy index generation: %v, want a refusal naming another process", err)
	}
	if _, err := os.Stat(gen); err != nil {
		t.Errorf("the busy generation is gone: %v", err)
	}
}

// unreachableStore fails every listing while down is set.
type unreachableStore struct {
	store.Store
	down atomic.Bool
}

func (u *unreachableStore) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	if u.down.Load() {
		return errors.New("store unreachable")
	}
	return u.Store.ListMetadata(ctx, fn)
}

// TestDamagedIndexUnreachableStore: a damaged index whose rebuild cannot list the store leaves the mount
// up but refusing every deletion (fail closed); once the store answers, a periodic sync rebuilds the
// index and the mount guards normally.
func TestDamagedIndexUnreachableStore(t *testing.T) {
	dir, tr, idx, gen, _ := syncedIncident(t)
	if err := os.WriteFile(filepath.Join(gen, "MANIFEST"), []byte("not a badger manifest"), 0o600); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	us := &unreachableStore{}
	us.down.Store(true)
	guarddtest.Start(t, guardd.Config{StoreDir: tr.Root, IndexDir: idx, Mountpoint: mnt, Policy: refindex.DefaultPolicy(),
		SyncInterval: 50 * time.Millisecond}, serveLocalWith(func(st store.Store) store.Store { us.Store = st; return us }))
	orphans := tr.Orphans(treegen.DefaultPolicy, 0)
	if len(orphans) < 2 {
		t.Fatalf("the scenario has %d orphans, want 2", len(orphans))
	}
	if err := os.Remove(filepath.Join(mnt, orphans[0])); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("rm %s (orphan) while the index cannot be rebuilt: %v, want EPERM", orphans[0], err)
	}
	us.down.Store(false)
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := os.Remove(filepath.Join(mnt, orphans[1]))
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EPERM) || time.Now().After(deadline) {
			t.Fatalf("rm %s (orphan) after the store came back: %v", orphans[1], err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, k := range tr.Referenced() {
		if err := os.Remove(filepath.Join(mnt, k)); !errors.Is(err, syscall.EPERM) {
			t.Fatalf("rm %s (referenced) after the rebuild: %v, want EPERM", k, err)
		}
	}
}
