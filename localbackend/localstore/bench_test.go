package localstore_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/store"
)

// TestWalkMillionEntries walks one folder of CKGUARD_WALK_ENTRIES entries (1,000,000 for the figures in
// the report; skipped when unset, it takes a minute to create them) and reports the walk's time, the
// bytes it allocated and the peak of the live heap sampled during the walk: the folder is read in
// getdents batches, so the live heap must stay far below one entry's worth per file.
func TestWalkMillionEntries(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("CKGUARD_WALK_ENTRIES"))
	if n <= 0 {
		t.Skip("CKGUARD_WALK_ENTRIES not set")
	}
	dir := t.TempDir()
	if err := os.Mkdir(dir+"/big", 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir+"/big", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for i := 0; i < n; i++ {
		f, err := unix.Openat(fd, "sst-"+strconv.Itoa(i)+"-0123456789abcdef", unix.O_CREAT|unix.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(f)
	}
	unix.Close(fd)
	t.Logf("created %d files in %s", n, time.Since(t0).Round(time.Millisecond))
	st, err := localstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"Walk", "ListMetadata"} {
		runtime.GC()
		var before, ms runtime.MemStats
		runtime.ReadMemStats(&before)
		peak := before.HeapAlloc
		seen := 0
		fn := func(store.ObjectInfo) error {
			if seen++; seen%50_000 == 0 {
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapAlloc)
			}
			return nil
		}
		t1 := time.Now()
		if mode == "Walk" {
			err = st.Walk(context.Background(), "", fn)
		} else {
			err = st.ListMetadata(context.Background(), fn)
		}
		took := time.Since(t1)
		if err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&ms)
		t.Logf("%s of %d entries: %s, %d entries reported, allocated %.1f MiB, live heap peak +%.1f MiB over the start",
			mode, n, took.Round(time.Millisecond), seen, float64(ms.TotalAlloc-before.TotalAlloc)/(1<<20), float64(peak-before.HeapAlloc)/(1<<20))
		if mode == "Walk" && seen != n+1 {
			t.Errorf("Walk reported %d entries, want %d", seen, n+1)
		}
		if d := float64(peak-before.HeapAlloc) / float64(n); d > 64 {
			t.Errorf("live heap grew by %.0f bytes per entry during the walk: the folder is not read in batches", d)
		}
	}
}
