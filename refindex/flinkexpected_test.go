package refindex_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinkrest"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// A referenced file gone from the store is a loss unless Flink reports that it deletes the
// checkpoint itself: the checkpoint is listed as discarded in the job's history, or the job ended
// in a state its checkpoint retention deletes on (externalization as /checkpoints/config reports it)
// and the checkpoint is of this run. Expected pairs are in Expected (once in NewExpected) with their
// reason, never in Missing, New or the job's counts.
func TestLossCheckExpectedFlinkDeletions(t *testing.T) {
	ctx := context.Background()
	done := testNow.Add(-time.Hour)
	started := done.Add(-time.Hour)
	job := func(state string, externalized, deleteOnCancel bool) flinkrest.Job {
		return flinkrest.Job{ID: forstJob, State: state, Started: started, ConfigKnown: true, Externalized: externalized, DeleteOnCancellation: deleteOnCancel}
	}
	discarded := job("RUNNING", true, false)
	discarded.Discarded = []string{"file://ROOT/flink/" + forstJob + "/chk-12"}
	latestOnly := job("RUNNING", true, false)
	latestOnly.Discarded = []string{"file://ROOT/flink/" + forstJob + "/chk-11"}
	earlierRun := job("CANCELED", true, true)
	earlierRun.Started = done.Add(time.Minute)
	// A hostile or wrong endpoint: another job's history names this job's checkpoint discarded.
	foreign := job("RUNNING", true, false)
	foreign.ID = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	foreign.Discarded = []string{"file://ROOT/flink/" + forstJob + "/chk-12"}
	noConfig := job("CANCELED", true, true)
	noConfig.ConfigKnown = false
	tests := []struct {
		name   string
		rest   bool
		jobs   []flinkrest.Job
		down   bool
		expect string // in the reason; "" = a loss
	}{
		{"no --flink-rest: a loss", false, nil, false, ""},
		{"job unknown: a loss", true, nil, false, ""},
		{"CANCELED, delete_on_cancellation", true, []flinkrest.Job{job("CANCELED", true, true)}, false, "externalization.delete_on_cancellation"},
		{"CANCELED, endpoint down since its last answer", true, []flinkrest.Job{job("CANCELED", true, true)}, true, "is CANCELED on " + jm1},
		{"CANCELED, RETAIN_ON_CANCELLATION: a loss", true, []flinkrest.Job{job("CANCELED", true, false)}, false, ""},
		{"CANCELED, configuration unknown: a loss", true, []flinkrest.Job{noConfig}, false, ""},
		{"FAILED, retained on failure: a loss", true, []flinkrest.Job{job("FAILED", true, true)}, false, ""},
		{"FAILED, not externalized", true, []flinkrest.Job{job("FAILED", false, true)}, false, "not externalized"},
		{"FINISHED", true, []flinkrest.Job{job("FINISHED", true, false)}, false, "every retention deletes them when a job finishes"},
		{"CANCELED, checkpoint of an earlier run: a loss", true, []flinkrest.Job{earlierRun}, false, ""},
		{"RUNNING, history lists it discarded", true, []flinkrest.Job{discarded}, false, "lists flink/" + forstJob + "/chk-12 as discarded"},
		{"RUNNING, history lists another one discarded: a loss", true, []flinkrest.Job{latestOnly}, false, ""},
		{"another job's history lists it discarded: a loss", true, []flinkrest.Job{foreign}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ft, err := treegen.ForSt(t.TempDir(), testNow, treegen.ForStSpec{JobID: forstJob, Newest: done, WorkingMTime: done, Attempts: 1})
			if err != nil {
				t.Fatal(err)
			}
			pol := testPolicy()
			if tt.rest {
				pol.FlinkREST = []string{jm1}
			}
			ix := openIndexWith(t, t.TempDir(), localStore(t, ft.Root), pol)
			t.Cleanup(func() { ix.Close() })
			syncIndex(t, ix)
			if tt.rest {
				e := flinkrest.Endpoint{URL: jm1, Up: !tt.down, Answered: testNow.Add(-time.Minute), Polled: testNow}
				if tt.down {
					e.DownSince, e.Err = testNow, "connection refused"
				}
				for _, j := range tt.jobs {
					for i := range j.Discarded {
						j.Discarded[i] = strings.Replace(j.Discarded[i], "ROOT", ft.Root, 1)
					}
					e.Jobs = append(e.Jobs, j)
				}
				ix.SetFlink(flinkrest.Snapshot{At: testNow, Endpoints: []flinkrest.Endpoint{e}})
			}
			// Flink (or someone) deletes the checkpoint's shared file; its _metadata is still there.
			victim := ft.Job + "/shared/"
			for k := range ft.Files {
				if strings.HasPrefix(k, victim) && !strings.Contains(k, "_attempt_") {
					victim = k
				}
			}
			if err := os.Remove(filepath.Join(ft.Root, victim)); err != nil {
				t.Fatal(err)
			}
			lc := ix.NewLossChecker(refindex.LossCheckOptions{})
			for pass := range 2 {
				rep, err := lc.Check(ctx)
				if err != nil {
					t.Fatal(err)
				}
				jl := rep.Jobs[ft.Job]
				if tt.expect == "" {
					if len(rep.Missing) != 1 || rep.Missing[0].Path != victim || len(rep.Expected) != 0 || jl.BrokenCheckpoints != 1 {
						t.Fatalf("pass %d: missing %+v expected %+v job %+v; want %s lost", pass, rep.Missing, rep.Expected, jl, victim)
					}
					continue
				}
				if len(rep.Missing) != 0 || len(rep.New) != 0 || jl.BrokenCheckpoints != 0 || jl.MissingObjects != 0 {
					t.Fatalf("pass %d: missing %+v new %+v job %+v; want no loss", pass, rep.Missing, rep.New, jl)
				}
				if len(rep.Expected) != 1 || rep.Expected[0].Path != victim || !strings.Contains(rep.Expected[0].Expected, tt.expect) {
					t.Fatalf("pass %d: expected %+v; want %s with a reason naming %q", pass, rep.Expected, victim, tt.expect)
				}
				if want := 1 - pass; len(rep.NewExpected) != want {
					t.Fatalf("pass %d: new expected %+v; want %d (named once)", pass, rep.NewExpected, want)
				}
			}
		})
	}
}

