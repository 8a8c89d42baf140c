package flinkrest

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Terminal reports whether state is one Flink never leaves (the job is globally terminated:
// FINISHED, CANCELED, FAILED). Every other state (CREATED, INITIALIZING, RUNNING, RESTARTING,
// FAILING, CANCELLING, SUSPENDED, RECONCILING) may still write or restore state.
func Terminal(state string) bool {
	switch state {
	case "FINISHED", "CANCELED", "FAILED":
		return true
	}
	return false
}

// Job is what one endpoint reported about one job.
type Job struct {
	ID    string `json:"id"`
	Name  string `json:"name,omitempty"`
	State string `json:"state"`
	// InProgress are the ids of the checkpoints the history lists as IN_PROGRESS; InProgressCount is
	// counts.in_progress (the history keeps only the newest entries).
	InProgress      []int64 `json:"in_progress,omitempty"`
	InProgressCount int64   `json:"in_progress_count,omitempty"`
	// LatestCompleted and LatestSavepoint are the external paths (URIs of the checkpoint folders) of
	// latest.completed and latest.savepoint; Restored that of latest.restored.
	LatestCompleted   string `json:"latest_completed,omitempty"`
	LatestCompletedID int64  `json:"latest_completed_id,omitempty"`
	LatestSavepoint   string `json:"latest_savepoint,omitempty"`
	Restored          string `json:"restored,omitempty"`
	RestoredID        int64  `json:"restored_id,omitempty"`
	RestoredSavepoint bool   `json:"restored_savepoint,omitempty"`
	// ConfigKnown: the checkpoint configuration was read; Externalized and DeleteOnCancellation are
	// its externalization.enabled and externalization.delete_on_cancellation.
	ConfigKnown          bool `json:"config_known,omitempty"`
	Externalized         bool `json:"externalized,omitempty"`
	DeleteOnCancellation bool `json:"delete_on_cancellation,omitempty"`
	// Discarded are the external paths of the completed checkpoints the history lists as discarded
	// (discarded: true): Flink has marked them for deletion and deletes their files itself (a
	// subsumed checkpoint; at the job's end, those its retention does not keep). The history keeps
	// only the newest entries (web.checkpoints.history, 10).
	Discarded []string `json:"discarded,omitempty"`
	// Started is the overview's start-time (zero: not reported).
	Started time.Time `json:"started,omitzero"`
	// NoCheckpointing: Flink answered 404 to the checkpoint statistics (checkpointing not enabled).
	NoCheckpointing bool `json:"no_checkpointing,omitempty"`
	// DetailErr: the checkpoint statistics could not be read this time (the values above are then
	// those of the last answer that had them).
	DetailErr string `json:"detail_error,omitempty"`
}

// Terminal reports whether the job reached a globally terminal state.
func (j Job) Terminal() bool { return Terminal(j.State) }

// Report is one endpoint's answer.
type Report struct {
	URL  string
	At   time.Time
	Jobs []Job
}

// Report reads the jobs of the endpoint and, for each job not terminated, its checkpoint statistics
// and configuration (for a terminated one only the configuration: delete_on_cancellation explains
// what Flink deletes itself). An overview that fails is the endpoint's failure; a detail that fails
// is recorded in the job (Job.DetailErr) and does not fail the report: the job's state alone decides
// the protection of its folder.
func (c *Client) Report(ctx context.Context) (Report, error) {
	at := time.Now()
	ov, err := c.Overview(ctx)
	if err != nil {
		return Report{}, err
	}
	r := Report{URL: c.URL(), At: at}
	for _, o := range ov {
		if checkID(o.ID) != nil {
			continue // not a job id: nothing of the store can be named after it
		}
		j := Job{ID: o.ID, Name: o.Name, State: o.State}
		if o.Start > 0 {
			j.Started = time.UnixMilli(o.Start)
		}
		if !Terminal(o.State) {
			st, err := c.Checkpoints(ctx, o.ID)
			switch {
			case NotEnabled(err):
				j.NoCheckpointing = true
			case err != nil:
				j.DetailErr = err.Error()
			default:
				j.fill(st)
			}
		}
		if cfg, err := c.Config(ctx, o.ID); err == nil {
			j.ConfigKnown, j.Externalized, j.DeleteOnCancellation = true, cfg.Externalization.Enabled, cfg.Externalization.DeleteOnCancellation
		}
		r.Jobs = append(r.Jobs, j)
	}
	sort.Slice(r.Jobs, func(a, b int) bool { return r.Jobs[a].ID < r.Jobs[b].ID })
	return r, nil
}

func (j *Job) fill(st CheckpointStats) {
	j.InProgressCount = st.Counts.InProgress
	for _, h := range st.History {
		if h.Status == "IN_PROGRESS" {
			j.InProgress = append(j.InProgress, h.ID)
		}
		if h.Status == "COMPLETED" && h.Discarded && h.ExternalPath != "" {
			j.Discarded = append(j.Discarded, h.ExternalPath)
		}
	}
	if c := st.Latest.Completed; c != nil {
		j.LatestCompleted, j.LatestCompletedID = c.ExternalPath, c.ID
	}
	if s := st.Latest.Savepoint; s != nil {
		j.LatestSavepoint = s.ExternalPath
	}
	if r := st.Latest.Restored; r != nil {
		j.Restored, j.RestoredID, j.RestoredSavepoint = r.ExternalPath, r.ID, r.IsSavepoint
	}
}

// reportBudget bounds one endpoint's report, in request timeouts.
const reportBudget = 3

// Endpoint is an endpoint's state as the poller last saw it.
type Endpoint struct {
	URL string `json:"url"`
	// Up: the last poll was answered.
	Up bool `json:"up"`
	// Answered is when the endpoint last answered (zero: never since the poller started).
	Answered time.Time `json:"answered,omitzero"`
	// Polled is when the poll whose outcome this is began, answered or not (zero: not polled yet):
	// the age of what is known of the endpoint.
	Polled time.Time `json:"polled,omitzero"`
	// DownSince is when the first failed poll of the current outage started (zero while up).
	DownSince time.Time `json:"down_since,omitzero"`
	// Err is the last poll's error ("" while up).
	Err string `json:"error,omitempty"`
	// Jobs are the jobs of the last answer (while down: those it reported last).
	Jobs []Job `json:"jobs"`
}

// Snapshot is every endpoint's state after a poll.
type Snapshot struct {
	At        time.Time  `json:"at"`
	Endpoints []Endpoint `json:"endpoints"`
}

// Change is an endpoint going down or coming back (to be logged once).
type Change struct {
	URL string
	Up  bool
	Err string
}

// Poller polls a fixed set of endpoints and keeps each one's last answer across outages. Polls of
// one endpoint may overlap (the sync's and a refresh before a decision): the outcome of the poll
// that began last wins, whichever ends last (an older answer never replaces a newer one).
type Poller struct {
	clients []*Client
	mu      sync.Mutex
	state   []Endpoint
}

// NewPoller polls clients; before the first poll every endpoint counts as never answered.
func NewPoller(clients []*Client) *Poller {
	p := &Poller{clients: clients, state: make([]Endpoint, len(clients))}
	for i, c := range clients {
		p.state[i] = Endpoint{URL: c.URL()}
	}
	return p
}

// Snapshot is the state as of the last poll (nothing polled yet: every endpoint down, never answered).
func (p *Poller) Snapshot() Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := Snapshot{Endpoints: append([]Endpoint(nil), p.state...)}
	for _, e := range p.state {
		if e.Answered.After(out.At) {
			out.At = e.Answered
		}
	}
	return out
}

