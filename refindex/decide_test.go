package refindex_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// flakyStore fails listings while fail is set.
type flakyStore struct {
	store.Store
	fail bool
}

func (f *flakyStore) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	if f.fail {
		return errors.New("503 Slow Down")
	}
	return f.Store.ListMetadata(ctx, fn)
}

func TestFailClosed(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	fs := &flakyStore{Store: localStore(t, tr.Root)}
	now := testNow
	pol := testPolicy()
	pol.MaxStaleness = 5 * time.Minute
	pol.Now = func() time.Time { return now }
	ix := openIndexWith(t, t.TempDir(), fs, pol)
	defer ix.Close()
	garbage := tr.Orphans(treegen.DefaultPolicy, 0)[0]
	if d := ix.Decide(ctx, garbage, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonIndexStale {
		t.Fatalf("never-synced index allowed: %+v", d)
	}
	// Sync records the listing's start time; pretend the clock is at the real time now.
	now = time.Now()
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	pol.Now = func() time.Time { return now }
	if d := ix.Decide(ctx, garbage, verdict.OpUnlink); !d.Allow {
		t.Fatalf("garbage refused after sync: %+v", d)
	}
	now = now.Add(6 * time.Minute)
	if d := ix.Decide(ctx, garbage, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonIndexStale || !strings.Contains(d.Message, "max-staleness") ||
		!strings.Contains(d.Message, "a running mount syncs every --sync-interval") {
		// The advice must also hold while a mount holds the index (where index sync reports, not syncs).
		t.Fatalf("stale index allowed: %+v", d)
	}
	now = time.Now()
	fs.fail = true
	if err := ix.Sync(ctx); err == nil {
		t.Fatal("sync with a failing listing succeeded")
	}
	if d := ix.Decide(ctx, garbage, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonSyncFailed || !strings.Contains(d.Message, "503") || !strings.Contains(d.Message, "shows its last error") {
		t.Fatalf("failed sync allowed: %+v", d)
	}
	if st, _, _ := ix.Explain(ctx, garbage); st != verdict.StateBlocked {
		t.Fatalf("explain after failed sync = %s", st)
	}
	// The failure survives a restart (persisted), and a good sync clears it.
	ix.Close()
	ix = openIndexWith(t, ix.Dir(), fs, pol)
	defer ix.Close()
	if d := ix.Decide(ctx, garbage, verdict.OpUnlink); d.Reason != verdict.ReasonSyncFailed {
		t.Fatalf("failed sync forgotten on reopen: %+v", d)
	}
	fs.fail = false
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, garbage, verdict.OpUnlink); !d.Allow {
		t.Fatalf("garbage refused after recovery: %+v", d)
	}
}

func TestDirectoriesAndPolicy(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.IncidentOne(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	// A file-merging checkpoint of a third job whose operator state names managed directories.
	fm := "flink-checkpoints/11112222333344445555666677778888"
	c, err := tr.Checkpoint(treegen.Spec{Dir: fm + "/chk-5", ID: 5, Completed: testNow.Add(-20 * 24 * time.Hour),
		Dirs: []string{fm + "/taskowned/job_1111_tm_a", fm + "/shared/op_0_2_"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Data(c, testNow.Add(-21*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Write(fm+"/taskowned/job_1111_tm_a/unlisted-physical-file", 10, testNow.Add(-30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Write("ha/completedCheckpoint00001", 10, testNow.Add(-30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	pol := testPolicy()
	pol.Protect = []string{"ha"}
	ix := openIndexWith(t, t.TempDir(), localStore(t, tr.Root), pol)
	defer ix.Close()
	syncIndex(t, ix)
	old := "flink-checkpoints/" + treegen.IncidentOneOldJob
	cur := "flink-checkpoints/" + treegen.IncidentOneNewJob
	tests := []struct {
		path   string
		op     verdict.Op
		reason verdict.Reason
	}{
		{old, verdict.OpRmdir, verdict.ReasonReferenced},
		{old, verdict.OpRename, verdict.ReasonReferenced},
		{old + "/shared", verdict.OpRename, verdict.ReasonReferenced},
		{old + "/chk-100270", verdict.OpRmdir, verdict.ReasonAllowed},
		{old + "/chk-100270", verdict.OpRename, verdict.ReasonAllowed},
		{old + "/taskowned", verdict.OpRmdir, verdict.ReasonAllowed},
		{"", verdict.OpRmdir, verdict.ReasonReferenced},
		{cur + "/chk-100274/_metadata", verdict.OpUnlink, verdict.ReasonProtectedMetadata},
		{cur + "/chk-100274/_metadata", verdict.OpRename, verdict.ReasonProtectedMetadata},
		{cur + "/chk-100273/_metadata", verdict.OpUnlink, verdict.ReasonAllowed},
		{cur + "/chk-100273/_metadata", verdict.OpTruncate, verdict.ReasonAllowed},
		{fm + "/taskowned/job_1111_tm_a", verdict.OpRmdir, verdict.ReasonReferenced},
		{fm + "/taskowned/job_1111_tm_a/unlisted-physical-file", verdict.OpUnlink, verdict.ReasonReferenced},
		{fm + "/taskowned", verdict.OpRename, verdict.ReasonReferenced},
		{fm + "/chk-5/_metadata", verdict.OpUnlink, verdict.ReasonAllowed},
		{"ha/completedCheckpoint00001", verdict.OpUnlink, verdict.ReasonProtectGlob},
		{"ha", verdict.OpRmdir, verdict.ReasonProtectGlob},
		{"ha/../" + old + "/chk-100270/" + "x", verdict.OpUnlink, verdict.ReasonAllowed},
		{"../outside", verdict.OpUnlink, verdict.ReasonStoreError},
		{old + "/shared/" + "does-not-exist", verdict.OpUnlink, verdict.ReasonAllowed},
	}
	for _, tc := range tests {
		d := ix.Decide(ctx, tc.path, tc.op)
		if d.Reason != tc.reason || d.Allow != (tc.reason == verdict.ReasonAllowed) {
			t.Errorf("Decide(%q, %s) = %s %q, want %s", tc.path, tc.op, d.Reason, d.Message, tc.reason)
		}
	}
	// A referenced SST names its checkpoints (first few and the count) and the fix.
	var oldSST string
	for _, k := range tr.Referenced() {
		if strings.HasPrefix(k, old+"/shared/") {
			oldSST = k
		}
	}
	d := ix.Decide(ctx, oldSST, verdict.OpUnlink)
	if d.RefCount < 1 || len(d.Referencing) == 0 || !strings.Contains(d.Message, "chk-10027") || !strings.Contains(d.Message, "full") {
		t.Errorf("referenced refusal lacks names or the fix: %+v", d)
	}
	// Writes: a referenced file may not be opened for writing; an unreferenced young one may.
	if d := ix.Decide(ctx, tr.Referenced()[0], verdict.OpWrite); d.Allow {
		t.Errorf("write to a referenced file allowed")
	}
	if d := ix.Decide(ctx, tr.Referenced()[0], verdict.OpLink); d.Allow {
		t.Errorf("hard link to a referenced file allowed")
	}
	// Pinning protects a checkpoint; unpinning releases it.
	pinned := cur + "/chk-100273"
	if _, err := ix.Pin(ctx, pinned); err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, pinned+"/_metadata", verdict.OpUnlink); d.Reason != verdict.ReasonPinned || !strings.Contains(d.Message, "ckguard unpin") {
		t.Errorf("pinned checkpoint: %+v", d)
	}
	if d := ix.Decide(ctx, cur, verdict.OpRename); d.Allow {
		t.Errorf("rename of a folder holding a pinned checkpoint allowed")
	}
	if _, err := ix.Pin(ctx, old+"/chk-100270"); err == nil {
		t.Errorf("pin of a folder without _metadata succeeded")
	}
	// Pins survive a rebuild (they are not derived data).
	if err := ix.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, pinned+"/_metadata", verdict.OpUnlink); d.Reason != verdict.ReasonPinned {
		t.Errorf("pin lost in rebuild: %+v", d)
	}
	if _, err := ix.Unpin(ctx, pinned); err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, pinned+"/_metadata", verdict.OpUnlink); !d.Allow {
		t.Errorf("unpinned checkpoint still refused: %+v", d)
	}
	st, refs, err := ix.Explain(ctx, tr.Referenced()[0])
	if err != nil || st != verdict.StateReferenced || len(refs) == 0 {
		t.Errorf("Explain = %s %v %v", st, refs, err)
	}
	if st, _, _ := ix.Explain(ctx, cur+"/chk-100274/_metadata"); st != verdict.StateProtected {
		t.Errorf("Explain(protected) = %s", st)
	}
}

// TestThroughTheMount drives the index as the guarded filesystem does: Flink writes a checkpoint
// through the mount (files, then a temporary metadata file renamed to _metadata), then subsumes the
// previous one; the files only the old checkpoint used are deletable at once, though young.
func TestThroughTheMount(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	tr, err := treegen.YoungOrphan(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	ix := openIndexWith(t, t.TempDir(), localStore(t, tr.Root), refindex.DefaultPolicy())
	defer ix.Close()
	syncIndex(t, ix)
	chk := ix
	job := "flink/fedcba9876543210fedcba9876543210"
	prev := tr.Live[job+"/chk-77/_metadata"]
	// chk-78: reuses two SSTs of chk-77, uploads a new one, and a private file.
	newSST := job + "/shared/new-sst-78"
	c, err := tr.Checkpoint(treegen.Spec{Dir: job + "/chk-78", ID: 78, Completed: now, Shared: append([]string{newSST}, prev.Refs[:2]...), Private: []string{"priv-78"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Data(c, now); err != nil {
		t.Fatal(err)
	}
	// Before the _metadata is known, the new upload is protected only by the grace period.
	if d := chk.Decide(ctx, newSST, verdict.OpUnlink); d.Reason != verdict.ReasonGrace {
		t.Fatalf("in-flight upload: %+v", d)
	}
	// Flink's local writer writes a hidden temp file and renames it to _metadata.
	tmp := job + "/chk-78/._metadata.inprogress.1"
	if err := os.Rename(filepath.Join(tr.Root, c.Metadata), filepath.Join(tr.Root, tmp)); err != nil {
		t.Fatal(err)
	}
	if err := chk.Written(ctx, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(tr.Root, tmp), filepath.Join(tr.Root, c.Metadata)); err != nil {
		t.Fatal(err)
	}
	if err := chk.Renamed(ctx, tmp, c.Metadata); err != nil {
		t.Fatal(err)
	}
	if d := chk.Decide(ctx, newSST, verdict.OpUnlink); d.Reason != verdict.ReasonReferenced || d.Referencing[0] != c.Metadata {
		t.Fatalf("new checkpoint not protected at once: %+v", d)
	}
	// Subsume chk-77: _metadata first, then its files. Files chk-78 reuses stay protected.
	if d := chk.Decide(ctx, prev.Metadata, verdict.OpUnlink); !d.Allow {
		t.Fatalf("subsuming chk-77 refused: %+v", d)
	}
	os.Remove(filepath.Join(tr.Root, prev.Metadata))
	if err := chk.Deleted(ctx, prev.Metadata); err != nil {
		t.Fatal(err)
	}
	for _, r := range prev.Refs {
		d := chk.Decide(ctx, r, verdict.OpUnlink)
		if want := strings.Contains(strings.Join(c.Refs, " "), r); d.Allow == want {
			t.Errorf("after subsumption %s: allow=%v (%s), still referenced=%v", r, d.Allow, d.Message, want)
		}
	}
	// Writing a damaged _metadata through the mount blocks nothing else.
	bad := job + "/chk-79/_metadata"
	os.MkdirAll(filepath.Join(tr.Root, job, "chk-79"), 0o755)
	os.WriteFile(filepath.Join(tr.Root, bad), []byte("not a checkpoint"), 0o644)
	if err := chk.Written(ctx, bad); err != nil {
		t.Fatalf("closing a damaged _metadata through the mount: %v", err)
	}
	if d := chk.Decide(ctx, prev.Refs[2], verdict.OpUnlink); !d.Allow {
		t.Fatalf("a damaged _metadata blocks an unrelated deletion: %+v", d)
	}
	// One of a newer format version (this test's user owns the job folder) blocks everything at once.
	os.WriteFile(filepath.Join(tr.Root, bad), []byte("\x49\x60\x67\x2d\x00\x00\x00\x09rest"), 0o644)
	// The close succeeds (failing it would fail the Flink checkpoint); the file is
	// recorded as unparseable.
	if err := chk.Written(ctx, bad); err != nil {
		t.Fatalf("closing an unparseable _metadata through the mount: %v", err)
	}
	if d := chk.Decide(ctx, prev.Refs[2], verdict.OpUnlink); d.Reason != verdict.ReasonUnparseable || !strings.Contains(d.Message, bad) {
		t.Fatalf("unparseable _metadata does not block: %+v", d)
	} else if root, _ := filepath.EvalSymlinks(tr.Root); !strings.Contains(d.Message, "`ckguard inspect "+filepath.Join(root, bad)+"`") {
		// The advice is a command that works from the shell: the file's path, not its store key.
		t.Errorf("refusal does not name the file to inspect by a path the shell can open: %s", d.Message)
	}
	// The unparseable file itself is exempt only from the unparseable rule: young, and the newest
	// chk-N of its job, it stays refused (grace / active window).
	if d := chk.Decide(ctx, bad, verdict.OpUnlink); d.Allow || (d.Reason != verdict.ReasonGrace && d.Reason != verdict.ReasonProtectedMetadata) {
		t.Fatalf("young unparseable _metadata: %+v", d)
	}
	// Removing its folder through the mount unblocks.
	os.RemoveAll(filepath.Join(tr.Root, job, "chk-79"))
	if err := chk.Deleted(ctx, job+"/chk-79"); err != nil {
		t.Fatal(err)
	}
	if d := chk.Decide(ctx, prev.Refs[2], verdict.OpUnlink); !d.Allow {
		t.Fatalf("still blocked after removing the unparseable _metadata: %+v", d)
	}
}

func TestWhyOutside(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.SchemeAliasing(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, tr)
	out := tr.Live["bbbb1111bbbb1111bbbb1111bbbb1111/chk-8/_metadata"].Outside[0]
	res, err := ix.Why(ctx, strings.Replace(out, "s3://", "s3a://", 1))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Outside || res.Allow || res.Reason != verdict.ReasonOutsideStore || res.RefCount != 1 || !strings.Contains(res.Message, "outside the guarded store") {
		t.Fatalf("why outside: %+v", res)
	}
	// A URI that a map ties to the store is answered like its store key.
	in := "s3p://bucket/flink/" + tr.Referenced()[0]
	res, err = ix.Why(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outside || res.Allow || res.Path != tr.Referenced()[0] {
		t.Fatalf("why of a mapped URI: %+v", res)
	}
}

// Stats reports the size of a generation a rebuild has just written (badger's own figure is
// refreshed once a minute and said 0 B after a rebuild of under a minute).
func TestStatsIndexBytesAfterRebuild(t *testing.T) {
	tr, err := treegen.IncidentOne(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, tr)
	if err := ix.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err := ix.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.IndexBytes <= 0 {
		t.Fatalf("index bytes after a rebuild: %d", s.IndexBytes)
	}
	// The figure is disk usage (what sizing /var/lib needs), not the apparent size of badger's
	// sparsely preallocated files: it is what du counts, and far below the sum of the sizes.
	var apparent, allocated int64
	gen := filepath.Join(s.IndexDir, fmt.Sprintf("gen-%08d", s.Generation))
	if err := filepath.WalkDir(gen, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || filepath.Dir(p) != gen {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		apparent += fi.Size()
		allocated += fi.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if s.IndexBytes != allocated {
		t.Errorf("index bytes %d, want the allocated blocks of the generation's files, %d (apparent size %d)", s.IndexBytes, allocated, apparent)
	}
	if apparent > 4*allocated && s.IndexBytes*4 > apparent {
		t.Errorf("index bytes %d is near the apparent size %d of sparse files that take %d on disk", s.IndexBytes, apparent, allocated)
	}
}