// Facts older than the pass that finds a checkpoint's file gone are refreshed first (Flink marks a
// checkpoint discarded right before deleting it); a pair reported lost before Flink's report came is
// named again as expected.
func TestLossCheckExpectedAfterRefresh(t *testing.T) {
	ctx := context.Background()
	done := testNow.Add(-time.Hour)
	ft, err := treegen.ForSt(t.TempDir(), testNow, treegen.ForStSpec{JobID: forstJob, Newest: done, WorkingMTime: done, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	pol := testPolicy()
	pol.FlinkREST = []string{jm1}
	ix := openIndexWith(t, t.TempDir(), localStore(t, ft.Root), pol)
	t.Cleanup(func() { ix.Close() })
	syncIndex(t, ix)
	running := flinkrest.Job{ID: forstJob, State: "RUNNING", Started: done.Add(-time.Hour)}
	install := func(j flinkrest.Job, at time.Time) {
		ix.SetFlink(flinkrest.Snapshot{At: at, Endpoints: []flinkrest.Endpoint{{URL: jm1, Up: true, Answered: at, Polled: at, Jobs: []flinkrest.Job{j}}}})
	}
	install(running, time.Now().Add(-time.Minute)) // before the deletion
	discarded := running
	discarded.Discarded = []string{"file://" + ft.Root + "/flink/" + forstJob + "/chk-12"}
	var victim string
	for k := range ft.Files {
		if strings.HasPrefix(k, ft.Job+"/shared/") && !strings.Contains(k, "_attempt_") {
			victim = k
		}
	}
	if err := os.Remove(filepath.Join(ft.Root, victim)); err != nil {
		t.Fatal(err)
	}
	refreshes := 0
	lc := ix.NewLossChecker(refindex.LossCheckOptions{FlinkRefresh: func(context.Context) {
		refreshes++
		install(discarded, time.Now())
	}})
	rep, err := lc.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if refreshes != 1 || len(rep.New) != 0 || len(rep.NewExpected) != 1 {
		t.Fatalf("%d refreshes, new %+v, new expected %+v; want one refresh and the pair expected at once", refreshes, rep.New, rep.NewExpected)
	}
	if rep, err = lc.Check(ctx); err != nil || refreshes != 1 || len(rep.Expected) != 1 || len(rep.NewExpected) != 0 {
		t.Fatalf("second pass: %v, %d refreshes, %+v; want no refresh (nothing new), the pair still expected", err, refreshes, rep)
	}

	// Without a refresh the pair is a loss first, then expected once Flink's report comes.
	lc2 := ix.NewLossChecker(refindex.LossCheckOptions{})
	install(running, time.Now())
	if rep, err = lc2.Check(ctx); err != nil || len(rep.New) != 1 || len(rep.Expected) != 0 {
		t.Fatalf("without Flink's report: %v %+v; want a new loss", err, rep)
	}
	install(discarded, time.Now())
	if rep, err = lc2.Check(ctx); err != nil || len(rep.Missing) != 0 || len(rep.NewExpected) != 1 {
		t.Fatalf("once Flink reports it discarded: %v %+v; want it named again, as expected", err, rep)
	}
}

// A job id reported RUNNING by one endpoint and FINISHED by another (a colliding id on another
// cluster, or a wrong endpoint): the job still runs, so a file of its checkpoint gone is a loss,
// never expected by the other endpoint's end-of-job retention.
func TestLossCheckExpectedNotWhileLiveElsewhere(t *testing.T) {
	ctx := context.Background()
	done := testNow.Add(-time.Hour)
	ft, err := treegen.ForSt(t.TempDir(), testNow, treegen.ForStSpec{JobID: forstJob, Newest: done, WorkingMTime: done, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	pol := testPolicy()
	pol.FlinkREST = []string{jm1, jm2}
	ix := openIndexWith(t, t.TempDir(), localStore(t, ft.Root), pol)
	t.Cleanup(func() { ix.Close() })
	syncIndex(t, ix)
	run := flinkrest.Job{ID: forstJob, State: "RUNNING", Started: done.Add(-time.Hour), ConfigKnown: true, Externalized: true}
	fin := run
	fin.State = "FINISHED"
	ix.SetFlink(flinkrest.Snapshot{At: testNow, Endpoints: []flinkrest.Endpoint{
		{URL: jm1, Up: true, Answered: testNow, Polled: testNow, Jobs: []flinkrest.Job{run}},
		{URL: jm2, Up: true, Answered: testNow, Polled: testNow, Jobs: []flinkrest.Job{fin}}}})
	victim := ""
	for k := range ft.Files {
		if strings.HasPrefix(k, ft.Job+"/shared/") && !strings.Contains(k, "_attempt_") {
			victim = k
		}
	}
	if err := os.Remove(filepath.Join(ft.Root, victim)); err != nil {
		t.Fatal(err)
	}
	rep, err := ix.NewLossChecker(refindex.LossCheckOptions{}).Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Missing) != 1 || len(rep.Expected) != 0 {
		t.Fatalf("missing %+v expected %+v; want %s lost (its job runs on %s)", rep.Missing, rep.Expected, victim, jm1)
	}
}