// Poll asks every endpoint at once (each bounded by its client's timeout) and returns the new
// state and the endpoints that went down or came back.
func (p *Poller) Poll(ctx context.Context) (Snapshot, []Change) {
	all := make([]string, len(p.clients))
	for i, c := range p.clients {
		all[i] = c.URL()
	}
	s, ch := p.PollSome(ctx, all, reportBudget)
	s.At = time.Now()
	return s, ch
}

// PollSome asks the endpoints named by urls at once, each report bounded by budget request timeouts
// of its client (at least one), and returns the new state of all and the changes among those.
// An overview that does not arrive within the budget is the endpoint's failure (down until a poll
// answers); checkpoint details that do not are detail errors (Report).
func (p *Poller) PollSome(ctx context.Context, urls []string, budget int) (Snapshot, []Change) {
	want := map[string]bool{}
	for _, u := range urls {
		want[u] = true
	}
	type outcome struct {
		i     int
		begun time.Time
		rep   Report
		err   error
	}
	var outs []*outcome
	var wg sync.WaitGroup
	for i, c := range p.clients {
		if !want[c.URL()] {
			continue
		}
		o := &outcome{i: i}
		outs = append(outs, o)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A whole report is bounded too (an endpoint that answers the overview and then hangs
			// would otherwise hold the sync loop a timeout per job): what did not arrive in time is
			// a detail error, the jobs' states still count.
			rctx, cancel := context.WithTimeout(ctx, time.Duration(max(budget, 1))*c.cfg.Timeout)
			defer cancel()
			o.begun = time.Now()
			o.rep, o.err = c.Report(rctx)
		}()
	}
	wg.Wait()
	now := time.Now()
	p.mu.Lock()
	var changes []Change
	for _, o := range outs {
		e := &p.state[o.i]
		if !o.begun.After(e.Polled) {
			continue // a poll that began later has already been applied
		}
		wasUp := e.Up
		if o.err != nil {
			// An outage is reported once, at its first failed poll (a never-answered endpoint's too).
			if wasUp || e.DownSince.IsZero() {
				e.DownSince = now
				changes = append(changes, Change{URL: e.URL, Up: false, Err: o.err.Error()})
			}
			e.Up, e.Err, e.Polled = false, o.err.Error(), o.begun
			continue
		}
		jobs := carryDetails(e.Jobs, o.rep.Jobs)
		if !wasUp {
			changes = append(changes, Change{URL: e.URL, Up: true})
		}
		*e = Endpoint{URL: e.URL, Up: true, Answered: o.rep.At, Polled: o.begun, Jobs: jobs}
	}
	p.mu.Unlock()
	return p.Snapshot(), changes
}

// carryDetails keeps, for a job whose details failed this time, the checkpoint facts of the last
// answer that had them: the restore point must not lose its protection to one failed request.
func carryDetails(prev, cur []Job) []Job {
	old := map[string]Job{}
	for _, j := range prev {
		old[j.ID] = j
	}
	for i := range cur {
		j := &cur[i]
		if j.DetailErr == "" {
			continue
		}
		if o, ok := old[j.ID]; ok {
			j.InProgress, j.InProgressCount, j.Discarded = o.InProgress, o.InProgressCount, o.Discarded
			j.LatestCompleted, j.LatestCompletedID, j.LatestSavepoint = o.LatestCompleted, o.LatestCompletedID, o.LatestSavepoint
			j.Restored, j.RestoredID, j.RestoredSavepoint = o.Restored, o.RestoredID, o.RestoredSavepoint
		}
	}
	return cur
}
