package refindex_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
)

type fakeQuarantine map[string]refindex.QuarantinedObject

func (f fakeQuarantine) FindQuarantined(_ context.Context, key string) (refindex.QuarantinedObject, bool, error) {
	q, ok := f[key]
	return q, ok, nil
}

// referencedBy lists the live checkpoints whose references include key.
func referencedBy(t *testing.T, ix *refindex.Index, key string) []string {
	t.Helper()
	w, err := ix.Why(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return w.Referencing
}

// TestLossCheck: a referenced state file deleted directly on the store is reported for every live
// checkpoint that references it, once as new, with per-job counts, and no longer once it is back.
func TestLossCheck(t *testing.T) {
	for _, tc := range []struct {
		name       string
		budget     int
		quarantine bool
	}{
		{"every object each pass", 0, false},
		{"budget of one object per pass", 1, false},
		{"budget of three", 3, false},
		{"object in quarantine", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			root, prefix := drillStore(t, "2.2", "incremental")
			ix := openListingIndex(t, localStore(t, root), prefix)
			var qf refindex.QuarantineFinder
			victim, _ := largestState(t, root)
			qobj := refindex.QuarantinedObject{Since: time.Unix(1e9, 0), Restore: "ckguard quarantine restore " + victim}
			if tc.quarantine {
				qf = fakeQuarantine{victim: qobj}
			}
			lc := ix.NewLossChecker(refindex.LossCheckOptions{Budget: tc.budget, Quarantine: qf})

			// Intact: a rotation completes with nothing missing.
			var rep *refindex.LossReport
			passes := 0
			for {
				var err error
				if rep, err = lc.Check(ctx); err != nil {
					t.Fatal(err)
				}
				passes++
				if len(rep.Missing) != 0 {
					t.Fatalf("intact store: missing %+v", rep.Missing)
				}
				if rep.Complete {
					break
				}
				if !rep.LastComplete.IsZero() {
					t.Fatalf("pass %d: LastComplete set before any rotation ended", passes)
				}
			}
			if want := 1; tc.budget > 0 {
				want = (rep.Objects + tc.budget - 1) / tc.budget
				if passes != want {
					t.Fatalf("rotation of %d objects with budget %d took %d passes, want %d", rep.Objects, tc.budget, passes, want)
				}
			} else if passes != want {
				t.Fatalf("unbudgeted check took %d passes", passes)
			}
			if rep.Objects == 0 || len(rep.Jobs) == 0 {
				t.Fatalf("nothing checked: %+v", rep)
			}
			for j, l := range rep.Jobs {
				if l != (refindex.JobLoss{}) {
					t.Fatalf("job %s: %+v on an intact store", j, l)
				}
			}

			refs := referencedBy(t, ix, victim)
			if len(refs) == 0 {
				t.Fatalf("%s is referenced by no checkpoint", victim)
			}
			b, err := os.ReadFile(filepath.Join(root, victim))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(root, victim)); err != nil {
				t.Fatal(err)
			}
			// Within one rotation the loss is found, for every referencing checkpoint.
			found := false
			for i := 0; i < passes && !found; i++ {
				if rep, err = lc.Check(ctx); err != nil {
					t.Fatal(err)
				}
				found = len(rep.New) > 0
			}
			if !found {
				t.Fatalf("deleted %s not reported within one rotation (%d passes)", victim, passes)
			}
			var got []string
			for _, m := range rep.New {
				if m.Path != victim {
					t.Fatalf("reported %s, deleted %s", m.Path, victim)
				}
				if tc.quarantine != (m.Quarantine != nil) || tc.quarantine && *m.Quarantine != qobj {
					t.Fatalf("quarantine of %s: %+v", m.Path, m.Quarantine)
				}
				got = append(got, m.Checkpoint)
			}
			slices.Sort(got)
			slices.Sort(refs)
			if !slices.Equal(got, refs) {
				t.Fatalf("reported for %v, referenced by %v", got, refs)
			}
			job := rep.New[0].Job
			if l := rep.Jobs[job]; l.BrokenCheckpoints != len(refs) || l.MissingObjects != 1 {
				t.Fatalf("job %s: %+v, want %d broken, 1 missing", job, l, len(refs))
			}
			// The next pass still reports it (it is re-checked whatever the budget), not as new.
			if rep, err = lc.Check(ctx); err != nil {
				t.Fatal(err)
			}
			if len(rep.New) != 0 || len(rep.Missing) != len(refs) {
				t.Fatalf("second pass: new %v, missing %v", rep.New, rep.Missing)
			}
			// Back in place: reported no more.
			if err := os.WriteFile(filepath.Join(root, victim), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if rep, err = lc.Check(ctx); err != nil {
				t.Fatal(err)
			}
			if len(rep.Missing) != 0 || rep.Jobs[job] != (refindex.JobLoss{}) {
				t.Fatalf("restored object still reported: %+v %+v", rep.Missing, rep.Jobs[job])
			}
		})
	}
}

// TestLossCheckRetired: the files of a retired checkpoint (its folder deleted, _metadata first) are not
// a loss.
func TestLossCheckRetired(t *testing.T) {
	ctx := context.Background()
	root, prefix := drillStore(t, "2.2", "incremental")
	ix := openListingIndex(t, localStore(t, root), prefix)
	lc := ix.NewLossChecker(refindex.LossCheckOptions{})
	cps, err := ix.Checkpoints(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	// The checkpoint's own folder: files only it references.
	var meta string
	for _, j := range cps.Jobs {
		for _, c := range j.Checkpoints {
			if c.Kind == "checkpoint" && meta == "" {
				meta = c.Metadata
			}
		}
	}
	if meta == "" {
		t.Fatal("no checkpoint")
	}
	if err := os.RemoveAll(filepath.Join(root, filepath.Dir(meta))); err != nil {
		t.Fatal(err)
	}
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := lc.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rep.Missing {
		if m.Checkpoint == meta {
			t.Fatalf("retired %s reported: %+v", meta, m)
		}
	}
}
