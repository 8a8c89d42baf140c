package refindex_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// darkStore makes the folders in dark unreadable to the index, as an EACCES from the backend would
// (the tests run as root, who reads any mode on a local file system): listings skip what lies below
// them and report each as an unknown subtree (owned by dark's uid, or by no one known when it is
// negative), a stat below one fails with EACCES.
type darkStore struct {
	store.Store
	mu   sync.Mutex
	dark map[string]int64
}

func (d *darkStore) set(dark map[string]int64) {
	d.mu.Lock()
	d.dark = dark
	d.mu.Unlock()
}

// hidden returns the dark folder key lies strictly below, if any.
func (d *darkStore) hidden(key string) (string, int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, uid := range d.dark {
		if strings.HasPrefix(key, k+"/") {
			return k, uid, true
		}
	}
	return "", 0, false
}

func (d *darkStore) filter(ctx context.Context, prefix string, list func(context.Context, func(store.ObjectInfo) error) error, fn func(store.ObjectInfo) error) error {
	d.mu.Lock()
	var report []store.UnknownSubtree
	for k, uid := range d.dark {
		if prefix == "" || strings.HasPrefix(k, prefix+"/") {
			u := store.UnknownSubtree{Key: k, Err: &os.PathError{Op: "open", Path: k, Err: syscall.EACCES}}
			if uid >= 0 {
				u.UID, u.HasUID = uint32(uid), true
			}
			report = append(report, u)
		}
	}
	d.mu.Unlock()
	for _, u := range report {
		if err := store.ReportUnknown(ctx, u); err != nil {
			return err
		}
	}
	return list(ctx, func(oi store.ObjectInfo) error {
		if _, _, ok := d.hidden(oi.Path); ok {
			return nil
		}
		return fn(oi)
	})
}

func (d *darkStore) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	return d.filter(ctx, "", d.Store.ListMetadata, fn)
}

func (d *darkStore) Walk(ctx context.Context, prefix string, fn func(store.ObjectInfo) error) error {
	return d.filter(ctx, prefix, func(ctx context.Context, fn func(store.ObjectInfo) error) error { return d.Store.Walk(ctx, prefix, fn) }, fn)
}

func (d *darkStore) Stat(ctx context.Context, key string) (store.ObjectInfo, error) {
	if k, _, ok := d.hidden(key); ok {
		return store.ObjectInfo{}, &os.PathError{Op: "stat", Path: key, Err: syscall.EACCES + syscall.Errno(0*len(k))}
	}
	return d.Store.Stat(ctx, key)
}

