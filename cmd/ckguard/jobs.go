package main

import (
	"context"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinkrest"
)

func jobsCommand() *cli.Command {
	return &cli.Command{
		Name:  "jobs",
		Usage: "list what Flink reports (--flink-rest) beside what the store shows: jobs running with no checkpoint in the store, store jobs no cluster knows",
		Description: "One line per job id: its state on each Flink REST endpoint, and its folders in the store with their live\n" +
			"checkpoints. Without --flink-rest it shows what a running mount started with --flink-rest last polled.\n" +
			"A job not in a terminal state keeps its folders, restore point and latest checkpoint protected through\n" +
			"the mount whatever their age; a store job no cluster reports is judged by the store's rules.\n\n" +
			"EXAMPLES:\n" +
			"   ckguard jobs --store /srv/flink/checkpoints --index /var/lib/ckguard/flink\n" +
			"   ckguard jobs --store /srv/flink/checkpoints --index /var/lib/ckguard/flink --flink-rest http://jm:8081 --json",
		Flags:  append(append(storeFlags(), policyFlags()...), flinkRESTFlags()...),
		Action: runJobs,
	}
}

// JobRow is one job id of `ckguard jobs`.
type JobRow struct {
	ID string `json:"id"`
	// Flink: what each endpoint reports of it (state, endpoint); empty: no cluster knows it.
	Flink []JobOnEndpoint `json:"flink,omitempty"`
	// Folders: the store's job folders named by the id, with their live checkpoints.
	Folders []JobFolder `json:"folders,omitempty"`
}

// JobOnEndpoint is an endpoint's report of a job.
type JobOnEndpoint struct {
	Endpoint string        `json:"endpoint"`
	Up       bool          `json:"endpoint_up"`
	Job      flinkrest.Job `json:"job"`
}

// JobFolder is a store folder of a job.
type JobFolder struct {
	Folder      string    `json:"folder"`
	Checkpoints int       `json:"checkpoints"`
	Newest      time.Time `json:"newest,omitzero"`
}

// JobsResult is the answer of `ckguard jobs`.
type JobsResult struct {
	Endpoints []flinkrest.Endpoint `json:"endpoints"`
	Jobs      []JobRow             `json:"jobs"`
}

func runJobs(c *cli.Context) error {
	clients, err := flinkClients(c)
	if err != nil {
		return cli.Exit("ckguard jobs: "+err.Error(), 2)
	}
	_, err = query(c, func(ctx context.Context, q refindex.Querier) (*JobsResult, error) {
		var eps []flinkrest.Endpoint
		if len(clients) > 0 {
			snap, _ := flinkrest.NewPoller(clients).Poll(ctx)
			eps = snap.Endpoints
		} else {
			st, err := q.Stats(ctx)
			if err != nil {
				return nil, err
			}
			if st.Flink == nil {
				return nil, cli.Exit("ckguard jobs: no Flink REST endpoint: give --flink-rest URL, or ask a mount started with --flink-rest", 2)
			}
			eps = st.Flink.Endpoints
		}
		ck, err := q.Checkpoints(ctx, "")
		if err != nil {
			return nil, err
		}
		return joinJobs(eps, ck), nil
	}, printJobs)
	return err
}

// joinJobs puts each job id's reports beside its store folders (a folder's last segment is the id).
func joinJobs(eps []flinkrest.Endpoint, ck *refindex.CheckpointsResult) *JobsResult {
	rows := map[string]*JobRow{}
	row := func(id string) *JobRow {
		if r := rows[id]; r != nil {
			return r
		}
		r := &JobRow{ID: id}
		rows[id] = r
		return r
	}
	for _, e := range eps {
		for _, j := range e.Jobs {
			r := row(j.ID)
			r.Flink = append(r.Flink, JobOnEndpoint{Endpoint: e.URL, Up: e.Up, Job: j})
		}
	}
	for _, j := range ck.Jobs {
		id := path.Base(j.Job)
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
			continue // a savepoint folder or another layout: no job id
		}
		f := JobFolder{Folder: j.Job, Checkpoints: j.Count}
		for _, c := range j.Checkpoints {
			if c.Completed.After(f.Newest) {
				f.Newest = c.Completed
			}
		}
		r := row(id)
		r.Folders = append(r.Folders, f)
	}
	out := &JobsResult{Endpoints: eps}
	for _, r := range rows {
		out.Jobs = append(out.Jobs, *r)
	}
	sort.Slice(out.Jobs, func(a, b int) bool { return out.Jobs[a].ID < out.Jobs[b].ID })
	return out
}

func printJobs(w io.Writer, r *JobsResult) {
	for _, e := range r.Endpoints {
		state := "up"
		if !e.Up {
			state = "DOWN: " + e.Err
			if e.Answered.IsZero() {
				state += " (never answered: every job folder no answering endpoint reports is protected)"
			} else {
				state += fmt.Sprintf(" (last answer %s ago: its jobs stay protected)", duration.Format(time.Since(e.Answered).Round(time.Second)))
			}
		}
		fmt.Fprintf(w, "endpoint %s: %s\n", e.URL, state)
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "JOB\tFLINK\tSTORE\tNOTE")
	for _, j := range r.Jobs {
		var fl []string
		running := false
		for _, f := range j.Flink {
			s := f.Job.State + " on " + f.Endpoint
			if !f.Up {
				s += " (last answer)"
			}
			if f.Job.DeleteOnCancellation {
				s += ", delete_on_cancellation"
			}
			fl = append(fl, s)
			running = running || !f.Job.Terminal()
		}
		var st []string
		for _, f := range j.Folders {
			s := fmt.Sprintf("%s (%d checkpoints", f.Folder, f.Checkpoints)
			if !f.Newest.IsZero() {
				s += ", newest " + duration.Format(time.Since(f.Newest).Round(time.Second)) + " ago"
			}
			st = append(st, s+")")
		}
		note := ""
		switch {
		case len(j.Flink) == 0:
			note = "no cluster reports it: the store's rules"
		case len(j.Folders) == 0 && running:
			note = "running with no checkpoint in the store"
		case running:
			note = "protected: not terminated"
		default:
			note = "terminated: the store's rules"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", j.ID, orDash(strings.Join(fl, "; ")), orDash(strings.Join(st, "; ")), note)
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// flinkStatsRows are the `stats` lines of the --flink-rest endpoints.
func flinkStatsRows(f *refindex.FlinkStatus) [][2]string {
	if f == nil {
		return nil
	}
	var rows [][2]string
	for _, e := range f.Endpoints {
		n := 0
		for _, j := range e.Jobs {
			if !j.Terminal() {
				n++
			}
		}
		v := fmt.Sprintf("%s: up, %d job(s) not terminated (their folders protected)", e.URL, n)
		if !e.Up {
			if e.Answered.IsZero() {
				v = fmt.Sprintf("%s: DOWN, never answered (%s): every folder named by a job id no answering endpoint reports is protected", e.URL, orDash(e.Err))
			} else {
				v = fmt.Sprintf("%s: DOWN since %s (%s): the %d job(s) not terminated at its last answer (%s) stay protected", e.URL, fmtTime(e.DownSince), e.Err, n, fmtTime(e.Answered))
			}
		}
		rows = append(rows, [2]string{"flink rest", v})
	}
	for _, u := range f.Unmapped {
		rows = append(rows, [2]string{"flink rest", "restore point outside the guarded store (not protected here): " + u})
	}
	return rows
}
