package refindex

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/flinkrest"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// What Flink's REST API says it is running (--flink-rest; rule 3b of Decide). Facts:
//
//   - Flink names every job's checkpoint folder <checkpoint dir>/<job id hex> and, with an explicit
//     ForSt primary dir, its working folders <primary dir>/<job id hex>/…; so every store folder
//     named by a job id belongs to that job (ids are random 128-bit values).
//   - A job not in a terminal state (FINISHED, CANCELED, FAILED are the only ones) may still write
//     into its folders or restore from them: everything in a folder named by its id is protected,
//     whatever its age, with its in-progress checkpoints and ForSt working directories. Its
//     latest.restored and latest.completed checkpoints are protected wherever they lie (a restore
//     from another job's folder, or from a savepoint).
//   - A terminated job falls back to the store's own rules.
//
// Fail closed in scope: an endpoint that does not answer may still run the jobs it reported at its
// last answer: those keep the protection they had. It may also run jobs started since; the store
// shows them by a checkpoint newer than the endpoint's last answer, and those job folders are
// protected too. An endpoint that has never answered (since the mount started) may run any job: every
// folder named by a job id that no answering endpoint reports (in any state) is protected. Folders
// named by no job id are never affected.

// flinkFacts is one poll's facts as decisions read them (immutable once stored).
type flinkFacts struct {
	at time.Time
	// live: jobs not terminated, reported by an answering endpoint.
	live map[string]flinkJob
	// held: jobs not terminated at the last answer of an endpoint that does not answer now.
	held map[string]flinkJob
	// known: every job an answering endpoint reports (any state) → that endpoint.
	known map[string]flinkJob
	// never: configured endpoints that have not answered since the mount started.
	never []flinkrest.Endpoint
	// down: endpoints that answered before and do not now.
	down []flinkrest.Endpoint
	// metas: _metadata keys of live (or held) jobs' restore point and latest completed checkpoint.
	metas map[string]flinkMeta
	// unmapped: external paths of those that do not map into the store (shown by stats, not refused).
	unmapped []string
	// eps: the poll's endpoints as reported.
	eps []flinkrest.Endpoint
	// ended: jobs in a terminal state at the last answer of their endpoint, answering or not
	// (expected deletions: flinkexpected.go).
	ended map[string]flinkJob
	// discarded: _metadata keys of the checkpoints a job's history lists as discarded → the job.
	discarded map[string]flinkJob
}

type flinkJob struct {
	job flinkrest.Job
	ep  flinkrest.Endpoint
}

type flinkMeta struct {
	job  flinkJob
	role string // "restored from", "latest completed checkpoint"
}

// SetFlink installs the facts of a REST poll (guardd polls before every sync). Endpoints of the
// policy's FlinkREST absent from s count as never answered.
func (ix *Index) SetFlink(s flinkrest.Snapshot) {
	pol := ix.Policy()
	f := &flinkFacts{at: s.At, live: map[string]flinkJob{}, held: map[string]flinkJob{}, known: map[string]flinkJob{}, metas: map[string]flinkMeta{}, eps: s.Endpoints,
		ended: map[string]flinkJob{}, discarded: map[string]flinkJob{}}
	seen := map[string]bool{}
	for _, e := range s.Endpoints {
		seen[e.URL] = true
		switch {
		case e.Up:
		case e.Answered.IsZero():
			f.never = append(f.never, e)
		default:
			f.down = append(f.down, e)
		}
		for _, j := range e.Jobs {
			fj := flinkJob{job: j, ep: e}
			if e.Up {
				if _, dup := f.known[j.ID]; !dup || !j.Terminal() {
					f.known[j.ID] = fj
				}
			}
			f.noteCleanup(ix, fj)
			if j.Terminal() {
				continue
			}
			if e.Up {
				f.live[j.ID] = fj
			} else {
				f.held[j.ID] = fj
			}
			for _, m := range []struct{ uri, role string }{{j.Restored, "restored from"}, {j.LatestCompleted, "latest completed checkpoint"}} {
				if m.uri == "" {
					continue
				}
				k := ix.norm.Absolute(strings.TrimSuffix(m.uri, "/") + "/" + flinklayout.MetadataName)
				if !k.Inside {
					f.unmapped = append(f.unmapped, m.uri)
					continue
				}
				if _, ok := f.metas[k.Path]; !ok {
					f.metas[k.Path] = flinkMeta{job: fj, role: m.role}
				}
			}
		}
	}
	for _, u := range pol.FlinkREST {
		if !seen[u] {
			f.never = append(f.never, flinkrest.Endpoint{URL: u})
		}
	}
	ix.flink.Store(f)
}

