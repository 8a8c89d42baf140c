package guardd_test

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/internal/fusetest"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestServeProcs: with ServeProcs the daemon serves with that GOMAXPROCS once mounted (the initial sync runs
// with the process's own), still guards, and gives the value back when it stops.
func TestServeProcs(t *testing.T) {
	fusetest.Require(t)
	start := runtime.GOMAXPROCS(0)
	if start < 2 {
		t.Skip("needs GOMAXPROCS >= 2")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	tr, err := treegen.YoungOrphan(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
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
