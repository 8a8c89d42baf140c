//go:build hdfs

package hdfsguardd_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfscli"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsguardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex"
)

// TestMetricsLagOnHDFS: the HDFS daemon's metrics endpoint carries the index lag, refreshed after every
// periodic sync (the index gauges were left unset where the byte gauges are off, so the lag alert could
// not fire), and the live checkpoint count.
func TestMetricsLagOnHDFS(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := minidfs.Start(t, minidfs.Options{})
	storeDir, _, dir, mnt := emptyStore(t, c, "metrics")
	var addr string
	guarddtest.Start(t, guardd.Config{StoreDir: c.URI(storeDir), IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
		Policy: refindex.DefaultPolicy(), MetricsAddr: "127.0.0.1:0", SyncInterval: 200 * time.Millisecond,
		Ready: func(m *guardd.Mounted) { addr = m.MetricsAddr }}, func(ctx context.Context, c guardd.Config) error {
		return hdfsguardd.Run(ctx, c, opts)
	})
	// Several sync intervals after the mount: a lag set only at start would have grown past the bound.
	time.Sleep(5 * time.Second)
	got := guarddtest.Metrics(t, addr)
	if lag, ok := got["ckguard_index_lag_seconds"]; !ok || lag < 0 || lag > 4 {
		t.Errorf("ckguard_index_lag_seconds = %v (present %v) 5 s after the mount with a 200 ms sync interval, want 0 ≤ lag ≤ 4", lag, ok)
	}
	if _, ok := got["ckguard_live_checkpoints"]; !ok {
		t.Errorf("no ckguard_live_checkpoints on the HDFS mount's metrics endpoint")
	}
}

// emptyStore makes the store folder name (holding an empty job folder j) on the cluster, a client of
// it closed at the end of the test, and a mountpoint in a fresh temporary folder dir.
func emptyStore(t *testing.T, c *minidfs.Cluster, name string) (storeDir string, cl *hdfsclient.Client, dir, mnt string) {
	t.Helper()
	ctx := context.Background()
	storeDir = c.Root() + "/" + name
	cl, _, err := hdfscli.Dial(ctx, c.URI(storeDir), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if err := cl.MkdirAll(ctx, storeDir+"/j", 0o755); err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	mnt = filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	return storeDir, cl, dir, mnt
}
