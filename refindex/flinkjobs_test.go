package refindex_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/flinkrest"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

const (
	jm1      = "http://jm1:8081"
	jm2      = "http://jm2:8081"
	otherJob = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
)

// With --flink-rest, what Flink reports decides for the folders named by its jobs' ids, whatever the
// files' age: every file here is 10 days old and the job's newest checkpoint too, so the store's own
// rules (grace, active window, ForSt by layout) let everything go. A job Flink reports not terminated
// keeps its folder, working folders and restore point; an endpoint that does not answer keeps what it
// may own; folders no job id names are never affected.
func TestFlinkRESTDecisions(t *testing.T) {
	ctx := context.Background()
	day := 24 * time.Hour
	old := testNow.Add(-10 * day)
	running := func(state string) flinkrest.Job {
		return flinkrest.Job{ID: forstJob, Name: "orders", State: state, InProgressCount: 1, InProgress: []int64{13},
			Restored: "file://ROOT/flink/" + otherJob + "/chk-12", LatestCompleted: "file://ROOT/flink/" + forstJob + "/chk-12"}
	}
	up := func(url string, jobs ...flinkrest.Job) flinkrest.Endpoint {
		return flinkrest.Endpoint{URL: url, Up: true, Answered: testNow.Add(-time.Second), Jobs: jobs}
	}
	down := func(url string, answered time.Time, jobs ...flinkrest.Job) flinkrest.Endpoint {
		return flinkrest.Endpoint{URL: url, Answered: answered, DownSince: testNow.Add(-time.Minute), Err: "dial tcp 10.0.0.1:8081: connection refused", Jobs: jobs}
	}
	never := flinkrest.Endpoint{URL: jm2, DownSince: testNow.Add(-time.Minute), Err: "dial tcp: connection refused"}
	tests := []struct {
		name      string
		endpoints []string             // Policy.FlinkREST
		snap      []flinkrest.Endpoint // nil: SetFlink never called
		primary   string
		refused   bool
		restored  bool   // the other job's checkpoint it restored from is refused too
		want      string // in the refusals' message
	}{
		{"no --flink-rest: the store's rules", nil, nil, "", false, false, ""},
		{"RUNNING", []string{jm1}, []flinkrest.Endpoint{up(jm1, running("RUNNING"))}, "", true, true, "job " + forstJob + ` ("orders") is RUNNING on ` + jm1 + ", 1 checkpoint(s) in progress (13)"},
		{"RESTARTING", []string{jm1}, []flinkrest.Endpoint{up(jm1, running("RESTARTING"))}, "", true, true, "is RESTARTING on " + jm1},
		{"SUSPENDED is not terminal", []string{jm1}, []flinkrest.Endpoint{up(jm1, running("SUSPENDED"))}, "", true, true, "is SUSPENDED"},
		{"RUNNING, explicit primary dir", []string{jm1}, []flinkrest.Endpoint{up(jm1, running("RUNNING"))}, "forst", true, true, "is RUNNING on " + jm1},
		{"FINISHED: the store's rules", []string{jm1}, []flinkrest.Endpoint{up(jm1, running("FINISHED"))}, "", false, false, ""},
		{"CANCELED: the store's rules", []string{jm1}, []flinkrest.Endpoint{up(jm1, running("CANCELED"))}, "", false, false, ""},
		{"unknown to an answering endpoint: the store's rules", []string{jm1}, []flinkrest.Endpoint{up(jm1)}, "", false, false, ""},
		{"endpoint down, job RUNNING at its last answer", []string{jm1}, []flinkrest.Endpoint{down(jm1, testNow.Add(-time.Hour), running("RUNNING"))}, "", true, true, "was RUNNING on " + jm1 + " at its last answer 1h ago (the endpoint does not answer since"},
		{"endpoint down, job FINISHED at its last answer", []string{jm1}, []flinkrest.Endpoint{down(jm1, testNow.Add(-time.Hour), running("FINISHED"))}, "", false, false, ""},
		{"endpoint down, job unknown, checkpoint after its last answer", []string{jm1}, []flinkrest.Endpoint{down(jm1, old.Add(-day))}, "", true, false, "wrote a checkpoint after its last answer"},
		{"endpoint down, job unknown, checkpoint before its last answer", []string{jm1}, []flinkrest.Endpoint{down(jm1, testNow.Add(-time.Hour))}, "", false, false, ""},
		{"endpoint never answered", []string{jm2}, []flinkrest.Endpoint{never}, "", true, false, "has not answered since the mount started"},
		{"not polled yet", []string{jm1}, nil, "", true, false, "has not answered since the mount started (it has not been polled yet)"},
		{"never answered, another reports the job FINISHED", []string{jm1, jm2}, []flinkrest.Endpoint{up(jm1, running("FINISHED")), never}, "", false, false, ""},
		{"never answered, another reports the job RUNNING", []string{jm1, jm2}, []flinkrest.Endpoint{up(jm1, running("RUNNING")), never}, "", true, true, "is RUNNING on " + jm1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ft, err := treegen.ForSt(t.TempDir(), testNow, treegen.ForStSpec{JobID: forstJob, Newest: old, WorkingMTime: old, Attempts: 2, Primary: tt.primary})
			if err != nil {
				t.Fatal(err)
			}
			// The checkpoint the job restored from, in another job's folder, and garbage no job id names.
			src, err := ft.Checkpoint(treegen.Spec{Dir: "flink/" + otherJob + "/chk-12", ID: 12, Completed: old, Private: []string{"a1b2"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := ft.Data(src, old); err != nil {
				t.Fatal(err)
			}
			unrelated := "scratch/tmp-export/part-0"
			if err := ft.Write(unrelated, 10, old); err != nil {
				t.Fatal(err)
			}
			pol := testPolicy()
			pol.FlinkREST = tt.endpoints
			if tt.primary != "" {
				pol.ForStPrimary = []string{tt.primary}
			}
			ix := openIndexWith(t, t.TempDir(), localStore(t, ft.Root), pol)
			t.Cleanup(func() { ix.Close() })
			syncIndex(t, ix)
			if tt.snap != nil {
				snap := flinkrest.Snapshot{At: testNow, Endpoints: tt.snap}
				for i, e := range snap.Endpoints {
					jobs := append([]flinkrest.Job(nil), e.Jobs...)
					for j := range jobs {
						jobs[j].Restored = strings.Replace(jobs[j].Restored, "ROOT", ft.Root, 1)
						jobs[j].LatestCompleted = strings.Replace(jobs[j].LatestCompleted, "ROOT", ft.Root, 1)
					}
					snap.Endpoints[i].Jobs = jobs
				}
				ix.SetFlink(snap)
			}
			check := func(key string, op verdict.Op, refused bool, want string) {
				t.Helper()
				d := ix.Decide(ctx, key, op)
				if refused {
					if d.Allow || d.Reason != verdict.ReasonFlinkRunning || !strings.Contains(d.Message, want) {
						t.Errorf("%s %s: %+v; want refused as %s naming %q", op, key, d, verdict.ReasonFlinkRunning, want)
					}
					return
				}
				if !d.Allow {
					t.Errorf("%s %s: %+v; want allowed (the store's rules)", op, key, d)
				}
			}
			for _, k := range ft.Working {
				check(k, verdict.OpUnlink, tt.refused, tt.want)
			}
			check(ft.Attempts[0], verdict.OpRmdir, tt.refused, tt.want)
			// The job's checkpoint: 10 days old, past --active-window, so the store's rules let it go.
			check(ft.Job+"/chk-12/_metadata", verdict.OpUnlink, tt.refused, "job "+forstJob)
			// Folders holding live checkpoints are refused anyway (their references); judged below them.
			if tt.refused {
				for _, dir := range []string{ft.Job, "flink"} {
					if d := ix.Decide(ctx, dir, verdict.OpRename); d.Allow {
						t.Errorf("rename %s: %+v; want refused", dir, d)
					}
				}
			}
			// The restore point in the other job's folder.
			if tt.restored {
				check("flink/"+otherJob+"/chk-12/_metadata", verdict.OpUnlink, true, "restored from of job "+forstJob)
			}
			check(unrelated, verdict.OpUnlink, false, "")
		})
	}
}

// stats shows the endpoints, up or not, with the jobs of their last answer.
func TestFlinkRESTStats(t *testing.T) {
	ft, err := treegen.ForSt(t.TempDir(), testNow, treegen.ForStSpec{JobID: forstJob, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	pol := testPolicy()
	pol.FlinkREST = []string{jm1, jm2}
	ix := openIndexWith(t, t.TempDir(), localStore(t, ft.Root), pol)
	t.Cleanup(func() { ix.Close() })
	syncIndex(t, ix)
	ix.SetFlink(flinkrest.Snapshot{At: testNow, Endpoints: []flinkrest.Endpoint{{URL: jm1, Up: true, Answered: testNow, Jobs: []flinkrest.Job{{ID: forstJob, State: "RUNNING"}}}}})
	s, err := ix.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Flink == nil || len(s.Flink.Endpoints) != 2 || !s.Flink.Endpoints[0].Up || s.Flink.Endpoints[1].URL != jm2 || s.Flink.Endpoints[1].Up {
		t.Fatalf("stats flink: %+v; want %s up and %s never answered", s.Flink, jm1, jm2)
	}
}
