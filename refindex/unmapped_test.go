package refindex_test

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// References that no --map ties to the store: where the store holds every referenced file at the same
// relative place the mapping is applied (and reported); where it does not, every file that could be a
// referenced one is refused and the refusal names the --map to add; --external declares them elsewhere.
func TestUnmappedReferences(t *testing.T) {
	ctx := context.Background()
	const job = "flink/fedcba9876543210fedcba9876543210"
	type want struct {
		reason   verdict.Reason // of unlinking a referenced shared file
		message  string         // in that refusal (and in why)
		inferred []string
		untrusty bool // verify and orphans cannot be trusted
		broken   bool
	}
	tests := []struct {
		name   string
		setup  func(t *testing.T, tr *treegen.Tree, lost string) // lost: a referenced shared file
		maps   []pathnorm.Mapping
		extern []string
		want   want
	}{
		{name: "store proves the map", want: want{reason: verdict.ReasonReferenced, message: "mapping file:/mnt/flink/flink=flink is applied", inferred: []string{"file:/mnt/flink/flink=flink"}}},
		{name: "store relocated below another folder", setup: func(t *testing.T, tr *treegen.Tree, lost string) {
			if err := os.MkdirAll(filepath.Join(tr.Root, "moved"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(tr.Root, "flink"), filepath.Join(tr.Root, "moved", "flink")); err != nil {
				t.Fatal(err)
			}
		}, want: want{reason: verdict.ReasonReferenced, inferred: []string{"file:/mnt/flink/flink=moved/flink"}}},
		{name: "a referenced file is missing: not proven", setup: remove,
			want: want{reason: verdict.ReasonUnmappedReferences, message: "add --map file:/mnt/flink= if that storage is this store under another name, or --external file:/mnt/flink/flink/fedcba9876543210fedcba9876543210/shared", untrusty: true}},
		{name: "declared external", setup: remove, extern: []string{"file:/mnt"}, want: want{reason: verdict.ReasonAllowed}},
		{name: "explicit map wins", setup: remove, maps: []pathnorm.Mapping{{From: "file:/mnt/flink"}}, want: want{reason: verdict.ReasonReferenced, broken: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := treegen.YoungOrphan(t.TempDir(), testNow, treegen.Options{URIPrefix: "file:/mnt/flink"})
			if err != nil {
				t.Fatal(err)
			}
			var shared []string
			for _, c := range tr.Live {
				for _, r := range c.Refs {
					if strings.Contains(r, "/shared/") {
						shared = append(shared, r)
					}
				}
			}
			slices.Sort(shared)
			garbage := tr.Orphans(treegen.DefaultPolicy, 0)
			if len(shared) < 2 || len(garbage) == 0 {
				t.Fatalf("scenario: shared %v garbage %v", shared, garbage)
			}
			base := job
			if tc.setup != nil {
				tc.setup(t, tr, shared[0])
				if _, err := os.Stat(filepath.Join(tr.Root, job)); err != nil {
					base = "moved/" + job
				}
			}
			at := func(k string) string { return base + strings.TrimPrefix(k, job) }
			st, err := localstore.New(tr.Root)
			if err != nil {
				t.Fatal(err)
			}
			ix, err := refindex.Open(t.TempDir(), st, testPolicy(), refindex.WithLogger(quiet), refindex.WithPathMap(tc.maps, ""), refindex.WithExternal(tc.extern))
			if err != nil {
				t.Fatal(err)
			}
			defer ix.Close()
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			k := at(shared[1])
			d := ix.Decide(ctx, k, verdict.OpUnlink)
			if d.Reason != tc.want.reason || d.Allow != (tc.want.reason == verdict.ReasonAllowed) {
				t.Fatalf("unlink %s: %+v, want %s", k, d, tc.want.reason)
			}
			why, err := ix.Why(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(why.Message, tc.want.message) {
				t.Errorf("why %s: %q, want it to say %q", k, why.Message, tc.want.message)
			}
			if tc.want.reason == verdict.ReasonUnmappedReferences {
				// Everything that could be a referenced file is refused, whole folders included; files
				// of other names are not.
				for _, p := range []string{base, path.Dir(base), ""} {
					if d := ix.Decide(ctx, p, verdict.OpRmdir); d.Allow || d.Reason != verdict.ReasonUnmappedReferences {
						t.Errorf("rmdir %q: %+v", p, d)
					}
				}
				if d := ix.Decide(ctx, at(shared[1]), verdict.OpRename); d.Allow {
					t.Errorf("rename %s: %+v", shared[1], d)
				}
				for _, g := range garbage {
					if d := ix.Decide(ctx, at(g), verdict.OpUnlink); !d.Allow {
						t.Errorf("garbage %s refused: %+v", g, d)
					}
				}
			}
			s, err := ix.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.InferredMaps, tc.want.inferred) || (s.UnmappedReferences > 0) != tc.want.untrusty || (s.Unmapped != "") != tc.want.untrusty {
				t.Errorf("stats: inferred %v unmapped %d %q, want %v untrusted=%v", s.InferredMaps, s.UnmappedReferences, s.Unmapped, tc.want.inferred, tc.want.untrusty)
			}
			cs, err := ix.Checkpoints(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := cs.Jobs[0].Checkpoints[0]; !slices.Equal(got.InferredMaps, tc.want.inferred) || (got.Unmapped > 0) != tc.want.untrusty {
				t.Errorf("checkpoints: %+v", got)
			}
			vr, err := ix.Verify(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if (vr.Untrusted != "") != tc.want.untrusty || (len(vr.Broken) > 0) != tc.want.broken || vr.OK != (!tc.want.untrusty && !tc.want.broken) {
				t.Errorf("verify: %+v", vr)
			}
			if tc.want.untrusty && (vr.UnmappedSkipped == 0 || !strings.Contains(vr.Untrusted, "--map file:/mnt/flink=")) {
				t.Errorf("verify does not say what it skipped: %+v", vr)
			}
			if len(tc.extern) > 0 && vr.ExternalSkipped == 0 {
				t.Errorf("verify does not count external references: %+v", vr)
			}
			or, err := ix.Orphans(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if (or.Blocked != "") != tc.want.untrusty {
				t.Errorf("orphans: %+v", or)
			}
		})
	}
}

func remove(t *testing.T, tr *treegen.Tree, lost string) {
	t.Helper()
	if err := os.Remove(filepath.Join(tr.Root, lost)); err != nil {
		t.Fatal(err)
	}
}

// An unmapped directory handle (file merging) could be any folder: everything but a _metadata is refused.
func TestUnmappedDirectoryHandle(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow, treegen.Options{URIPrefix: "file:/mnt/flink"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tr.Checkpoint(treegen.Spec{Dir: "flink/abab/chk-3", ID: 3, Completed: testNow.Add(-48 * time.Hour),
		Dirs: []string{"hdfs://nn:8020/elsewhere/abab/shared/job_abab_op_x_0_1"}})
	if err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, tr)
	garbage := tr.Orphans(treegen.DefaultPolicy, 0)
	for _, k := range garbage {
		if d := ix.Decide(ctx, k, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonUnmappedReferences || !strings.Contains(d.Message, "anything in the store") {
			t.Errorf("unlink %s with an unmapped directory handle: %+v", k, d)
		}
	}
	if d := ix.Decide(ctx, "flink/abab/chk-3/_metadata", verdict.OpUnlink); d.Reason == verdict.ReasonUnmappedReferences {
		t.Errorf("the _metadata with the unmapped handle cannot be retired: %+v", d)
	}
}

// A _metadata whose references the store could not place is read again at every sync: once the missing
// file is back (a copy that was still running), the mapping is proven and the refusals by name end.
func TestUnmappedResolvedByLaterSync(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow, treegen.Options{URIPrefix: "file:/mnt/flink"})
	if err != nil {
		t.Fatal(err)
	}
	var shared string
	for _, c := range tr.Live {
		for _, r := range c.Refs {
			if strings.Contains(r, "/shared/") {
				shared = r
			}
		}
	}
	p := filepath.Join(tr.Root, shared)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)
	os.Remove(p)
	ix := openTree(t, tr)
	if s, _ := ix.Stats(ctx); s.UnmappedReferences == 0 {
		t.Fatalf("no unmapped references with %s missing: %+v", shared, s)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(p, fi.ModTime(), fi.ModTime())
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if s, _ := ix.Stats(ctx); s.UnmappedReferences != 0 || len(s.InferredMaps) != 1 {
		t.Fatalf("after the file is back: %+v", s)
	}
	if d := ix.Decide(ctx, shared, verdict.OpUnlink); d.Reason != verdict.ReasonReferenced {
		t.Fatalf("unlink %s: %+v", shared, d)
	}
	// Asked about the URI as Flink wrote it, why answers for the file the inferred mapping names.
	why, err := ix.Why(ctx, "file:/mnt/flink/"+shared)
	if err != nil || why.Outside || why.Path != shared || why.Reason != verdict.ReasonReferenced {
		t.Fatalf("why by URI: %+v %v", why, err)
	}
}
