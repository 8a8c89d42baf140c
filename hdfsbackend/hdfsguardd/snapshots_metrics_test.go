//go:build hdfs

package hdfsguardd_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsguardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfssnap"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex"
)

// TestHDFSSnapshotsMetricsAndAudit: every snapshot the --hold mount takes or deletes, and every one it
// needed and could not take, is in the metrics and the audit log. The mount runs as the store root's
// owner (not the superuser; an administrator made the root snapshottable): its first snapshot is
// counted (ckguard_hold_snapshots 1, created_total 1) and audited; then the superuser gives the root to
// another user, so a new checkpoint finds createSnapshot refused: failures_total{op="create"} counts
// it, ckguard_hold_snapshot_behind is 1 and a `failed` record names the refusal; once the root is the
// mount's user's again, the next sync's pass takes the snapshot (behind 0) and, two loss-check passes
// later, deletes the older one (deleted_total, a `deleted` record, ckguard_hold_snapshots back to 1).
func TestHDFSSnapshotsMetricsAndAudit(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := minidfs.Start(t, minidfs.Options{})
	tr, uri := incident(t, c)
	storeDir := c.Root() + "/store"
	su, _ := c.DialSuperuser(t, storeDir)
	ctx := context.Background()
	if err := su.AllowSnapshots(ctx, storeDir); err != nil {
		t.Fatal(err)
	}
	chown := func(user string) {
		t.Helper()
		if out, err := c.DFS(t, "-chown", user, storeDir); err != nil {
			t.Fatalf("hdfs dfs -chown %s %s: %v %s", user, storeDir, err, out)
		}
	}
	chown(minidfs.Other)
	t.Setenv("HADOOP_USER_NAME", minidfs.Other)

	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(dir, "index")
	var addr string
	guarddtest.Start(t, guardd.Config{StoreDir: uri, IndexDir: index, Mountpoint: mnt, Policy: refindex.DefaultPolicy(),
		Hold: "required", SyncInterval: time.Second, MetricsAddr: "127.0.0.1:0",
		Ready: func(m *guardd.Mounted) { addr = m.MetricsAddr }}, func(ctx context.Context, c guardd.Config) error {
		return hdfsguardd.Run(ctx, c, opts)
	})
	metric := func(name string) float64 {
		t.Helper()
		v, ok := guarddtest.Metrics(t, addr)[name]
		if !ok {
			t.Fatalf("metric %s not exported", name)
		}
		return v
	}
	auditLog := filepath.Join(index, "audit.jsonl")
	records := func(decision string) []audit.Record {
		t.Helper()
		recs, err := audit.ReadFile(auditLog)
		if err != nil {
			t.Fatal(err)
		}
		var out []audit.Record
		for _, r := range recs {
			if r.Op == hdfssnap.AuditOp && r.Decision == decision {
				out = append(out, r)
			}
		}
		return out
	}

	waitFor(t, "a first ckguard snapshot", 60*time.Second, func() bool { return len(ourSnapshots(t, su, storeDir)) == 1 })
	first := ourSnapshots(t, su, storeDir)[0]
	waitFor(t, "the first snapshot in the metrics", 30*time.Second, func() bool {
		return metric("ckguard_hold_snapshots_created_total") == 1 && metric("ckguard_hold_snapshots") == 1
	})
	if v := metric("ckguard_hold_active"); v != 1 {
		t.Errorf("ckguard_hold_active = %v with snapshots on, want 1", v)
	}
	if v := metric("ckguard_hold_snapshot_behind"); v != 0 {
		t.Errorf("ckguard_hold_snapshot_behind = %v after the first snapshot, want 0", v)
	}
	if rs := records(hdfssnap.AuditCreated); len(rs) != 1 || rs[0].Path != ".snapshot/"+first {
		t.Errorf("audit records of the first snapshot %s: %+v", first, rs)
	}

	// The root given to another user: the next snapshot, needed for a new checkpoint, is refused.
	chown(minidfs.User)
	var meta string
	for m := range tr.Live {
		meta = m
		break
	}
	copyCheckpoint(t, su, storeDir, tr, meta, "chk-999998")
	failures := `ckguard_hold_snapshot_failures_total{op="create"}`
	waitFor(t, "the refused snapshot counted", 60*time.Second, func() bool { return metric(failures) >= 1 })
	if v := metric("ckguard_hold_snapshot_behind"); v != 1 {
		t.Errorf("ckguard_hold_snapshot_behind = %v while the new checkpoint is in no snapshot, want 1", v)
	}
	if s := ourSnapshots(t, su, storeDir); len(s) != 1 {
		t.Fatalf("snapshots %v: a snapshot was taken by a user who does not own the root", s)
	}
	failed := records(hdfssnap.AuditFailed)
	if len(failed) == 0 || failed[0].Reason != "create-failed" || !strings.Contains(failed[0].Message, "createSnapshot") {
		t.Fatalf("audit records of the refused snapshot: %+v", failed)
	}
	t.Logf("refused snapshot audited: %s", failed[0].Message)

	// The root back: the next pass takes the snapshot it owes, then retires the first.
	chown(minidfs.Other)
	waitFor(t, "the owed snapshot taken", 60*time.Second, func() bool { return metric("ckguard_hold_snapshots_created_total") == 2 })
	if v := metric("ckguard_hold_snapshot_behind"); v != 0 {
		t.Errorf("ckguard_hold_snapshot_behind = %v after the owed snapshot, want 0", v)
	}
	waitFor(t, "the first snapshot deleted", 60*time.Second, func() bool { return metric("ckguard_hold_snapshots_deleted_total") == 1 })
	if v := metric("ckguard_hold_snapshots"); v != 1 {
		t.Errorf("ckguard_hold_snapshots = %v after the first was deleted, want 1", v)
	}
	if s := ourSnapshots(t, su, storeDir); len(s) != 1 || s[0] == first {
		t.Errorf("snapshots %v, want the newest only", s)
	}
	if rs := records(hdfssnap.AuditDeleted); len(rs) != 1 || rs[0].Path != ".snapshot/"+first {
		t.Errorf("audit records of the deletion of %s: %+v", first, rs)
	}
	if rs := records(hdfssnap.AuditCreated); len(rs) != 2 {
		t.Errorf("%d created records, want 2: %+v", len(rs), rs)
	}
}

// TestHDFSHoldBestEffortSaysOff: --hold best-effort on a store root the mount's user can neither make
// snapshottable nor snapshot runs, and says in the metrics that the holds are off
// (ckguard_hold_active 0, what CkguardHoldsFailing reads).
func TestHDFSHoldBestEffortSaysOff(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := minidfs.Start(t, minidfs.Options{})
	_, uri := incident(t, c)
	t.Setenv("HADOOP_USER_NAME", minidfs.Other)
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	var addr string
	guarddtest.Start(t, guardd.Config{StoreDir: uri, IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
		Policy: refindex.DefaultPolicy(), Hold: "best-effort", SyncInterval: time.Second, MetricsAddr: "127.0.0.1:0",
		Ready: func(m *guardd.Mounted) { addr = m.MetricsAddr }}, func(ctx context.Context, c guardd.Config) error {
		return hdfsguardd.Run(ctx, c, opts)
	})
	m := guarddtest.Metrics(t, addr)
	if v, ok := m["ckguard_hold_active"]; !ok || v != 0 {
		t.Errorf("ckguard_hold_active = %v (exported %v) with best-effort and no snapshots, want 0", v, ok)
	}
	if _, ok := m["ckguard_hold_snapshots"]; ok {
		t.Errorf("ckguard_hold_snapshots exported while no snapshot is taken")
	}
}
