package refindex_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// TestNewestCheckpointByFolder: the "newest checkpoint of an active job" protection (rule 3's
// policy) goes to _metadata files in chk-<n> folders only, and ties protect every record. A copy of
// the newest _metadata beside it (cp -r chk-10 chk-10.bak; on the S3 mount even mv, which copies a
// folder file by file) or into a made-up chk-11 has the copied content id and a later mtime, and
// used to take the protection from the original. The older checkpoint stays deletable, so the test
// also fails when everything is protected.
func TestNewestCheckpointByFolder(t *testing.T) {
	const job = "flink/00000000000000000000000000000000"
	type ck struct {
		dir string
		id  int64
		age time.Duration
	}
	tests := []struct {
		name      string
		ckpts     []ck
		protected []string // folders whose _metadata unlink must be refused as the newest
		deletable []string // folders whose _metadata unlink must be allowed
	}{
		{"plain", []ck{{"chk-9", 9, 2 * time.Hour}, {"chk-10", 10, time.Hour}},
			[]string{"chk-10"}, []string{"chk-9"}},
		{"sibling copy of the folder", []ck{{"chk-9", 9, 2 * time.Hour}, {"chk-10", 10, time.Hour}, {"chk-10.bak", 10, time.Minute}},
			[]string{"chk-10"}, []string{"chk-9", "chk-10.bak"}},
		{"cp -p copy beside it (same mtime)", []ck{{"chk-9", 9, 2 * time.Hour}, {"chk-10", 10, time.Hour}, {"chk-10.bak", 10, time.Hour}},
			[]string{"chk-10"}, []string{"chk-9", "chk-10.bak"}},
		{"two checkpoints completed at the same time", []ck{{"chk-9", 9, time.Hour}, {"chk-10", 10, time.Hour}, {"chk-8", 8, 2 * time.Hour}},
			[]string{"chk-9", "chk-10"}, []string{"chk-8"}},
		{"copy set aside to inspect", []ck{{"chk-9", 9, 2 * time.Hour}, {"chk-10", 10, time.Hour}, {"inspect", 10, time.Minute}},
			[]string{"chk-10"}, []string{"chk-9", "inspect"}},
		{"copy into a made-up newer folder", []ck{{"chk-9", 9, 2 * time.Hour}, {"chk-10", 10, time.Hour}, {"chk-11", 10, time.Minute}},
			[]string{"chk-10"}, []string{"chk-9", "chk-11"}},
		{"copy of the latest completed after restarted ids", []ck{{"chk-100", 100, 48 * time.Hour}, {"chk-51", 51, time.Hour}, {"chk-52", 51, time.Minute}},
			[]string{"chk-100", "chk-51"}, []string{"chk-52"}},
		{"restarted ids: the latest completed is protected too", []ck{{"chk-100", 100, 48 * time.Hour}, {"chk-51", 51, time.Hour}, {"chk-50", 50, 2 * time.Hour}},
			[]string{"chk-100", "chk-51"}, []string{"chk-50"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tc.ckpts {
				if _, err := tr.Checkpoint(treegen.Spec{Dir: job + "/" + c.dir, Job: job, ID: c.id, Completed: testNow.Add(-c.age)}); err != nil {
					t.Fatal(err)
				}
			}
			ix := openTree(t, tr)
			ctx := context.Background()
			for _, dir := range tc.protected {
				d := ix.Decide(ctx, job+"/"+dir+"/_metadata", verdict.OpUnlink)
				if d.Allow || d.Reason != verdict.ReasonProtectedMetadata {
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

// TestChmodDecision: OpChmod (a change that narrows who may read) and OpAppend (a writer continuing its
// own file) are refused for what a live checkpoint needs, for a folder holding such a file, and for the
// newest checkpoint's _metadata; unlike a deletion they are allowed on a young unreferenced file (cp -a
// sets the modes of the files it has just written; an appending writer has just written its file).
func TestChmodDecision(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Checkpoint(treegen.Spec{Dir: "j2/chk-3", Job: "j2", ID: 3, Completed: testNow.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, tr)
	const job = "flink/fedcba9876543210fedcba9876543210"
	young := youngFile(t, tr, job+"/shared")
	if d := ix.Decide(ctx, young, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonGrace {
		t.Fatalf("unlink of the young orphan %s = %+v; the test expects it in grace", young, d)
	}
	ref := tr.Referenced()[0]
	for _, tc := range []struct {
		key    string
		allow  bool
		reason verdict.Reason
	}{
		{young, true, verdict.ReasonAllowed},
		{ref, false, verdict.ReasonReferenced},
		{job + "/shared", false, verdict.ReasonReferenced},
		{"j2/chk-3/_metadata", false, verdict.ReasonProtectedMetadata}, // the newest, completed an hour ago
		{"j2", false, verdict.ReasonProtectedMetadata},
	} {
		for _, op := range []verdict.Op{verdict.OpChmod, verdict.OpAppend} {
			if op == verdict.OpAppend && (tc.key == job+"/shared" || tc.key == "j2") {
				continue // a folder is chmodded, never appended to
			}
			if d := ix.Decide(ctx, tc.key, op); d.Allow != tc.allow || d.Reason != tc.reason {
				t.Errorf("%s %s = %+v; want allowed %v (%s)", op, tc.key, d, tc.allow, tc.reason)
			}
		}
	}
}

// youngFile returns the file of dir (a store folder of tr) modified within the last hour of testNow.
func youngFile(t *testing.T, tr *treegen.Tree, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(tr.Root, dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.ModTime().After(testNow.Add(-time.Hour)) {
			return dir + "/" + e.Name()
		}
	}
	t.Fatalf("no young file in %s", dir)
	return ""
}
