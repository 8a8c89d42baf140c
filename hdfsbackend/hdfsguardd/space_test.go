//go:build hdfs

package hdfsguardd_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfscli"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsguardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/internal/bytesize"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestStoreSpaceAndMinFreeOnHDFS: an HDFS mount exports the store's room (the cluster's free space, or
// the store root's space quota: hdfsclient TestSpaceOnNameNode) as ckguard_store_size_bytes /
// ckguard_store_free_bytes, and --quarantine-min-free applies to it: with a bound the store can never
// meet (100 % free), every staged deletion is purged before its 24 h TTL, oldest first, each audited
// with cause space.
func TestStoreSpaceAndMinFreeOnHDFS(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	ctx := context.Background()
	c := minidfs.Start(t, minidfs.Options{})
	_, uri := incident(t, c)
	before := storeContents(t, uri)
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	pol := guarddtest.ReferencesOnly()
	var ctlSock, auditLog, metricsAddr string
	guarddtest.Start(t, guardd.Config{StoreDir: uri, IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt, Policy: pol,
		SyncInterval: 200 * time.Millisecond, Quarantine: 24 * time.Hour, MetricsAddr: "127.0.0.1:0",
		QuarantineBound: quarantine.Bound{MinFree: bytesize.Bound{Percent: 100}},
		Ready:           func(m *guardd.Mounted) { ctlSock, auditLog, metricsAddr = m.ControlSocket, m.AuditLog, m.MetricsAddr }},
		func(ctx context.Context, c guardd.Config) error { return hdfsguardd.Run(ctx, c, opts) })

	// The live job first: its checkpoints retire, so nothing protects the old job's SSTs any more.
	for _, d := range []string{"checkpoints/" + treegen.IncidentTwoNewJob, "checkpoints"} {
		if out, err := exec.Command("rm", "-rf", filepath.Join(mnt, d)).CombinedOutput(); err != nil {
			t.Fatalf("rm -rf %s through the mount: %v\n%s", d, err, out)
		}
	}
	if left := storeContents(t, uri); len(left) != 0 {
		t.Fatalf("the wrong policy should have let rm take everything; left %d files", len(left))
	}
	q, err := control.DialQuarantine(guardd.QuarantineSocket(ctlSock))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := q.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Entries) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d entries still in quarantine a minute after the deletions, under a --quarantine-min-free the store cannot meet", len(l.Entries))
		}
		time.Sleep(200 * time.Millisecond)
	}
	recs, err := audit.ReadFile(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	purged := map[string]bool{}
	for _, r := range recs {
		if r.Op != "quarantine-purge" {
			continue
		}
		if r.Reason != "quarantine-purge-space" {
			t.Errorf("purge of %s audited as %q, want quarantine-purge-space (24 h TTL, nothing is past it)", r.Path, r.Reason)
		}
		purged[r.Path] = true
	}
	for k := range before {
		if !purged[k] {
			t.Errorf("no audit record of the early purge of %s", k)
		}
	}

	cl, _, err := hdfscli.Dial(ctx, uri, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	loc, err := hdfsclient.ParseLocation(uri)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := cl.Space(ctx, loc.Path)
	if err != nil {
		t.Fatal(err)
	}
	got := guarddtest.Metrics(t, metricsAddr)
	size, free := got["ckguard_store_size_bytes"], got["ckguard_store_free_bytes"]
	if size <= 0 || free <= 0 || free > size {
		t.Fatalf("ckguard_store_size_bytes %v, ckguard_store_free_bytes %v: want 0 < free <= size", size, free)
	}
	if d := size/float64(direct.Size) - 1; d > 0.01 || d < -0.01 {
		t.Errorf("ckguard_store_size_bytes %v, the NameNode reports %d for %s", size, direct.Size, loc.Path)
	}
}