// TestUnknownSubtreeRule is the decision rule of refindex/unknown.go, case by case: what an unreadable
// folder makes the guard refuse (itself, its ancestors' rmdir, its job folder, files retired since it
// was last read, everything when it was never read) and what it leaves to the usual rules.
func TestUnknownSubtreeRule(t *testing.T) {
	const (
		jobA    = "flink/fedcba9876543210fedcba9876543210" // the YoungOrphan job, chk-77 live
		jobB    = "flink/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
		trusted = 0     // the tree's files are the test's (root's)
		other   = 65534 // nobody
	)
	type check struct {
		key    string
		op     verdict.Op
		reason verdict.Reason // ReasonAllowed: allowed
	}
	var refA string // a file chk-77 references (set per case)
	for _, tc := range []struct {
		name  string
		dark  string
		uid   int64
		first bool // dark from the first build on (never readable)
		// retire chk-77 after the folder went dark (its files' last reference retired meanwhile).
		retire bool
		checks []check
	}{
		{name: "in a job folder, trusted owner", dark: jobB + "/chk-5", uid: trusted, checks: []check{
			{jobB + "/chk-5/x", verdict.OpUnlink, verdict.ReasonUnknownSubtree},
			{jobB + "/chk-5", verdict.OpRmdir, verdict.ReasonUnknownSubtree},
			{jobB, verdict.OpRmdir, verdict.ReasonUnknownSubtree},
			{"flink", verdict.OpRename, verdict.ReasonUnknownSubtree},
			{jobB + "/shared/old", verdict.OpUnlink, verdict.ReasonUnknownSubtree}, // its own job folder
			{"scratch/old", verdict.OpUnlink, verdict.ReasonAllowed},
			{jobA + "/shared/old", verdict.OpUnlink, verdict.ReasonAllowed},
			{"REF", verdict.OpUnlink, verdict.ReasonReferenced},
			{"scratch", verdict.OpRmdir, verdict.ReasonAllowed},
			{"scratch", verdict.OpChmod, verdict.ReasonAllowed},
			{jobB, verdict.OpChmod, verdict.ReasonUnknownSubtree}, // its job folder: every op, as for a referenced folder
		}},
		{name: "in a job folder, another user's", dark: jobB + "/chk-5", uid: other, checks: []check{
			{jobB + "/chk-5/x", verdict.OpUnlink, verdict.ReasonUnknownSubtree},
			{jobB, verdict.OpRmdir, verdict.ReasonUnknownSubtree},
			{jobB + "/shared/old", verdict.OpUnlink, verdict.ReasonAllowed}, // confined to itself
			{"scratch/old", verdict.OpUnlink, verdict.ReasonAllowed},
		}},
		{name: "never readable, trusted owner: everything", dark: jobB + "/chk-5", uid: trusted, first: true, checks: []check{
			{"scratch/old", verdict.OpUnlink, verdict.ReasonUnknownSubtree},
			{jobA + "/shared/old", verdict.OpUnlink, verdict.ReasonUnknownSubtree},
		}},
		{name: "never readable, another user's: itself only", dark: "scratch/deep", uid: other, first: true, checks: []check{
			{"scratch/deep/x", verdict.OpUnlink, verdict.ReasonUnknownSubtree},
			{"scratch", verdict.OpRmdir, verdict.ReasonUnknownSubtree},
			{"scratch/old", verdict.OpUnlink, verdict.ReasonAllowed},
			{jobA + "/shared/old", verdict.OpUnlink, verdict.ReasonAllowed},
		}},
		{name: "outside a job folder, owner unknown (S3)", dark: "scratch/deep", uid: -1, checks: []check{
			{"scratch/deep/x", verdict.OpUnlink, verdict.ReasonUnknownSubtree},
			{"scratch/old", verdict.OpUnlink, verdict.ReasonAllowed},
			{jobB + "/shared/old", verdict.OpUnlink, verdict.ReasonAllowed},
		}},
		{name: "references retired after it went dark", dark: jobB + "/chk-5", uid: trusted, retire: true, checks: []check{
			{"REF", verdict.OpUnlink, verdict.ReasonUnknownSubtree},
			{jobA + "/shared/old", verdict.OpUnlink, verdict.ReasonAllowed},
			{"scratch/old", verdict.OpUnlink, verdict.ReasonAllowed},
		}},
		// No indexed _metadata left: who writes checkpoints is unknown, so another user's folder is not confined.
		{name: "references retired, no checkpoint left to tell the owner", dark: jobB + "/chk-5", uid: other, retire: true, checks: []check{
			{"REF", verdict.OpUnlink, verdict.ReasonUnknownSubtree},
			{"scratch/old", verdict.OpUnlink, verdict.ReasonAllowed},
		}},
		{name: "a live checkpoint's folder goes dark: kept, not retired", dark: jobA + "/chk-77", uid: trusted, checks: []check{
			{"REF", verdict.OpUnlink, verdict.ReasonUnknownSubtree},
			{jobA + "/chk-77/_metadata", verdict.OpUnlink, verdict.ReasonUnknownSubtree},
			{"scratch/old", verdict.OpUnlink, verdict.ReasonAllowed},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, meta, ref := youngOrphan(t)
			refA = ref
			old := testNow.Add(-10 * 24 * time.Hour)
			for _, k := range []string{jobB + "/shared/old", jobB + "/chk-5/x", "scratch/old", "scratch/deep/x", jobA + "/shared/old"} {
				if err := tr.Write(k, 10, old); err != nil {
					t.Fatal(err)
				}
			}
			ds := &darkStore{Store: localStore(t, tr.Root)}
			dark := map[string]int64{tc.dark: tc.uid}
			if tc.first {
				ds.set(dark)
			}
			ix := openSynced(t, ds)
			if !tc.first {
				ds.set(dark)
				syncIndex(t, ix)
			}
			if tc.retire {
				if err := os.Remove(filepath.Join(tr.Root, filepath.FromSlash(meta))); err != nil {
					t.Fatal(err)
				}
				syncIndex(t, ix)
			}
			// An indexed _metadata below it is not retired because the listing could not see it.
			if s, err := ix.Stats(context.Background()); err != nil || s.Checkpoints != 1-boolInt(tc.retire) {
				t.Errorf("stats: %d checkpoints (%v), want %d", s.Checkpoints, err, 1-boolInt(tc.retire))
			}
			us := ix.UnknownSubtrees()
			if len(us) != 1 || us[0].Key != tc.dark || !strings.Contains(us[0].Cause, "permission denied") {
				t.Fatalf("unknown subtrees %+v, want %s", us, tc.dark)
			}
			for _, c := range tc.checks {
				key := c.key
				if key == "REF" {
					key = refA
				}
				d := ix.Decide(context.Background(), key, c.op)
				want := c.reason
				if d.Reason != want || d.Allow != (want == verdict.ReasonAllowed) {
					t.Errorf("%s %s = %s (%s), want %s", c.op, key, d.Reason, d.Message, want)
				}
				if d.Reason == verdict.ReasonUnknownSubtree && !strings.Contains(d.Message, tc.dark) {
					t.Errorf("%s %s: message does not name the subtree: %s", c.op, key, d.Message)
				}
			}
			// The cause goes: the next sync clears it, and what it held is decided as usual.
			ds.set(nil)
			syncIndex(t, ix)
			if us := ix.UnknownSubtrees(); len(us) != 0 {
				t.Errorf("after the folder became readable: unknown %+v", us)
			}
			if d := ix.Decide(context.Background(), "scratch/old", verdict.OpUnlink); !d.Allow {
				t.Errorf("scratch/old after clearing: %s", d.Message)
			}
		})
	}
}

