//go:build hdfs

package hdfsguardd_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfscli"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsguardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
)

var opts = hdfscli.Options{Timeout: 20 * time.Second}

// incident uploads the second incident's tree (job_7d83f2a1, job_d29e1b63), encoded with the real
// metadata encoder and with Flink's hdfs:// URIs, to a fresh directory of the cluster.
func incident(t *testing.T, c *minidfs.Cluster) (*treegen.Tree, string) {
	t.Helper()
	storeDir := c.Root() + "/store"
	tr, err := treegen.IncidentTwo(t.TempDir(), time.Now(), treegen.Options{URIPrefix: c.URI(storeDir)})
	if err != nil {
		t.Fatal(err)
	}
	c.Upload(t, tr.Root, storeDir)
	return tr, c.URI(storeDir)
}

func hdfsFiles(t *testing.T, uri string) []string {
	t.Helper()
	return hdfsFilesWith(t, uri, opts)
}

// hdfsFilesWith lists the files of the store at uri, connecting with o.
func hdfsFilesWith(t *testing.T, uri string, o hdfscli.Options) []string {
	t.Helper()
	st, err := hdfscli.OpenStore(context.Background(), uri, o)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if err := st.Walk(context.Background(), "", func(oi store.ObjectInfo) error {
		if !oi.IsDir {
			out = append(out, oi.Path)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func under(keys []string, dir string) []string {
	var out []string
	for _, k := range keys {
		if strings.HasPrefix(k, dir+"/") {
			out = append(out, k)
		}
	}
	return out
}

// guardMount starts a guard daemon with cfg (its StoreDir, Policy and options) and client options o,
// its index in dir/index and its mountpoint dir/mnt, made here, and returns the mountpoint and the
// daemon's stop (also run at cleanup).
func guardMount(t *testing.T, dir string, cfg guardd.Config, o hdfscli.Options) (mnt string, stop func()) {
	t.Helper()
	mnt = filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.IndexDir, cfg.Mountpoint = filepath.Join(dir, "index"), mnt
	return mnt, guarddtest.Start(t, cfg, func(ctx context.Context, c guardd.Config) error {
		return hdfsguardd.Run(ctx, c, o)
	})
}

// cleanUntilStable runs cleanup until the files of the store at uri stop changing, at most four times:
// a checkpoint retired by one pass frees its files for the next, as Survivors assumes.
func cleanUntilStable(t *testing.T, uri string, cleanup func()) {
	t.Helper()
	prev := ""
	for range 4 {
		cleanup()
		now := strings.Join(hdfsFiles(t, uri), ",")
		if now == prev {
			return
		}
		prev = now
	}
}

// checkSurvivors fails the test unless the files left in tr.Purge, among after, are exactly those a
// cleanup of it under the default policy keeps.
func checkSurvivors(t *testing.T, tr *treegen.Tree, after []string) {
	t.Helper()
	want := tr.Survivors(tr.Purge, treegen.DefaultPolicy)
	if got := under(after, tr.Purge); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("left in %s:\n%s\nwant:\n%s", tr.Purge, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestIncidentCleanupsOnHDFS: rm -rf of the old job, find -mtime +7 -delete and shutil.rmtree through
// the mount of a real HDFS leave exactly the files the guard must keep; the same cleanup with
// `hdfs dfs -rm -r -skipTrash` beside the mount turns verify red.
func TestIncidentCleanupsOnHDFS(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	cleanups := []struct {
		name string
		cmd  func(mnt, purge string) *exec.Cmd
	}{
		{"rm -rf", func(m, p string) *exec.Cmd { return exec.Command("rm", "-rf", filepath.Join(m, p)) }},
		{"find -mtime +7 -delete", func(m, p string) *exec.Cmd {
			return exec.Command("find", filepath.Join(m, p), "-mindepth", "1", "-mtime", "+7", "-delete")
		}},
		{"shutil.rmtree", func(m, p string) *exec.Cmd {
			return exec.Command("/usr/bin/python3", "-c", `import shutil, sys
shutil.rmtree(sys.argv[1], ignore_errors=True)`, filepath.Join(m, p))
		}},
	}
	for _, tc := range cleanups {
		t.Run(tc.name, func(t *testing.T) {
			c := minidfs.Start(t, minidfs.Options{})
			tr, uri := incident(t, c)
			before := hdfsFiles(t, uri)
			dir := t.TempDir()
			mnt, stop := guardMount(t, dir, guardd.Config{StoreDir: uri, Policy: refindex.DefaultPolicy()}, opts)
			cleanUntilStable(t, uri, func() { _ = tc.cmd(mnt, tr.Purge).Run() })
			stop()
			after := hdfsFiles(t, uri)
			checkSurvivors(t, tr, after)
			var outside, outsideBefore []string
			for _, k := range after {
				if !strings.HasPrefix(k, tr.Purge+"/") {
					outside = append(outside, k)
				}
			}
			for _, k := range before {
				if !strings.HasPrefix(k, tr.Purge+"/") {
					outsideBefore = append(outsideBefore, k)
				}
			}
			if strings.Join(outside, ",") != strings.Join(outsideBefore, ",") {
				t.Errorf("files outside %s changed", tr.Purge)
			}
			if len(under(after, tr.Purge)) == len(under(before, tr.Purge)) {
				t.Errorf("the cleanup deleted nothing")
			}
			verifyOK(t, uri, dir, true)
		})
	}
	t.Run("hdfs dfs -rm -r -skipTrash", func(t *testing.T) {
		c := minidfs.Start(t, minidfs.Options{})
		tr, uri := incident(t, c)
		verifyOK(t, uri, t.TempDir(), true)
		if _, err := c.DFS(t, "-rm", "-r", "-skipTrash", uri+"/"+tr.Purge); err != nil {
			t.Fatal(err)
		}
		verifyOK(t, uri, t.TempDir(), false)
	})
}

// verifyOK syncs an index of the HDFS store and checks every live checkpoint's files (ckguard verify).
func verifyOK(t *testing.T, uri, dir string, want bool) {
	t.Helper()
	st, err := hdfscli.OpenStore(context.Background(), uri, opts)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := refindex.Open(filepath.Join(dir, "verify-index"), st, refindex.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if err := ix.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := ix.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.OK != want {
		t.Errorf("verify OK = %v, want %v (broken %d, untrusted %q)", res.OK, want, len(res.Broken), res.Untrusted)
	}
}

// TestNameNodeFaultsDuringCleanup: safe mode and a stopped NameNode while `rm -rf` runs through the
// mount delete nothing and say Input/output error; after the NameNode is back, a remount on the same
// index finishes the same cleanup with exactly the expected files, verify green.
func TestNameNodeFaultsDuringCleanup(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := minidfs.Start(t, minidfs.Options{Exclusive: true})
	tr, uri := incident(t, c)
	before := hdfsFiles(t, uri)
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := guardd.Config{StoreDir: uri, IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt, Policy: refindex.DefaultPolicy()}
	run := func(ctx context.Context, c guardd.Config) error { return hdfsguardd.Run(ctx, c, opts) }
	stop := guarddtest.Start(t, cfg, run)
	if _, err := os.ReadDir(filepath.Join(mnt, tr.Purge)); err != nil {
		t.Fatal(err)
	}
	rm := func() string {
		out, err := exec.Command("rm", "-rf", filepath.Join(mnt, tr.Purge)).CombinedOutput()
		if err == nil {
			t.Errorf("rm -rf succeeded")
		}
		return string(out)
	}

	c.SafeMode(t, true)
	if out := rm(); !strings.Contains(out, "Input/output error") {
		t.Errorf("rm -rf in safe mode: %s", out)
	}
	c.SafeMode(t, false)
	if got := hdfsFiles(t, uri); strings.Join(got, ",") != strings.Join(before, ",") {
		t.Errorf("safe mode: files changed")
	}

	c.StopNameNode(t)
	// rm may report its fallback instead of the mount's answer: once a stat through the mount fails
	// (EIO), GNU rm takes the folder for a file and unlinks it, which the kernel answers from its own
	// cache with EISDIR. What the mount answers is checked directly below.
	if out := rm(); !strings.Contains(out, "Input/output error") && !strings.Contains(out, "Transport endpoint") && !strings.Contains(out, "Is a directory") {
		t.Errorf("rm -rf with the NameNode stopped: %s", out)
	}
	if _, err := os.ReadDir(filepath.Join(mnt, tr.Purge)); !errors.Is(err, syscall.EIO) {
		t.Errorf("listing through the mount with the NameNode stopped: %v, want EIO", err)
	}
	stop()
	c.RestartNameNode(t)
	after := hdfsFiles(t, uri)
	for _, k := range tr.Survivors(tr.Purge, treegen.DefaultPolicy) {
		found := false
		for _, a := range after {
			found = found || a == k
		}
		if !found {
			t.Errorf("referenced %s deleted while the NameNode was stopped", k)
		}
	}

	stop = guarddtest.Start(t, cfg, run)
	cleanUntilStable(t, uri, func() { _ = exec.Command("rm", "-rf", filepath.Join(mnt, tr.Purge)).Run() })
	stop()
	checkSurvivors(t, tr, hdfsFiles(t, uri)) // after the remount
	verifyOK(t, uri, dir, true)
}