// flinkFor is the facts decisions under pol use: none when no endpoint is configured; before the
// first poll every configured endpoint counts as never answered.
func (ix *Index) flinkFor(pol Policy) *flinkFacts {
	if len(pol.FlinkREST) == 0 {
		return nil
	}
	if f := ix.flink.Load(); f != nil {
		return f
	}
	f := &flinkFacts{}
	for _, u := range pol.FlinkREST {
		f.never = append(f.never, flinkrest.Endpoint{URL: u})
	}
	return f
}

// jobSegments yields the job ids named by key's folders and the folder each names.
func jobSegments(key string, fn func(id, folder string) bool) {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		if forstJobID.MatchString(s) {
			if !fn(s, strings.Join(segs[:i+1], "/")) {
				return
			}
		}
	}
}

// decideFlink refuses op on key when what Flink reports (or may run while an endpoint does not
// answer) needs it (rule 3b of Decide). Folders above a job's folder are judged file by file in
// rule 6's walk (flinkBelow).
func (ix *Index) decideFlink(v *view, key string, op verdict.Op, what string, maybeDir bool, storeNow time.Time) (verdict.Decision, bool) {
	f := ix.flinkFor(v.pol)
	if f == nil {
		return verdict.Decision{}, false
	}
	if m, k, ok := f.metaFor(key, maybeDir); ok {
		return verdict.Decision{Reason: verdict.ReasonFlinkRunning, Referencing: []string{k}, RefCount: 1,
			Message: fmt.Sprintf("refusing to %s %s: %s is the %s of job %s, which %s; the job may restore from it: it stays protected whatever its age until the job reaches a terminal state (FINISHED, CANCELED, FAILED)",
				op, what, path.Dir(k), m.role, m.job.job.ID, f.stateText(m.job, storeNow))}, true
	}
	return f.judgeKey(v, key, key, op, what, false, storeNow)
}

// flinkBelow is rule 6's check of one object below a folder being removed or renamed.
func (ix *Index) flinkBelow(v *view, o store.ObjectInfo, op verdict.Op, what string, storeNow time.Time) (verdict.Decision, bool) {
	f := ix.flinkFor(v.pol)
	if f == nil {
		return verdict.Decision{}, false
	}
	if m, ok := f.metas[o.Path]; ok {
		return verdict.Decision{Reason: verdict.ReasonFlinkRunning, Referencing: []string{o.Path}, RefCount: 1,
			Message: fmt.Sprintf("refusing to %s %s: %s below it is the %s of job %s, which %s; the job may restore from it", op, what, path.Dir(o.Path), m.role, m.job.job.ID, f.stateText(m.job, storeNow))}, true
	}
	return f.judgeKey(v, o.Path, o.Path, op, what, true, storeNow)
}

