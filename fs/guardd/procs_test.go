package guardd_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/internal/fusetest"
	"github.com/ckguard/ckguard/localbackend/localfs"
	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// procsFixture skips without FUSE or with GOMAXPROCS < 2 (nothing to lower); otherwise it returns the
// process's GOMAXPROCS, a temp dir, an empty mountpoint in it and the YoungOrphan store.
func procsFixture(t *testing.T) (start int, dir, mnt string, tr *treegen.Tree) {
	t.Helper()
	fusetest.Require(t)
	start = runtime.GOMAXPROCS(0)
	if start < 2 {
		t.Skip("needs GOMAXPROCS >= 2")
	}
	dir = t.TempDir()
	mnt = filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	tr, err := treegen.YoungOrphan(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return start, dir, mnt, tr
}

// TestServeProcs: with ServeProcs the daemon serves with that GOMAXPROCS once mounted (the initial sync runs
// with the process's own), still guards, and gives the value back when it stops.
func TestServeProcs(t *testing.T) {
	start, dir, mnt, tr := procsFixture(t)
	var serving int
	stop := runDaemon(t, guardd.Config{StoreDir: tr.Root, IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
		Policy: refindex.DefaultPolicy(), ServeProcs: 1, Ready: func(*guardd.Mounted) { serving = runtime.GOMAXPROCS(0) }})
	if serving != 1 {
		t.Errorf("GOMAXPROCS once mounted = %d, want 1", serving)
	}
	var ref string
	for _, c := range tr.Live {
		ref = c.Refs[0]
		break
	}
	if err := os.Remove(filepath.Join(mnt, ref)); err == nil {
		t.Errorf("rm %s (referenced) through the mount succeeded", ref)
	}
	stop()
	if n := runtime.GOMAXPROCS(0); n != start {
		t.Errorf("GOMAXPROCS after the daemon stopped = %d, want %d back", n, start)
	}
}

// procsSpy records GOMAXPROCS at every listing of the store once armed.
type procsSpy struct {
	store.Store
	armed atomic.Bool
	seen  chan int
}

func (s *procsSpy) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	if s.armed.Load() {
		select {
		case s.seen <- runtime.GOMAXPROCS(0):
		default:
		}
	}
	return s.Store.ListMetadata(ctx, fn)
}

// TestServeProcsRaisedForSync: a periodic sync of a mount serving at 1 P runs with the process's own
// GOMAXPROCS (the index's work hook is wired to the governor).
func TestServeProcsRaisedForSync(t *testing.T) {
	start, dir, mnt, tr := procsFixture(t)
	spy := &procsSpy{seen: make(chan int, 1)}
	serve := serveLocalWith(func(st store.Store) store.Store { spy.Store = st; return spy })
	var serving int
	guarddtest.Start(t, guardd.Config{StoreDir: tr.Root, IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
		Policy: refindex.DefaultPolicy(), ServeProcs: 1, SyncInterval: 50 * time.Millisecond,
		Ready: func(*guardd.Mounted) { serving = runtime.GOMAXPROCS(0) }}, serve)
	if serving != 1 {
		t.Fatalf("GOMAXPROCS once mounted = %d, want 1", serving)
	}
	spy.armed.Store(true)
	select {
	case n := <-spy.seen:
		if n != start {
			t.Errorf("GOMAXPROCS during a periodic sync = %d, want %d (raised for index work)", n, start)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no periodic sync listed the store")
	}
}

// serveLocalWith runs guardd.Serve over a local store whose index sees wrap(the store) instead: a spy or
// a store that fails on demand.
func serveLocalWith(wrap func(store.Store) store.Store) func(context.Context, guardd.Config) error {
	return func(ctx context.Context, c guardd.Config) error {
		return guardd.Serve(ctx, c, func(context.Context, guardd.Config) (guardd.Backend, error) {
			st, err := localstore.New(c.StoreDir)
			if err != nil {
				return guardd.Backend{}, err
			}
			return guardd.Backend{Store: wrap(st),
				Mount: func(_ context.Context, enf *guard.Enforcer, met *metrics.Metrics) (guardd.Mount, error) {
					return localfs.Mount(localfs.Options{Store: c.StoreDir, Mountpoint: c.Mountpoint, Enforcer: enf, Metrics: met})
				}}, nil
		})
	}
}
