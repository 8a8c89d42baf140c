package refindex_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// TestNewestPerOwner: checkpoints compete for a job's newest only with those whose _metadata has the same
// owner, so another user's chk-<newest+1>/_metadata (with a valid id) is protected as its owner's newest
// but never takes the protection away from the job's real newest; nothing protected when every
// checkpoint has one owner loses protection.
func TestNewestPerOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files other owners")
	}
	const job = "flink/00000000000000000000000000000000"
	type ck struct {
		dir string
		id  int64
		age time.Duration
		uid int
	}
	tests := []struct {
		name      string
		ckpts     []ck
		protected []string
		deletable []string
	}{
		{"one owner", []ck{{"chk-9", 9, 2 * time.Hour, 0}, {"chk-10", 10, time.Hour, 0}},
			[]string{"chk-10"}, []string{"chk-9"}},
		{"foreign chk-<newest+1>", []ck{{"chk-9", 9, 2 * time.Hour, 0}, {"chk-10", 10, time.Hour, 0}, {"chk-11", 11, time.Minute, 65534}},
			[]string{"chk-10", "chk-11"}, []string{"chk-9"}},
		{"foreign checkpoints with higher ids", []ck{{"chk-10", 10, time.Hour, 1000}, {"chk-11", 11, 3 * time.Minute, 65534}, {"chk-12", 12, time.Minute, 65534}, {"chk-9", 9, 2 * time.Hour, 1000}},
			[]string{"chk-10", "chk-12"}, []string{"chk-9", "chk-11"}},
		{"the job is not root's", []ck{{"chk-9", 9, 2 * time.Hour, 1000}, {"chk-10", 10, time.Hour, 1000}, {"chk-11", 11, time.Minute, 0}},
			[]string{"chk-10", "chk-11"}, []string{"chk-9"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tc.ckpts {
				ch, err := tr.Checkpoint(treegen.Spec{Dir: job + "/" + c.dir, Job: job, ID: c.id, Completed: testNow.Add(-c.age)})
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Lchown(filepath.Join(tr.Root, ch.Metadata), c.uid, c.uid); err != nil {
					t.Fatal(err)
				}
			}
			ix := openTree(t, tr)
			ctx := context.Background()
			for _, dir := range tc.protected {
				if d := ix.Decide(ctx, job+"/"+dir+"/_metadata", verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonProtectedMetadata {
					t.Errorf("unlink %s/_metadata = %+v; want refused as the newest checkpoint", dir, d)
				}
			}
			for _, dir := range tc.deletable {
				if d := ix.Decide(ctx, job+"/"+dir+"/_metadata", verdict.OpUnlink); !d.Allow {
					t.Errorf("unlink %s/_metadata = %+v; want allowed", dir, d)
				}
			}
		})
	}
}

// TestSavepointPolicy: the newest savepoint of each job (by Flink's savepoint-<6 hex>-<12 hex> folder
// name, wherever it lies) is kept whatever its age, savepoints within --savepoint-retention too, and a
// savepoint in a folder named otherwise counts as its job's only one; both rules can be switched off.
func TestSavepointPolicy(t *testing.T) {
	day := 24 * time.Hour
	sps := []struct {
		dir string
		age time.Duration
	}{
		{"savepoints/savepoint-4f1a2b-000000000001", 60 * day},
		{"savepoints/savepoint-4f1a2b-000000000002", 40 * day},
		{"flink/job/savepoint-4f1a2b-000000000003", 50 * day}, // same job prefix, another folder: another group
		{"savepoints/savepoint-abcdef-000000000001", 20 * day},
		{"savepoints/savepoint-abcdef-000000000002", 10 * day},
		{"savepoints/before-upgrade", 90 * day},
		{"savepoints/savepoint-4f1a2b-00000000000z", 80 * day}, // not Flink's name: its own job
	}
	tests := []struct {
		name       string
		keepNewest bool
		retention  time.Duration
		protected  []int
	}{
		{"defaults", true, 30 * 24 * time.Hour, []int{1, 2, 3, 4, 5, 6}},
		{"newest only", true, 0, []int{1, 2, 4, 5, 6}},
		{"retention only", false, 15 * day, []int{4}},
		{"both off", false, 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
			if err != nil {
				t.Fatal(err)
			}
			for _, sp := range sps {
				if _, err := tr.Checkpoint(treegen.Spec{Dir: sp.dir, ID: 3, Savepoint: true, Completed: testNow.Add(-sp.age)}); err != nil {
					t.Fatal(err)
				}
			}
			pol := testPolicy()
			pol.SavepointKeepNewest, pol.SavepointRetention = tc.keepNewest, tc.retention
			st := localStore(t, tr.Root)
			ix := openIndexWith(t, t.TempDir(), st, pol)
			defer ix.Close()
			syncIndex(t, ix)
			ctx := context.Background()
			prot := map[int]bool{}
			for _, i := range tc.protected {
				prot[i] = true
			}
			for i, sp := range sps {
				d := ix.Decide(ctx, sp.dir+"/_metadata", verdict.OpUnlink)
				if prot[i] && (d.Allow || d.Reason != verdict.ReasonProtectedSavepoint) {
					t.Errorf("unlink %s/_metadata = %+v; want refused as a protected savepoint", sp.dir, d)
				}
				if !prot[i] && !d.Allow {
					t.Errorf("unlink %s/_metadata = %+v; want allowed", sp.dir, d)
				}
			}
		})
	}
}