// metaFor finds a protected restore point or latest checkpoint at key (or below it, for a folder).
func (f *flinkFacts) metaFor(key string, maybeDir bool) (flinkMeta, string, bool) {
	if m, ok := f.metas[key]; ok {
		return m, key, true
	}
	if !maybeDir {
		return flinkMeta{}, "", false
	}
	var keys []string
	for k := range f.metas {
		if key == "" || strings.HasPrefix(k, key+"/") {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return flinkMeta{}, "", false
	}
	sort.Strings(keys)
	return f.metas[keys[0]], keys[0], true
}

// stateText is "is RUNNING on http://jm:8081", or "was RUNNING on … at its last answer …" while the endpoint is down.
func (f *flinkFacts) stateText(j flinkJob, now time.Time) string {
	if !j.ep.Up {
		return fmt.Sprintf("was %s on %s at its last answer %s ago (the endpoint does not answer since %s: %s)", j.job.State, j.ep.URL,
			duration.Format(max(now.Sub(j.ep.Answered), 0).Round(time.Second)), j.ep.DownSince.UTC().Format(time.RFC3339), j.ep.Err)
	}
	return fmt.Sprintf("is %s on %s", j.job.State, j.ep.URL)
}

// judgeKey refuses key (or the object at it, below the folder being changed when below) when a folder
// on its path is named by a job that runs, may run, or is held by an endpoint that does not answer.
func (f *flinkFacts) judgeKey(v *view, key, obj string, op verdict.Op, what string, below bool, now time.Time) (d verdict.Decision, refused bool) {
	jobSegments(key, func(id, folder string) bool {
		msg := f.judgeJob(v, id, folder, now)
		if msg == "" {
			return true
		}
		where := what
		if below {
			where = what + " (" + obj + " below it)"
		}
		d = verdict.Decision{Reason: verdict.ReasonFlinkRunning, Message: fmt.Sprintf("refusing to %s %s: %s", op, where, msg)}
		refused = true
		return false
	})
	return d, refused
}

// judgeJob says why the folder named by job id must stay, or "".
func (f *flinkFacts) judgeJob(v *view, id, folder string, now time.Time) string {
	if j, ok := f.live[id]; ok {
		extra := ""
		if n := j.job.InProgressCount; n > 0 {
			extra = fmt.Sprintf(", %d checkpoint(s) in progress", n)
			if len(j.job.InProgress) > 0 {
				extra += fmt.Sprintf(" (%s)", joinIDs(j.job.InProgress))
			}
		}
		return fmt.Sprintf("job %s%s %s%s; %s is its folder (checkpoints, in-progress checkpoints, ForSt working directories), protected whatever the files' age until the job reaches a terminal state (FINISHED, CANCELED, FAILED): stop or cancel the job first",
			id, nameText(j.job), f.stateText(j, now), extra, folder)
	}
	if j, ok := f.held[id]; ok {
		return fmt.Sprintf("job %s%s %s; %s is its folder, kept protected (fail closed) until the endpoint answers again: fix the endpoint or its address (--flink-rest)",
			id, nameText(j.job), f.stateText(j, now), folder)
	}
	if _, ok := f.known[id]; ok {
		return "" // terminated, by an answering endpoint: the store's rules
	}
	if len(f.never) > 0 {
		e := f.never[0]
		why := "it has not been polled yet"
		if e.Err != "" {
			why = e.Err
		}
		return fmt.Sprintf("the Flink REST endpoint %s has not answered since the mount started (%s), so job %s may be running there and no answering endpoint reports it; %s is its folder, protected (fail closed) until the endpoint answers: fix the endpoint or its address (--flink-rest)",
			e.URL, why, id, folder)
	}
	for _, e := range f.down {
		if t, ok := newestCheckpoint(v.st, folder); ok && !t.Before(e.Answered) {
			return fmt.Sprintf("the Flink REST endpoint %s does not answer since %s (%s), and job %s wrote a checkpoint after its last answer (%s), so the job may be running there; %s is its folder, protected (fail closed) until the endpoint answers",
				e.URL, e.DownSince.UTC().Format(time.RFC3339), e.Err, id, e.Answered.UTC().Format(time.RFC3339), folder)
		}
	}
	return ""
}

func nameText(j flinkrest.Job) string {
	if j.Name == "" {
		return ""
	}
	return fmt.Sprintf(" (%q)", j.Name)
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}

// newestCheckpoint is the modification time of the newest _metadata below folder.
func newestCheckpoint(st *memState, folder string) (time.Time, bool) {
	var t time.Time
	found := false
	for _, k := range st.below(folder) {
		if c := st.ckpts[k]; c != nil && c.ModTime.After(t) {
			t, found = c.ModTime, true
		}
	}
	return t, found
}

// FlinkStatus is what `stats` and `jobs` show of the REST facts.
type FlinkStatus struct {
	// Polled is when the facts were taken (zero: not polled yet).
	Polled    time.Time            `json:"polled,omitzero"`
	Endpoints []flinkrest.Endpoint `json:"endpoints"`
	// Unmapped are restore points and latest checkpoints Flink reports that lie outside the store.
	Unmapped []string `json:"unmapped,omitempty"`
}

// FlinkStatus returns the REST facts decisions use (nil when no --flink-rest is configured).
func (ix *Index) FlinkStatus() *FlinkStatus {
	pol := ix.Policy()
	f := ix.flinkFor(pol)
	if f == nil {
		return nil
	}
	s := &FlinkStatus{Polled: f.at, Unmapped: f.unmapped, Endpoints: append([]flinkrest.Endpoint(nil), f.eps...)}
	have := map[string]bool{}
	for _, e := range s.Endpoints {
		have[e.URL] = true
	}
	for _, e := range f.never {
		if !have[e.URL] {
			s.Endpoints = append(s.Endpoints, e)
		}
	}
	return s
}

// FlinkStale returns the --flink-rest endpoints to ask again before a decision about key (op) is
// taken: those whose view is older than maxAge at now (polled longer ago, or not yet), when what
// they report could change the decision. That is when key lies in a folder named by a job id the
// facts do not protect (reported terminated, or by no endpoint: it may have started since), or op
// acts on a folder that may hold job folders (rule 6 judges what is below it). A job the facts
// protect (not terminated, or held by an endpoint that does not answer) needs no refresh: a newer
// answer could only lessen its protection. None without --flink-rest.
func (ix *Index) FlinkStale(key string, op verdict.Op, maxAge time.Duration, now time.Time) []string {
	pol := ix.Policy()
	f := ix.flinkFor(pol)
	if f == nil {
		return nil
	}
	open := false
	named := false
	jobSegments(key, func(id, _ string) bool {
		named = true
		_, live := f.live[id]
		_, held := f.held[id]
		open = !live && !held
		return !open
	})
	if !open && (named || op != verdict.OpRename && op != verdict.OpRmdir) {
		return nil
	}
	polled := map[string]time.Time{}
	for _, e := range f.eps {
		polled[e.URL] = e.Polled
	}
	var stale []string
	for _, u := range pol.FlinkREST {
		if now.Sub(polled[u]) > maxAge {
			stale = append(stale, u)
		}
	}
	return stale
}
