//go:build hdfs

package hdfsguardd_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsguardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex"
)

// TestQuarantineCostOnHDFS (a measurement, CKGUARD_MEASURE_HDFS_QUARANTINE=N files): rm -rf of N
// unreferenced files through the mount, without a quarantine (a delete per file) and with one (a record
// file and a rename per file), on the same cluster; it logs both times and their ratio.
func TestQuarantineCostOnHDFS(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("CKGUARD_MEASURE_HDFS_QUARANTINE"))
	if n <= 0 {
		t.Skip("a measurement: set CKGUARD_MEASURE_HDFS_QUARANTINE to the number of files")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := minidfs.Start(t, minidfs.Options{})
	old := time.Now().Add(-30 * 24 * time.Hour)
	local := t.TempDir()
	for i := range n {
		d := filepath.Join(local, "store", "job", fmt.Sprintf("d%02d", i%10))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(d, fmt.Sprintf("f%05d", i))
		if err := os.WriteFile(f, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, q time.Duration) time.Duration {
		storeDir := c.Root() + "/" + name
		c.Upload(t, filepath.Join(local, "store"), storeDir)
		dir := t.TempDir()
		mnt := filepath.Join(dir, "mnt")
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		stop := guarddtest.Start(t, guardd.Config{StoreDir: c.URI(storeDir), IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
			Policy: refindex.DefaultPolicy(), Quarantine: q},
			func(ctx context.Context, c guardd.Config) error { return hdfsguardd.Run(ctx, c, opts) })
		defer stop()
		start := time.Now()
		if out, err := exec.Command("rm", "-rf", filepath.Join(mnt, "job")).CombinedOutput(); err != nil {
			t.Fatalf("rm -rf (%s): %v\n%s", name, err, out)
		}
		return time.Since(start)
	}
	off := run("off", 0)
	on := run("on", 24*time.Hour)
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("rm -rf of %d files through the HDFS mount: without quarantine %v (%.0f files/s), with %v (%.0f files/s), ratio %.2f; loadavg %s",
		n, off.Round(time.Millisecond), float64(n)/off.Seconds(), on.Round(time.Millisecond), float64(n)/on.Seconds(), on.Seconds()/off.Seconds(), load)
}
