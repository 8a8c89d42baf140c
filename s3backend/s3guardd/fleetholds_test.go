package s3guardd_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/fs/hold"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/s3backend/s3guardd"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestS3FleetHoldsOnVersitygw (issues 31/32, S3): two --shared mounts of one Object Lock bucket with
// --hold required keep one record of the held objects in the bucket's shared area. Mount 2 (syncing
// every second) retires a checkpoint through itself; mount 1 (syncing hourly) still counts what only
// that checkpoint referenced: those legal holds stay ON while mount 1's view needs them. Once mount 1
// sees the retirement (restarted: its first sync), the holds are released by the lease holder and a
// versioned delete of one succeeds.
func TestS3FleetHoldsOnVersitygw(t *testing.T) {
	s3server.RequireFUSE(t)
	srv, root, dir, tr, c := lockedIncidentOne(t)
	ctx := context.Background()
	pol := guarddtest.ReferencesOnly()
	cfg := func(n string, interval time.Duration) guardd.Config {
		mnt := filepath.Join(dir, "mnt"+n)
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		return guardd.Config{StoreDir: root, IndexDir: filepath.Join(dir, "index"+n), Mountpoint: mnt,
			AuditLog: filepath.Join(dir, "audit"+n+".jsonl"), Policy: pol, SyncInterval: interval,
			Hold: hold.ModeRequired, Shared: true}
	}
	run := func(n string) func(context.Context, guardd.Config) error {
		return func(ctx context.Context, cfg guardd.Config) error {
			return s3guardd.Run(ctx, cfg, srv.Config(), func(o *s3mount.Options) { o.SpoolDir = filepath.Join(dir, "spool"+n) })
		}
	}
	c1, c2 := cfg("1", time.Hour), cfg("2", time.Second)
	c1.Policy.MaxStaleness = 0 // its view is an hour old between syncs
	stop1 := guarddtest.Start(t, c1, run("1"))
	guarddtest.Start(t, c2, run("2"))

	want := map[string]bool{}
	for m, ck := range tr.Live {
		want[m] = true
		for _, r := range ck.Refs {
			if _, ok := tr.Files[r]; ok {
				want[r] = true
			}
		}
	}
	waitHeld(t, c1.IndexDir, len(want), 60*time.Second)
	waitHeld(t, c2.IndexDir, len(want), 60*time.Second)

	newJob := "flink-checkpoints/" + treegen.IncidentOneNewJob
	older := newJob + "/chk-100273/_metadata"
	still := map[string]bool{} // what the other live checkpoints reference
	for m, ck := range tr.Live {
		if m != older {
			for _, r := range ck.Refs {
				still[r] = true
			}
		}
	}
	onlyOlder := []string{older} // its _metadata too: retired, its hold no longer needed by mount 2
	for _, r := range tr.Live[older].Refs {
		if _, ok := tr.Files[r]; ok && !still[r] {
			onlyOlder = append(onlyOlder, r)
		}
	}
	if len(onlyOlder) == 1 {
		t.Fatal("the scenario has no object only chk-100273 references")
	}
	entries, err := hold.ReadLedger(c1.IndexDir)
	if err != nil {
		t.Fatal(err)
	}
	version := map[string]string{}
	for _, e := range entries {
		version[e.Key] = e.Version
	}
	heldOn := func(k string) bool {
		on, err := c.LegalHold(ctx, k, version[k])
		if err != nil {
			t.Fatalf("legal hold of %s@%s: %v", k, version[k], err)
		}
		return on
	}
	if out, err := exec.Command("rm", filepath.Join(c2.Mountpoint, older)).CombinedOutput(); err != nil {
		t.Fatalf("rm %s through mount 2: %v %s", older, err, out)
	}
	// Mount 2 lets the objects go; mount 1 still needs them: held.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		s, err := hold.ReadStatus(c2.IndexDir)
		if err == nil && s.Releasing >= len(onlyOlder) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mount 2 does not let the %d objects go within 30 s: %+v %v", len(onlyOlder), s, err)
		}
	}
	time.Sleep(3 * time.Second) // more passes of mount 2
	for _, k := range onlyOlder {
		if !heldOn(k) {
			t.Errorf("%s: its legal hold was released although mount 1's view still references it", k)
		}
	}
	// Mount 1 restarted: its first sync sees the retirement; the lease holder releases the holds.
	stop1()
	guarddtest.Start(t, c1, run("1"))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		left := 0
		for _, k := range onlyOlder {
			if heldOn(k) {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d holds no mount needs are still ON after 60 s", left, len(onlyOlder))
		}
	}
	if err := c.DeleteVersion(ctx, onlyOlder[0], version[onlyOlder[0]]); err != nil {
		t.Errorf("versioned delete of released %s: %v", onlyOlder[0], err)
	}
	for _, k := range onlyOlder[1:] {
		if _, ok := version[k]; !ok {
			t.Errorf("%s is not in mount 1's ledger", k)
		}
	}
}
