package refindex_test

import (
	"context"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

const forstJob = "6c79f1a2b3c4d5e6f708192a3b4c5d6e"

// Without Flink's REST API, ForSt working folders are protected by layout while the store shows their
// job active: its newest checkpoint within --active-window, or a file of its working folders modified
// within it. Every file there is 10 days old (a `find -mtime +7` matches it), so without this rule
// --grace and the references would let it go.
func TestForStWorkingDirByLayout(t *testing.T) {
	ctx := context.Background()
	day := 24 * time.Hour
	tests := []struct {
		name    string
		spec    treegen.ForStSpec
		primary func(root string) []string // --forst-primary
		window  time.Duration
		refused bool
		signal  string // in the message of a refusal
	}{
		{"default layout, checkpoint 3m ago", treegen.ForStSpec{Newest: testNow.Add(-3 * time.Minute), WorkingMTime: testNow.Add(-10 * day), Attempts: 2}, nil, 7 * day, true, "newest checkpoint flink/" + forstJob + "/chk-12 3m"},
		{"default layout, checkpoints stopped 10d ago, db written 2h ago", treegen.ForStSpec{Newest: testNow.Add(-10 * day), WorkingMTime: testNow.Add(-2 * time.Hour), Attempts: 2}, nil, 7 * day, true, "modified 2h"},
		{"default layout, no checkpoint yet, db written 2h ago", treegen.ForStSpec{WorkingMTime: testNow.Add(-2 * time.Hour), Attempts: 1}, nil, 7 * day, true, "modified 2h"},
		{"default layout, inactive for 10d", treegen.ForStSpec{Newest: testNow.Add(-10 * day), WorkingMTime: testNow.Add(-10 * day), Attempts: 2}, nil, 7 * day, false, ""},
		{"default layout, --active-window 0 switches it off", treegen.ForStSpec{Newest: testNow.Add(-3 * time.Minute), WorkingMTime: testNow.Add(-10 * day), Attempts: 2}, nil, 0, false, ""},
		{"explicit primary dir", treegen.ForStSpec{Primary: "forst", Newest: testNow.Add(-3 * time.Minute), WorkingMTime: testNow.Add(-10 * day), Attempts: 2},
			func(string) []string { return []string{"forst"} }, 7 * day, true, "newest checkpoint flink/" + forstJob + "/chk-12"},
		{"explicit primary dir as the URI Flink has", treegen.ForStSpec{Primary: "forst", Newest: testNow.Add(-3 * time.Minute), WorkingMTime: testNow.Add(-10 * day), Attempts: 2},
			func(root string) []string { return []string{"file://" + root + "/forst/"} }, 7 * day, true, "newest checkpoint"},
		{"explicit primary dir, working files the only signal", treegen.ForStSpec{Primary: "forst", WorkingMTime: testNow.Add(-3 * day), Attempts: 1},
			func(string) []string { return []string{"forst"} }, 7 * day, true, "modified 3d"},
		{"explicit primary dir, inactive", treegen.ForStSpec{Primary: "forst", Newest: testNow.Add(-10 * day), WorkingMTime: testNow.Add(-10 * day), Attempts: 2},
			func(string) []string { return []string{"forst"} }, 7 * day, false, ""},
		{"explicit primary dir not configured", treegen.ForStSpec{Primary: "forst", Newest: testNow.Add(-3 * time.Minute), WorkingMTime: testNow.Add(-10 * day), Attempts: 2}, nil, 7 * day, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.JobID = forstJob
			ft, err := treegen.ForSt(t.TempDir(), testNow, tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			pol := testPolicy()
			pol.ActiveWindow = tt.window
			if tt.primary != nil {
				pol.ForStPrimary = tt.primary(ft.Root)
			}
			ix := openIndexWith(t, t.TempDir(), localStore(t, ft.Root), pol)
			t.Cleanup(func() { ix.Close() })
			syncIndex(t, ix)
			check := func(key string, op verdict.Op) {
				t.Helper()
				d := ix.Decide(ctx, key, op)
				if tt.refused {
					if d.Allow || d.Reason != verdict.ReasonForStWorkingDir || !strings.Contains(d.Message, tt.signal) || !strings.Contains(d.Message, "job "+forstJob+" is active") {
						t.Errorf("%s %s: %+v; want refused as %s naming %q", op, key, d, verdict.ReasonForStWorkingDir, tt.signal)
					}
					return
				}
				if !d.Allow {
					t.Errorf("%s %s: %+v; want allowed (the job is not active by the store's signals)", op, key, d)
				}
			}
			for _, k := range ft.Working {
				check(k, verdict.OpUnlink)
				check(k, verdict.OpTruncate)
			}
			// rm -rf of an older attempt folder, a rename of the newest one away, the db folder.
			check(ft.Attempts[0], verdict.OpRmdir)
			check(ft.Attempts[len(ft.Attempts)-1], verdict.OpRename)
			check(ft.Attempts[0]+"/db", verdict.OpRmdir)
			// A folder above the working folders is judged by what is below it.
			above := path.Dir(ft.Attempts[0])
			d := ix.Decide(ctx, above, verdict.OpRename)
			if tt.refused && d.Allow {
				t.Errorf("rename %s (above the working folders): %+v; want refused", above, d)
			}
			if tt.refused && d.Reason == verdict.ReasonForStWorkingDir && !strings.Contains(d.Message, "(below it)") {
				t.Errorf("rename %s: %q does not say the working folder is below it", above, d.Message)
			}
		})
	}
}

// Files of the job folder outside the working folders keep their usual rules: an old unreferenced
// file is deletable while the job is active.
func TestForStOnlyWorkingFolders(t *testing.T) {
	ctx := context.Background()
	ft, err := treegen.ForSt(t.TempDir(), testNow, treegen.ForStSpec{JobID: forstJob, Newest: testNow.Add(-3 * time.Minute), WorkingMTime: testNow.Add(-240 * time.Hour), Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	orphan := ft.Job + "/shared/0a1b2c3d-old-orphan"
	if err := ft.Write(orphan, 10, testNow.Add(-240*time.Hour)); err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, ft.Tree)
	if d := ix.Decide(ctx, orphan, verdict.OpUnlink); !d.Allow {
		t.Errorf("unlink %s: %+v; want allowed", orphan, d)
	}
}

// A --forst-primary that maps outside the store is a clear error, not a rule that protects nothing.
func TestForStPrimaryOutsideStore(t *testing.T) {
	ft, err := treegen.ForSt(t.TempDir(), testNow, treegen.ForStSpec{JobID: forstJob, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, ft.Tree)
	for _, p := range []string{"s3://elsewhere/forst", "/not/the/store", "a/../../b"} {
		pol := ix.Policy()
		pol.ForStPrimary = []string{p}
		if err := ix.SetPolicy(pol); err == nil || !strings.Contains(err.Error(), "--forst-primary") {
			t.Errorf("--forst-primary %q: %v; want an error naming the flag", p, err)
		}
	}
	pol := testPolicy()
	pol.ForStPrimary = []string{"s3://elsewhere/forst"}
	if _, err := refindex.Open(t.TempDir(), localStore(t, ft.Root), pol); err == nil {
		t.Error("Open with a --forst-primary outside the store: no error")
	}
}