// TestUnknownSubtreeInStatsAndPersisted: the index's stats name the subtree, a reopened index keeps it
// (it is a sync fact like the sync error) and a sync of a readable store clears it.
func TestUnknownSubtreeInStatsAndPersisted(t *testing.T) {
	tr, _, _ := youngOrphan(t)
	ds := &darkStore{Store: localStore(t, tr.Root)}
	dir := t.TempDir()
	ix := openIndex(t, dir, ds)
	syncIndex(t, ix)
	ds.set(map[string]int64{"scratch/deep": 65534})
	syncIndex(t, ix)
	s, err := ix.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.UnknownSubtrees) != 1 || s.UnknownSubtrees[0].Key != "scratch/deep" || s.UnknownSubtrees[0].UID == nil || *s.UnknownSubtrees[0].UID != 65534 || !s.UnknownSubtrees[0].Confined {
		t.Errorf("stats unknown subtrees %+v", s.UnknownSubtrees)
	}
	ix.Close()
	ix = openIndex(t, dir, ds)
	defer ix.Close()
	if us := ix.UnknownSubtrees(); len(us) != 1 || us[0].Key != "scratch/deep" {
		t.Errorf("reopened: %+v", us)
	}
	ds.set(nil)
	syncIndex(t, ix)
	if us := ix.UnknownSubtrees(); len(us) != 0 {
		t.Errorf("after a readable sync: %+v", us)
	}
}

