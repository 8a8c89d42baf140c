package s3mount_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3mount"
)

// TestFindHeapReleased measures the mount's live heap after `find -type f` over many objects, again once
// the FORGETs of the inodes the mount pruned have arrived (the kernel keeps the inodes readdirplus made
// until memory pressure, whatever their entry timeout, unless told to forget them), then after the kernel
// is made to forget every inode (drop_caches) and the attribute cache's sweep. Without drop_caches the
// heap must stay within the bounds (MaxInodes file inodes, DefaultCacheEntries cache entries), whatever
// the number of objects; after it, no state per visited object may remain. It changes a system-wide
// setting (drop_caches), so it runs only with CKGUARD_MEASURE_FIND_HEAP=<objects> (e.g. 100000).
func TestFindHeapReleased(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("CKGUARD_MEASURE_FIND_HEAP"))
	if n <= 0 {
		t.Skip("measurement; set CKGUARD_MEASURE_FIND_HEAP=<objects>")
	}
	cache := s3client.NewAttrCache(s3mount.DefaultCacheEntries)
	e := setup(t, newChecker(), func(o *s3mount.Options) { o.Attrs = cache })
	dir := filepath.Join(e.srv.DataDir, "ckpt", "flink", "job", "shared")
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i/1000))
		if i%1000 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("sst-%07d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	h0 := heap()
	t0 := time.Now()
	out, err := exec.Command("find", e.mnt, "-type", "f").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(out), "\n"); got != n {
		t.Fatalf("find listed %d files, want %d", got, n)
	}
	took := time.Since(t0)
	h1 := heap()
	time.Sleep(2 * time.Second) // FORGETs arrive asynchronously
	h1s := heap()
	t.Logf("after find and 2 s without drop_caches: %d MiB (%.0f B/object), %d file inodes held, %d cache entries",
		h1s>>20, float64(int64(h1s)-int64(h0))/float64(n), e.m.LiveFileInodes(), cache.Len())
	// About 1 KiB per held inode (go-fuse's node and the mount's) and 300 B per cache entry.
	if budget := uint64(s3mount.DefaultMaxInodes)<<10 + uint64(s3mount.DefaultCacheEntries)*300; h1s > h0+budget {
		t.Errorf("after find over %d objects the live heap grew by %d MiB, above the bounds' %d MiB", n, (h1s-h0)>>20, budget>>20)
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
		t.Skipf("cannot make the kernel forget inodes: %v", err)
	}
	time.Sleep(2 * time.Second) // FORGETs arrive asynchronously
	h2 := heap()
	cache.Sweep(time.Now().Add(time.Hour)) // what the cache's timer does 15 min later
	h3 := heap()
	per := func(h uint64) float64 { return float64(int64(h)-int64(h0)) / float64(n) }
	t.Logf("find -type f over %d objects took %s; live heap: before %d MiB, after find %d MiB (%.0f B/object), after FORGET %d MiB (%.0f B/object), after the cache sweep %d MiB (%.0f B/object); cache entries %d",
		n, took.Round(time.Millisecond), h0>>20, h1>>20, per(h1), h2>>20, per(h2), h3>>20, per(h3), cache.Len())
	_ = context.Background
	if per(h3) > 100 {
		t.Errorf("the mount keeps %.0f B of live heap per visited object after FORGET and the cache sweep", per(h3))
	}
}
