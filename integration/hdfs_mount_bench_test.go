//go:build hdfs

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfscli"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsguardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
)

// The Go columns of TestHDFSBench: the raw Go client listing the same tree (serially, as `find`
// through the mount walks it, and with hdfsstore's 8 concurrent listings), `find -type f` through the
// ckguard mount, and `rm -rf` of delN unreferenced files through the mount.
func init() { hdfsBenchColumns = append(hdfsBenchColumns, benchGoColumns) }

func benchGoColumns(t *testing.T, b *hdfsBench) {
	ctx := context.Background()
	opts := hdfscli.Options{Timeout: time.Minute}
	cl, res, err := hdfscli.Dial(ctx, b.c.URI(b.listDir), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// Raw: one recursive listing, one directory at a time (what a find through FUSE does).
	n := 0
	var walk func(dir string)
	walk = func(dir string) {
		var sub []string
		if err := cl.List(ctx, dir, func(page []hdfsclient.FileInfo) error {
			for _, fi := range page {
				if fi.IsDir {
					sub = append(sub, dir+"/"+fi.Name)
				} else {
					n++
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, d := range sub {
			walk(d)
		}
	}
	raw := func() time.Duration {
		n = 0
		start := time.Now()
		walk(b.listDir)
		if n != b.n {
			t.Errorf("raw listing saw %d files, want %d", n, b.n)
		}
		return time.Since(start)
	}
	start := time.Now()
	st := hdfsstore.New(cl, res, hdfsstore.Options{})
	m := 0
	if err := st.Walk(ctx, "", func(oi store.ObjectInfo) error {
		if !oi.IsDir {
			m++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.list = append(b.list, hdfsBenchFigure{"Go client, hdfsstore walk, 8 listings at once (raw)", time.Since(start)})

	// The mount over the cluster's test directory: list/ for find, del-ckguard/ for rm -rf.
	delDir := b.c.Root() + "/del-ckguard"
	perDir := min(1000, b.delN)
	b.java(t, "mkfiles", delDir, strconv.Itoa((b.delN+perDir-1)/perDir), strconv.Itoa(perDir), "8")
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	// The benchmark's files were made just now: with the default grace (1h) every one is protected as
	// possibly part of a checkpoint in flight. What is measured is the per-file decision, so no grace.
	pol := refindex.DefaultPolicy()
	pol.Grace = time.Millisecond
	stop := guarddtest.Start(t, guardd.Config{StoreDir: b.c.URI(b.c.Root()), IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
		Policy: pol}, func(ctx context.Context, c guardd.Config) error { return hdfsguardd.Run(ctx, c, opts) })
	defer stop()
	// The raw listing and find through the mount alternate, BENCH_HDFS_ROUNDS times (default 3), so
	// both see the same machine; the medians are printed (a loaded machine's figures scatter widely).
	rounds := max(1, envInt("BENCH_HDFS_ROUNDS", 3))
	var raws, finds []time.Duration
	for i := range rounds {
		if i > 0 {
			time.Sleep(1100 * time.Millisecond) // past the kernel's 1 s entry and attribute caches
		}
		raws = append(raws, raw())
		start := time.Now()
		out, err := exec.Command("find", filepath.Join(mnt, filepath.Base(b.listDir)), "-type", "f").Output()
		if err != nil {
			t.Fatal(err)
		}
		finds = append(finds, time.Since(start))
		if got := strings.Count(string(out), "\n"); got != b.n {
			t.Errorf("find through the mount saw %d files, want %d", got, b.n)
		}
	}
	r, f := median(raws), median(finds)
	b.list = append(b.list, hdfsBenchFigure{fmt.Sprintf("Go client, serial recursive listing (raw, median of %d)", rounds), r},
		hdfsBenchFigure{"ckguard mount: find -type f, first run", finds[0]},
		hdfsBenchFigure{fmt.Sprintf("ckguard mount: find -type f (median of %d)", rounds), f})
	t.Logf("find through the mount / raw Go listing: %.2f (medians; rounds: raw %v, find %v)", f.Seconds()/r.Seconds(), raws, finds)
	start = time.Now()
	if out, err := exec.Command("rm", "-rf", filepath.Join(mnt, "del-ckguard")).CombinedOutput(); err != nil {
		t.Fatalf("rm -rf of unreferenced files through the mount: %v %s", err, out)
	}
	b.del = append(b.del, hdfsBenchFigure{"ckguard mount: rm -rf (decided per file)", time.Since(start)})
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