var _ = refindex.UnknownSubtree{}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestUnknownSubtreeMakesVerifyAndOrphansIncomplete: while an unknown subtree may hide checkpoints (not
// confined), verify and verify --deep are not OK (Untrusted names it: exit 3) and orphans leaves out what the subtree may
// protect; a confined one leaves verify alone. Orphans names every entry it could not read (exit 3).
func TestUnknownSubtreeMakesVerifyAndOrphansIncomplete(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		uid        int64
		incomplete bool
	}{
		{"trusted owner", 0, true},
		{"another user's (confined)", 65534, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, _, _ := youngOrphan(t)
			const job = "flink/fedcba9876543210fedcba9876543210"
			ds := &darkStore{Store: localStore(t, tr.Root)}
			ix := openSynced(t, ds)
			ds.set(map[string]int64{job + "/chk-78": tc.uid})
			syncIndex(t, ix)
			v, err := ix.Verify(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := v.Untrusted != ""; got != tc.incomplete || (tc.incomplete && !strings.Contains(v.Untrusted, job+"/chk-78")) {
				t.Errorf("verify untrusted %q, want incomplete %v", v.Untrusted, tc.incomplete)
			}
			// The deep drill (verify --deep) judges the same live set: never green on what it skipped.
			d, err := ix.Drill(ctx, refindex.DrillOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Untrusted != ""; got != tc.incomplete || (tc.incomplete && !strings.Contains(d.Untrusted, job+"/chk-78")) {
				t.Errorf("drill untrusted %q, want incomplete %v", d.Untrusted, tc.incomplete)
			}
			o, err := ix.Orphans(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			// Orphans skipped what it could not read either way: never a silent gap.
			if o.Unknown == "" || !strings.Contains(o.Unknown, job+"/chk-78") {
				t.Errorf("orphans unknown %q, want it named", o.Unknown)
			}
			for _, f := range o.Files {
				if tc.incomplete && strings.HasPrefix(f.Path, job+"/") {
					t.Errorf("orphans lists %s of the job folder the unknown subtree lies in", f.Path)
				}
			}
		})
	}
}

// TestUnknownSubtreeAfterRebuild: a rebuild keeps no tombstones, so the files retired since an unknown
// subtree was last read are no longer known: after it, the subtree counts as never read (everything is
// refused unless it is confined) until a sync reads it again.
func TestUnknownSubtreeAfterRebuild(t *testing.T) {
	ctx := context.Background()
	tr, _, _ := youngOrphan(t)
	if err := tr.Write("scratch/old", 10, testNow.Add(-10*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	ds := &darkStore{Store: localStore(t, tr.Root)}
	ix := openSynced(t, ds)
	ds.set(map[string]int64{"flink/bbbb/chk-5": 0})
	syncIndex(t, ix)
	if d := ix.Decide(ctx, "scratch/old", verdict.OpUnlink); !d.Allow {
		t.Fatalf("before the rebuild: %s", d.Message)
	}
	if err := ix.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if us := ix.UnknownSubtrees(); len(us) != 1 || !us[0].LastReadable.IsZero() {
		t.Fatalf("after the rebuild: %+v, want one never read", us)
	}
	if d := ix.Decide(ctx, "scratch/old", verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonUnknownSubtree {
		t.Errorf("after the rebuild: %s %s, want unknown-subtree", d.Reason, d.Message)
	}
	ds.set(nil)
	syncIndex(t, ix)
	if d := ix.Decide(ctx, "scratch/old", verdict.OpUnlink); !d.Allow {
		t.Errorf("once readable: %s", d.Message)
	}
}

// TestUnreadableStoreRootFailsTheSync: the store root itself unreadable (an expired Kerberos ticket,
// revoked credentials) is no single entry but the whole store: the sync fails and every decision says
// so (sync-failed), as before unknown subtrees; the next readable sync lifts it.
func TestUnreadableStoreRootFailsTheSync(t *testing.T) {
	tr, _, _ := youngOrphan(t)
	ds := &darkStore{Store: localStore(t, tr.Root)}
	ix := openIndex(t, t.TempDir(), ds)
	defer ix.Close()
	syncIndex(t, ix)
	ds.set(map[string]int64{"": -1})
	if err := ix.Sync(context.Background()); err == nil || !strings.Contains(err.Error(), "store root cannot be read") {
		t.Fatalf("sync with the store root unreadable: %v, want an error naming the root", err)
	}
	if d := ix.Decide(context.Background(), tr.Referenced()[0], verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonSyncFailed {
		t.Errorf("decision with the root unreadable: %+v, want sync-failed", d)
	}
	if us := ix.UnknownSubtrees(); len(us) != 0 {
		t.Errorf("the root recorded as an unknown subtree: %+v", us)
	}
	ds.set(nil)
	syncIndex(t, ix)
	if d := ix.Decide(context.Background(), tr.Referenced()[0], verdict.OpUnlink); d.Reason == verdict.ReasonSyncFailed {
		t.Errorf("after a readable sync: still %+v", d)
	}
}
