package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinkrest"
)

// jobs puts Flink's reports beside the store's folders and names the two mismatches: a job running with
// no checkpoint in the store, and a store job no cluster knows.
func TestJoinJobs(t *testing.T) {
	const run, gone, fresh = "6c79f1a2b3c4d5e6f708192a3b4c5d6e", "0a1b2c3d4e5f60718293a4b5c6d7e8f9", "ffeeddccbbaa99887766554433221100"
	eps := []flinkrest.Endpoint{{URL: "http://jm:8081", Up: true, Answered: time.Now(), Jobs: []flinkrest.Job{{ID: run, State: "RUNNING"}, {ID: fresh, State: "RUNNING"}}},
		{URL: "http://jm2:8081", Err: "connection refused"}}
	ck := &refindex.CheckpointsResult{Jobs: []refindex.JobCheckpoints{
		{Job: "flink/" + run, Count: 2, Checkpoints: []refindex.CheckpointInfo{{Completed: time.Now().Add(-time.Minute)}}},
		{Job: "flink/" + gone, Count: 1},
		{Job: "savepoints", Count: 1},
	}}
	r := joinJobs(eps, ck)
	if len(r.Jobs) != 3 {
		t.Fatalf("jobs %+v; want 3 (the savepoint folder is no job)", r.Jobs)
	}
	var b bytes.Buffer
	printJobs(&b, r)
	out := b.String()
	for _, want := range []string{
		run + "  RUNNING on http://jm:8081  flink/" + run + " (2 checkpoints, newest 1m ago)  protected: not terminated",
		gone + "  -  flink/" + gone + " (1 checkpoints)  no cluster reports it",
		fresh + "  RUNNING on http://jm:8081  -  running with no checkpoint in the store",
		"endpoint http://jm2:8081: DOWN: connection refused (never answered",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("jobs output lacks %q:\n%s", want, out)
		}
	}
}