// TestProtectGlobs: a --protect glob without "/" matches a name at any depth, one with "/" (or a leading
// "/") matches from the store root.
func TestProtectGlobs(t *testing.T) {
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"ha/job/blob", "flink/ha/blob", "a/b/savepoint-x/f", "savepoint-y/f", "a/b/c"}
	for _, f := range files {
		if err := tr.Write(f, 10, testNow.Add(-48*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		glob      string
		protected []string
	}{
		{"savepoint-*", []string{"a/b/savepoint-x/f", "savepoint-y/f"}},
		{"ha", []string{"ha/job/blob", "flink/ha/blob"}},
		{"/ha", []string{"ha/job/blob"}},
		{"*/ha", []string{"flink/ha/blob"}},
		{"flink/ha/", []string{"flink/ha/blob"}},
		{"a/b", []string{"a/b/savepoint-x/f", "a/b/c"}},
		{"blob", []string{"ha/job/blob", "flink/ha/blob"}},
	}
	for _, tc := range tests {
		t.Run(tc.glob, func(t *testing.T) {
			pol := testPolicy()
			pol.Protect = []string{tc.glob}
			ix := openIndexWith(t, t.TempDir(), localStore(t, tr.Root), pol)
			defer ix.Close()
			syncIndex(t, ix)
			ctx := context.Background()
			prot := map[string]bool{}
			for _, f := range tc.protected {
				prot[f] = true
			}
			for _, f := range files {
				d := ix.Decide(ctx, f, verdict.OpUnlink)
				if prot[f] != (d.Reason == verdict.ReasonProtectGlob) || prot[f] == d.Allow {
					t.Errorf("--protect %q: unlink %s = %+v; want protected %v", tc.glob, f, d, prot[f])
				}
			}
		})
	}
	// A glob with a ".", ".." or empty segment can never match a store key (keys are clean), so it
	// would protect nothing without a word.
	for _, bad := range []string{"/", "a/**", "[x", "./ha", "flink//ha", "flink/./ha", "../ha", "flink/ha/..", ".", ".."} {
		pol := testPolicy()
		pol.Protect = []string{bad}
		if err := pol.Validate(); err == nil {
			t.Errorf("--protect %q accepted", bad)
		}
	}
}

func localStore(t *testing.T, root string) *localstore.Store {
	t.Helper()
	st, err := localstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRetirementLiftsGraceOnlyFromItsFiles: deleting a checkpoint's _metadata makes its young files
// deletable at once, but not a file rewritten after the checkpoint completed (it is not the file the
// checkpoint referenced: a checkpoint in flight may be writing it), nor, where the store has owners, a
// file of another owner outside the job folder of a _metadata that has its job folder's owner.
func TestRetirementLiftsGraceOnlyFromItsFiles(t *testing.T) {
	const job = "flink/00000000000000000000000000000000"
	tests := []struct {
		name    string
		setup   func(t *testing.T, root string, files []string) // after the checkpoint, before the retirement
		deletes []bool                                          // per file: deletable after the retirement
	}{
		{"own files", nil, []bool{true, true}},
		{"rewritten after completion", func(t *testing.T, root string, files []string) {
			if err := os.Chtimes(filepath.Join(root, files[0]), testNow, testNow); err != nil {
				t.Fatal(err)
			}
		}, []bool{false, true}},
		{"another owner", func(t *testing.T, root string, files []string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give files other owners")
			}
			// The base folder, the job folder and the _metadata are 1000's (the JobManager); files[0] inside
			// the job folder is 65534's (a TaskManager), files[1] in another job's folder is 65534's too.
			for _, k := range []string{"flink", job, job + "/chk-5", job + "/chk-5/_metadata"} {
				if err := os.Lchown(filepath.Join(root, k), 1000, 1000); err != nil {
					t.Fatal(err)
				}
			}
			for _, k := range files {
				if err := os.Lchown(filepath.Join(root, k), 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
		}, []bool{true, false}},
		{"job folder made by another user than its base folder's owner", func(t *testing.T, root string, files []string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give files other owners")
			}
			// 1000 created the job folder (its name was known before the job ran) in a base folder that is
			// root's; its _metadata names files of another owner inside that folder: they keep grace.
			for _, k := range []string{job, job + "/chk-5", job + "/chk-5/_metadata"} {
				if err := os.Lchown(filepath.Join(root, k), 1000, 1000); err != nil {
					t.Fatal(err)
				}
			}
			for _, k := range files {
				if err := os.Lchown(filepath.Join(root, k), 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
		}, []bool{false, false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
			if err != nil {
				t.Fatal(err)
			}
			files := []string{job + "/shared/sst-1", "flink/other/shared/sst-2"}
			c, err := tr.Checkpoint(treegen.Spec{Dir: job + "/chk-5", ID: 5, Completed: testNow.Add(-5 * time.Minute), Shared: files})
			if err != nil {
				t.Fatal(err)
			}
			// A newer checkpoint, so chk-5 is not the newest.
			if _, err := tr.Checkpoint(treegen.Spec{Dir: job + "/chk-6", ID: 6, Completed: testNow.Add(-time.Minute)}); err != nil {
				t.Fatal(err)
			}
			if err := tr.Data(c, testNow.Add(-10*time.Minute)); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(t, tr.Root, files)
			}
			ix := openTree(t, tr)
			ctx := context.Background()
			if err := tr.Retire(c.Metadata); err != nil {
				t.Fatal(err)
			}
			if err := ix.Deleted(ctx, c.Metadata); err != nil {
				t.Fatal(err)
			}
			for i, k := range files {
				d := ix.Decide(ctx, k, verdict.OpUnlink)
				if d.Allow != tc.deletes[i] || (!d.Allow && d.Reason != verdict.ReasonGrace) {
					t.Errorf("unlink %s after the retirement = %+v; want allowed %v (else grace)", k, d, tc.deletes[i])
				}
			}
		})
	}
}
