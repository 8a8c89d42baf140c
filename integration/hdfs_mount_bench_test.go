//go:build hdfs

package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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
	start := time.Now()
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
	walk(b.listDir)
	b.list = append(b.list, hdfsBenchFigure{"Go client, serial recursive listing (raw)", time.Since(start)})
	if n != b.n {
		t.Errorf("raw listing saw %d files, want %d", n, b.n)
	}
	start = time.Now()
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
	start = time.Now()
	out, err := exec.Command("find", filepath.Join(mnt, filepath.Base(b.listDir)), "-type", "f").Output()
	if err != nil {
		t.Fatal(err)
	}
	b.list = append(b.list, hdfsBenchFigure{"ckguard mount: find -type f", time.Since(start)})
	if got := strings.Count(string(out), "\n"); got != b.n {
		t.Errorf("find through the mount saw %d files, want %d", got, b.n)
	}
	start = time.Now()
	if out, err := exec.Command("rm", "-rf", filepath.Join(mnt, "del-ckguard")).CombinedOutput(); err != nil {
		t.Fatalf("rm -rf of unreferenced files through the mount: %v %s", err, out)
	}
	b.del = append(b.del, hdfsBenchFigure{"ckguard mount: rm -rf (decided per file)", time.Since(start)})
}
