package s3guardd_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/fs/hold"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/s3backend/s3guardd"
	"github.com/ckguard/ckguard/s3backend/s3hold"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestS3HoldsHealProtectedMetadata: with --hold required, the `_metadata` of the new job's newest
// checkpoint (protected by the guard's rules: the newest checkpoint of an active job) deleted with
// `aws s3 rm` beside the mount is brought back before the sync retires it (delete marker removed,
// audited), so the checkpoint stays live and the holds of the files only it references stay; the
// `_metadata` of the job's older checkpoint (which the rules let go, as Flink's subsumption does) deleted
// the same way is retired as before and the holds of the files only it referenced are released.
func TestS3HoldsHealProtectedMetadata(t *testing.T) {
	s3server.RequireFUSE(t)
	srv, root, dir, tr, c := lockedIncidentOne(t)
	ctx := context.Background()
	mnt, index, auditLog := filepath.Join(dir, "mnt"), filepath.Join(dir, "index"), filepath.Join(dir, "audit.jsonl")
	pol := refindex.DefaultPolicy() // active window 7 days: the new job's newest checkpoint is protected
	pol.Grace, pol.SavepointKeepNewest, pol.SavepointRetention = 0, false, 0
	const interval = time.Second
	guarddtest.Start(t, guardd.Config{StoreDir: root, IndexDir: index, Mountpoint: mnt, AuditLog: auditLog,
		Policy: pol, SyncInterval: interval, Hold: hold.ModeRequired},
		func(ctx context.Context, cfg guardd.Config) error {
			return s3guardd.Run(ctx, cfg, srv.Config(), func(o *s3mount.Options) { o.SpoolDir = filepath.Join(dir, "spool") })
		})
	want := map[string]bool{}
	for m, ck := range tr.Live {
		want[m] = true
		for _, r := range ck.Refs {
			if _, ok := tr.Files[r]; ok {
				want[r] = true
			}
		}
	}
	waitHeld(t, index, len(want), 60*time.Second)

	newJob := "flink-checkpoints/" + treegen.IncidentOneNewJob
	newest, older := newJob+"/chk-100274/_metadata", newJob+"/chk-100273/_metadata"
	// only lists what checkpoint a references and no other live checkpoint does.
	only := func(a string) []string {
		in := map[string]bool{}
		for m, ck := range tr.Live {
			if m != a {
				for _, r := range ck.Refs {
					in[r] = true
				}
			}
		}
		var out []string
		for _, r := range tr.Live[a].Refs {
			if !in[r] {
				out = append(out, r)
			}
		}
		return out
	}
	onlyNewest, onlyOlder := only(newest), only(older)
	if len(onlyNewest) == 0 || len(onlyOlder) == 0 {
		t.Fatal("scenario: a checkpoint without files of its own")
	}
	heldKeys := func() map[string]bool {
		l, err := hold.ReadLedger(index)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, e := range l {
			if e.State == hold.Held {
				out[e.Key] = true
			}
		}
		return out
	}

	// The newest checkpoint's _metadata deleted beside the mount: healed before it is retired.
	s3server.AWS(t, srv.Endpoint, "s3", "rm", "--only-show-errors", root+"/"+newest)
	t0 := time.Now()
	for deadline := t0.Add(30 * interval); ; time.Sleep(100 * time.Millisecond) {
		if _, err := c.Head(ctx, newest); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s deleted beside the mount does not read again after %s", newest, time.Since(t0))
		}
	}
	t.Logf("%s reads again %s after aws s3 rm", newest, time.Since(t0).Round(time.Millisecond))
	time.Sleep(5 * interval) // several syncs and hold passes
	held := heldKeys()
	for _, k := range append(onlyNewest, newest) {
		if !held[k] {
			t.Errorf("%s (only the healed checkpoint references it) is no longer held", k)
		}
	}
	recs, err := audit.ReadFile(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	healed := false
	for _, r := range recs {
		if r.Op == s3hold.HealOp && r.Path == newest {
			healed = true
			t.Logf("audit: %s", r.Message)
		}
	}
	if !healed {
		t.Errorf("no %s audit record for %s", s3hold.HealOp, newest)
	}

	// The older checkpoint's _metadata deleted the same way: the rules let it go, so it is retired and
	// what only it referenced is released.
	s3server.AWS(t, srv.Endpoint, "s3", "rm", "--only-show-errors", root+"/"+older)
	t1 := time.Now()
	for deadline := t1.Add(30 * interval); ; time.Sleep(200 * time.Millisecond) {
		held := heldKeys()
		left := 0
		for _, k := range onlyOlder {
			if held[k] {
				left++
			}
		}
		if left == 0 && !held[older] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d holds of files only the retired %s referenced left after %s", left, older, time.Since(t1))
		}
	}
	if _, err := c.Head(ctx, older); err == nil {
		t.Errorf("%s, which the rules let go, was brought back", older)
	}
}
