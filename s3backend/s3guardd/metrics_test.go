package s3guardd_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3guardd"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestMetricsOnS3Mount: the S3 daemon's metrics endpoint carries the index lag, refreshed after every
// periodic sync (it stayed at -1 on S3 mounts, so the lag alert never fired where the lag happens), and
// the delete queue's gauges and counters, which follow a deletion made through the mount.
func TestMetricsOnS3Mount(t *testing.T) {
	s3server.RequireFUSE(t)
	ctx := context.Background()
	srv := s3server.Start(t) // versitygw: it honours If-Match, so the mount queues its deletions
	cfg := srv.Config()
	bucket := srv.Bucket(t, "metrics")
	c, err := s3client.New(ctx, cfg, s3client.Location{Bucket: bucket, Prefix: "flink/"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "job/shared/old.sst", strings.NewReader("old"), 3, s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	pol := refindex.DefaultPolicy()
	pol.Grace = time.Millisecond // old.sst, unreferenced, may go once the mount is up
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	var addr string
	guarddtest.Start(t, guardd.Config{StoreDir: "s3://" + bucket + "/flink", IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
		Policy: pol, MetricsAddr: "127.0.0.1:0", SyncInterval: 200 * time.Millisecond,
		Ready: func(m *guardd.Mounted) { addr = m.MetricsAddr }}, func(ctx context.Context, c guardd.Config) error {
		return s3guardd.Run(ctx, c, cfg, func(o *s3mount.Options) { o.SpoolDir = filepath.Join(dir, "spool") })
	})
	// Several sync intervals after the mount: the lag is set and stays within a few intervals, so it is
	// refreshed by the periodic syncs, not only at start.
	time.Sleep(5 * time.Second)
	m := guarddtest.Metrics(t, addr)
	lag, ok := m["ckguard_index_lag_seconds"]
	if !ok || lag < 0 || lag > 4 {
		t.Errorf("ckguard_index_lag_seconds = %v (present %v) 5 s after the mount with a 200 ms sync interval, want 0 ≤ lag ≤ 4", lag, ok)
	}
	for _, name := range []string{"ckguard_delete_queue_length", "ckguard_delete_queue_oldest_seconds", "ckguard_delete_queue_applied_total"} {
		if _, ok := m[name]; !ok {
			t.Errorf("no %s on the S3 mount's metrics endpoint", name)
		}
	}
	if out, err := exec.Command("rm", filepath.Join(mnt, "job/shared/old.sst")).CombinedOutput(); err != nil {
		t.Fatalf("rm of an old unreferenced object: %v %s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := guarddtest.Metrics(t, addr)
		if m["ckguard_delete_queue_applied_total"] == 1 && m["ckguard_delete_queue_length"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the rm: delete queue applied %v, length %v; want 1 and 0", m["ckguard_delete_queue_applied_total"], m["ckguard_delete_queue_length"])
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := c.Head(ctx, "job/shared/old.sst"); err == nil {
		t.Errorf("old.sst still in the bucket after the queue applied its deletion")
	}
}
