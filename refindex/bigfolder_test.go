package refindex_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// TestMillionEntryFolder (issue 29, a folder with 1 M entries; skipped with -short): one folder of
// CKGUARD_BIG_FOLDER entries (default 1,000,000 empty files, as a user could make in a scratch
// folder) beside a live checkpoint. Outcome: the index's first build, a sync and orphans finish, with
// no sync error and no unknown subtree; the live checkpoint's files stay referenced; the Go heap in
// use after each stays bounded (the sync's walk lists only `_metadata`: it keeps no per-entry
// state; orphans walks every entry and reports what it finds). Figures are logged (docs/SEMANTICS.md,
// "Pathological store content").
func TestMillionEntryFolder(t *testing.T) {
	if testing.Short() {
		t.Skip("a million files: skipped with -short")
	}
	n := 1_000_000
	if s := os.Getenv("CKGUARD_BIG_FOLDER"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(tr.Root, "scratch", "big")
	if err := os.MkdirAll(big, 0o755); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	dfd, err := unix.Open(big, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	old := unix.NsecToTimespec(testNow.Add(-10 * 24 * time.Hour).UnixNano())
	for i := range n {
		name := fmt.Sprintf("f%07d", i)
		fd, err := unix.Openat(dfd, name, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		if i < 10 {
			unix.UtimesNanoAt(dfd, name, []unix.Timespec{old, old}, 0)
		}
	}
	unix.Close(dfd)
	t.Logf("made %d files in one folder in %s", n, time.Since(t0).Round(time.Millisecond))

	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	base := heap()
	ix := openIndex(t, t.TempDir(), localStore(t, tr.Root))
	defer ix.Close()
	var peak runtime.MemStats
	measure := func(what string, f func() error) {
		t.Helper()
		stop := make(chan struct{})
		done := make(chan uint64)
		go func() { // sampled peak of the heap in use while f runs
			var max uint64
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					done <- max
					return
				case <-tick.C:
					runtime.ReadMemStats(&peak)
					max = maxU(max, peak.HeapInuse)
				}
			}
		}()
		t0 := time.Now()
		err := f()
		took := time.Since(t0)
		close(stop)
		max := <-done
		if err != nil {
			t.Fatalf("%s with a %d-entry folder: %v", what, n, err)
		}
		t.Logf("%s with a %d-entry folder: %s, heap in use peak %.1f MiB above the start, after %.1f MiB", what, n,
			took.Round(time.Millisecond), float64(int64(max)-int64(base))/(1<<20), float64(int64(heap())-int64(base))/(1<<20))
	}
	measure("first build", func() error { return ix.Sync(ctx) })
	measure("sync", func() error { return ix.Sync(ctx) })
	var orphans int
	measure("orphans", func() error {
		or, err := ix.Orphans(ctx, 7*24*time.Hour)
		if err == nil {
			orphans = len(or.Files)
		}
		return err
	})
	st, err := ix.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.SyncError != "" || len(st.UnknownSubtrees) != 0 {
		t.Errorf("stats: sync error %q, unknown %+v", st.SyncError, st.UnknownSubtrees)
	}
	if orphans < 10 {
		t.Errorf("orphans found %d files, want at least the 10 backdated ones", orphans)
	}
	for _, c := range tr.Live {
		if d := ix.Decide(ctx, c.Refs[0], verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonReferenced {
			t.Errorf("a live checkpoint's file beside the big folder: %+v", d)
		}
	}
	if d := ix.Decide(ctx, "scratch/big/f0000000", verdict.OpUnlink); !d.Allow {
		t.Errorf("an old file of the big folder: %+v", d)
	}
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
