package refindex_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinkmeta"
	"github.com/ckguard/ckguard/refindex/store/localstore"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// model is the ground truth of the randomized test: which checkpoints are live and what they reference.
type model struct {
	t      *rapid.T
	tr     *treegen.Tree
	ix     *refindex.Index
	now    time.Time
	jobs   []string                   // job folders
	live   map[string][]string        // job → live _metadata keys, oldest first
	refs   map[string]map[string]bool // _metadata → referenced keys (every live _metadata, foreign ones too)
	nextID map[string]int64
	seq    int
	// pending: files of the checkpoint Flink is writing per job (no _metadata yet) → when written.
	pending map[string]map[string]time.Time
	// foreign: _metadata another user (foreignUID) wrote into the store.
	foreign map[string]bool
	// savepoints: per job, the live savepoints Flink took (their _metadata → completion).
	savepoints map[string]map[string]time.Time
	pol        refindex.Policy
	// queued: deletions the index allowed and acknowledged but not applied yet (the S3 mount's delete
	// queue), key → when the first decision allowed it. The object is still in the store until "apply".
	queued map[string]time.Time
	// recheck: "apply" decides each queued deletion again before deleting (false only in the test that
	// proves the model catches an apply without it).
	recheck bool
}

// foreignUID is the other local user who writes `_metadata` into the store.
const foreignUID = 65534

// protectedMeta reports why the policy must keep the `_metadata` key, or "": the newest checkpoint of
// a job within the active window (the last one Flink completed: a foreign _metadata never takes that
// away), the newest savepoint of a job, a savepoint within the retention.
func (m *model) protectedMeta(key string) string {
	for job, l := range m.live {
		if len(l) > 0 && l[len(l)-1] == key && m.now.Sub(m.tr.Files[key].ModTime) < m.pol.ActiveWindow {
			return "the newest checkpoint of " + job
		}
	}
	for job, sps := range m.savepoints {
		at, ok := sps[key]
		if !ok {
			continue
		}
		newest := true
		for _, t := range sps {
			newest = newest && !t.After(at)
		}
		if newest {
			return "the newest savepoint of " + job
		}
		if m.now.Sub(at) < m.pol.SavepointRetention {
			return "a savepoint within the retention"
		}
	}
	return ""
}

// inFlight reports whether key is a file of a checkpoint Flink is writing, younger than grace.
func (m *model) inFlight(key string) bool {
	for _, p := range m.pending {
		if at, ok := p[key]; ok && m.now.Sub(at) < m.pol.Grace {
			return true
		}
	}
	return false
}

// forget drops a deleted live _metadata from the model.
func (m *model) forget(k string) {
	delete(m.refs, k)
	delete(m.foreign, k)
	for j, l := range m.live {
		for i, x := range l {
			if x == k {
				m.live[j] = append(l[:i:i], l[i+1:]...)
				break
			}
		}
	}
	for _, sps := range m.savepoints {
		delete(sps, k)
	}
}

// jobHex is the 6 hex digits Flink takes from a job id for its savepoint folder names.
func jobHex(job string) string { return flinkmeta.UUID(job)[:6] }

func (m *model) referencedBy(key string) []string {
	var out []string
	for meta, rs := range m.refs {
		if rs[key] {
			out = append(out, meta)
		}
	}
	return out
}

func (m *model) isLiveMeta(key string) bool { _, ok := m.refs[key]; return ok }

// notify tells the index about a new _metadata: through the mount (synchronously) or by a sync.
func (m *model) notify(meta string) {
	var err error
	if rapid.Bool().Draw(m.t, "through-mount") {
		err = m.ix.IndexMetadata(context.Background(), meta)
	} else {
		err = m.ix.Sync(context.Background())
	}
	if err != nil {
		m.t.Fatal(err)
	}
}

// writeCheckpoint is Flink completing checkpoint n of job, reusing some SSTs of n-1 (or of a
// restored job's checkpoint when from is set).
func (m *model) writeCheckpoint(job, from string) {
	// Checkpoints of a job complete at distinct times (ties of the newest protect both).
	m.now = m.now.Add(time.Second)
	id := m.nextID[job]
	m.nextID[job]++
	var shared []string
	if from != "" {
		for k := range m.refs[from] {
			if strings.Contains(k, "/shared/") && rapid.Bool().Draw(m.t, "reuse") {
				shared = append(shared, k)
			}
		}
	}
	// The files of the checkpoint in flight that are still there (a cleanup may have taken those past
	// grace: that checkpoint then fails in Flink; the model lets it complete without them).
	for k := range m.pending[job] {
		if _, ok := m.tr.Files[k]; ok {
			shared = append(shared, k)
		}
	}
	delete(m.pending, job)
	sort.Strings(shared)
	nNew := rapid.IntRange(0, 3).Draw(m.t, "new-ssts")
	for i := 0; i < nNew; i++ {
		m.seq++
		shared = append(shared, fmt.Sprintf("%s/shared/sst-%d", job, m.seq))
	}
	dir := fmt.Sprintf("%s/chk-%d", job, id)
	c, err := m.tr.Checkpoint(treegen.Spec{Dir: dir, ID: id, Completed: m.now, Shared: shared, Private: []string{fmt.Sprintf("priv-%d", id)}})
	if err != nil {
		m.t.Fatal(err)
	}
	if err := m.tr.Data(c, m.now); err != nil {
		m.t.Fatal(err)
	}
	set := map[string]bool{}
	for _, r := range c.Refs {
		set[r] = true
	}
	m.refs[c.Metadata] = set
	m.live[job] = append(m.live[job], c.Metadata)
	m.notify(c.Metadata)
}

func (m *model) check(key string, op verdict.Op) verdict.Decision {
	d := m.ix.Decide(context.Background(), key, op)
	if by := m.referencedBy(key); len(by) > 0 && d.Allow {
		m.t.Fatalf("Decide allowed %s of %s, referenced by %v", op, key, by)
	}
	if why := m.protectedMeta(key); why != "" && d.Allow {
		m.t.Fatalf("Decide allowed %s of %s, %s", op, key, why)
	}
	if m.inFlight(key) && d.Allow {
		m.t.Fatalf("Decide allowed %s of %s, a file of the checkpoint in flight written %s ago (grace %s)", op, key, m.now.Sub(m.tr.Files[key].ModTime), m.pol.Grace)
	}
	return d
}

// writeForeign is another user writing a valid `_metadata` into a job folder: a fake newest
// checkpoint (chk-<next id>, so Flink's next checkpoint takes the id after it), a copy of a savepoint
// into a savepoint folder of the same job, or a throw-away one, naming a random choice of the job's
// files (the checkpoint in flight's above all).
func (m *model) writeForeign(job string) {
	var cands []string
	for k := range m.pending[job] {
		cands = append(cands, k)
	}
	for _, k := range m.tr.AllFiles() {
		if strings.HasPrefix(k, job+"/") && path.Base(k) != "_metadata" {
			cands = append(cands, k)
		}
	}
	sort.Strings(cands)
	var named []string
	for _, k := range cands {
		if _, ok := m.tr.Files[k]; ok && rapid.Bool().Draw(m.t, "name") {
			named = append(named, k)
		}
	}
	m.seq++
	var spec treegen.Spec
	switch rapid.IntRange(0, 2).Draw(m.t, "foreign-kind") {
	case 0:
		id := m.nextID[job]
		m.nextID[job]++
		spec = treegen.Spec{Dir: fmt.Sprintf("%s/chk-%d", job, id), ID: id}
	case 1:
		spec = treegen.Spec{Dir: fmt.Sprintf("savepoints/savepoint-%s-%012d", jobHex(job), m.seq), ID: 1, Savepoint: true}
	default:
		spec = treegen.Spec{Dir: fmt.Sprintf("%s/laundry-%d", job, m.seq), ID: 1}
	}
	spec.Completed, spec.Shared = m.now, named
	c, err := m.tr.Checkpoint(spec)
	if err != nil {
		m.t.Fatal(err)
	}
	delete(m.tr.Live, c.Metadata)
	if err := os.Lchown(filepath.Join(m.tr.Root, c.Metadata), foreignUID, foreignUID); err != nil {
		m.t.Fatal(err)
	}
	set := map[string]bool{}
	for _, r := range c.Refs {
		set[r] = true
	}
	m.refs[c.Metadata] = set
	m.foreign[c.Metadata] = true
	m.notify(c.Metadata)
}

// queueDelete acknowledges the allowed deletion of k and queues it (the S3 mount's asynchronous
// delete): the object stays in the store, visible to anything written before "apply".
func (m *model) queueDelete(k string) { m.queued[k] = m.now }

// applyQueued is the delete queue draining: every queued deletion is decided again (the version first
// judged is still the one in the store: this model never rewrites a file), deleted when still allowed,
// and kept when a `_metadata` indexed since references it. Index-wide refusals (stale, sync failed) leave
// it queued.
func (m *model) applyQueued(t *rapid.T) {
	ctx := context.Background()
	keys := make([]string, 0, len(m.queued))
	for k := range m.queued {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !rapid.Bool().Draw(t, "apply-now") {
			continue // not in this round
		}
		if _, ok := m.tr.Files[k]; !ok {
			delete(m.queued, k) // deleted meanwhile by someone else: the conditional delete finds nothing
			continue
		}
		if m.recheck {
			d := m.check(k, verdict.OpUnlink)
			if !d.Allow {
				switch d.Reason {
				case verdict.ReasonIndexStale, verdict.ReasonSyncFailed, verdict.ReasonStoreError:
					continue // waits for the index
				}
				delete(m.queued, k) // kept: the refusal is audited, the object stays
				continue
			}
		}
		if err := os.Remove(filepath.Join(m.tr.Root, k)); err != nil {
			t.Fatal(err)
		}
		delete(m.tr.Files, k)
		delete(m.queued, k)
		if err := m.ix.Deleted(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
}

// referenceQueued is a `_metadata` appearing between the decision on a queued deletion and its apply:
// Flink (a job restored from a retained checkpoint, a savepoint) or a tool writes a checkpoint naming
// objects whose deletion is queued.
func (m *model) referenceQueued(t *rapid.T) {
	var named []string
	keys := make([]string, 0, len(m.queued))
	for k := range m.queued {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := m.tr.Files[k]; ok && rapid.Bool().Draw(t, "name-queued") {
			named = append(named, k)
		}
	}
	if len(named) == 0 {
		t.Skip("no queued deletion to reference")
	}
	job := rapid.SampledFrom(m.jobs).Draw(t, "job")
	m.now = m.now.Add(time.Second)
	id := m.nextID[job]
	m.nextID[job]++
	c, err := m.tr.Checkpoint(treegen.Spec{Dir: fmt.Sprintf("%s/chk-%d", job, id), ID: id, Completed: m.now, Shared: named})
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, r := range c.Refs {
		set[r] = true
	}
	m.refs[c.Metadata] = set
	m.live[job] = append(m.live[job], c.Metadata)
	m.notify(c.Metadata)
}

// TestModel runs random sequences of Flink writing checkpoint n (reusing SSTs of n-1), subsuming n-1
// (and deleting what it no longer uses), restoring a job from another job's checkpoint, and a script
// deleting random paths or renaming random folders, the store relocated, against an in-memory model: the index never allows
// deleting (or moving) an object a live checkpoint references, and never refuses garbage past grace.
// -rapid.checks=N runs more sequences (default 100; rapid runs a fifth with -short).
func TestModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) { runModel(rt, true, true) })
}

// TestModelCatchesApplyWithoutRecheck runs the model with a delete queue that applies what the first
// decision allowed without deciding it again: the model must catch the object a `_metadata` written
// between the decision and the apply references being lost.
func TestModelCatchesApplyWithoutRecheck(t *testing.T) {
	for name, v := range map[string]string{"rapid.shrinktime": "1s", "rapid.nofailfile": "true", "rapid.checks": "1000"} {
		if f := flag.Lookup(name); f != nil {
			old := f.Value.String()
			f.Value.Set(v)
			defer f.Value.Set(old)
		}
	}
	rec := &failRecorder{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rapid.Check(rec, func(rt *rapid.T) { runModel(rt, false, false) })
	}()
	<-done
	if !rec.failed {
		t.Fatal("the model test passed with a delete queue that applies without deciding again")
	}
	if !strings.Contains(rec.msg, " lost ") {
		t.Fatalf("the model test failed for another reason than a referenced object lost: %s", rec.msg)
	}
	t.Logf("caught: %.300s", rec.msg)
}

// TestModelCatchesBrokenFilter runs the model test against an index whose reference filter misses
// the increments of incremental updates (BreakFilter), without the filter invariant: the model must
// catch the referenced files Decide then allows.
func TestModelCatchesBrokenFilter(t *testing.T) {
	restore := refindex.BreakFilter()
	defer restore()
	// Shrink briefly and write no fail file (the failure is expected). About one random sequence in
	// nine deletes a file only an incrementally indexed checkpoint references; rapid stops at the
	// first failure, so allow many sequences (a fifth of them with -short) to make missing it
	// practically impossible.
	for name, v := range map[string]string{"rapid.shrinktime": "1s", "rapid.nofailfile": "true", "rapid.checks": "1000"} {
		if f := flag.Lookup(name); f != nil {
			old := f.Value.String()
			f.Value.Set(v)
			defer f.Value.Set(old)
		}
	}
	rec := &failRecorder{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rapid.Check(rec, func(rt *rapid.T) { runModel(rt, false, true) })
	}()
	<-done
	if !rec.failed {
		t.Fatal("the model test passed with a reference filter that misses increments")
	}
	if !strings.Contains(rec.msg, "Decide allowed") {
		t.Fatalf("the model test failed for another reason than an allowed referenced file: %s", rec.msg)
	}
	t.Logf("caught: %.300s", rec.msg)
}

// failRecorder is a rapid.TB that records a failure instead of failing the test.
type failRecorder struct {
	*testing.T
	failed bool
	msg    string
}

func (r *failRecorder) Errorf(format string, args ...any) { r.Error(fmt.Sprintf(format, args...)) }
func (r *failRecorder) Error(args ...any)                 { r.failed = true; r.msg += fmt.Sprint(args...) }
func (r *failRecorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); r.FailNow() }
func (r *failRecorder) Fatal(args ...any)                 { r.Error(args...); r.FailNow() }
func (r *failRecorder) Fail()                             { r.failed = true }
func (r *failRecorder) FailNow()                          { r.failed = true; runtime.Goexit() }
func (r *failRecorder) Failed() bool                      { return r.failed }
func (r *failRecorder) Logf(string, ...any)               {}
func (r *failRecorder) Log(...any)                        {}

// runModel is one random sequence; checkFilter adds the invariant that the reference filter counts
// exactly the reverse entries after every step; recheck is whether queued deletions are decided again
// when applied.
func runModel(rt *rapid.T, checkFilter, recheck bool) {
	{
		root, err := os.MkdirTemp("", "ckguard-model-*")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(root)
		m := &model{t: rt, now: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), live: map[string][]string{},
			refs: map[string]map[string]bool{}, nextID: map[string]int64{}, pending: map[string]map[string]time.Time{},
			foreign: map[string]bool{}, savepoints: map[string]map[string]time.Time{}, queued: map[string]time.Time{}, recheck: recheck}
		m.tr, err = treegen.YoungOrphan(filepath.Join(root, "store"), m.now.Add(-30*24*time.Hour))
		if err != nil {
			rt.Fatal(err)
		}
		// Adopt the scenario's checkpoint into the model.
		for k, c := range m.tr.Live {
			set := map[string]bool{}
			for _, r := range c.Refs {
				set[r] = true
			}
			m.refs[k] = set
			m.live[c.Job] = append(m.live[c.Job], k)
			m.jobs = append(m.jobs, c.Job)
			m.nextID[c.Job] = c.ID + 1
		}
		pol := refindex.DefaultPolicy()
		pol.MaxStaleness = 0
		// Subsumption retires the oldest checkpoint, never the newest; scripts may retire any other.
		pol.ActiveWindow = 12 * time.Hour
		pol.SavepointRetention = 6 * time.Hour
		pol.Now = func() time.Time { return m.now }
		m.pol = pol
		open := func() {
			ls, _ := localstore.New(m.tr.Root)
			m.ix, err = refindex.Open(filepath.Join(root, "index"), ls, pol, refindex.WithLogger(quiet), refindex.WithParseWorkers(2))
			if err != nil {
				rt.Fatal(err)
			}
			if err := m.ix.Sync(context.Background()); err != nil {
				rt.Fatal(err)
			}
		}
		open()
		defer func() { m.ix.Close() }()
		relocations := 0
		ctx := context.Background()
		rt.Repeat(map[string]func(*rapid.T){
			"checkpoint": func(t *rapid.T) {
				job := rapid.SampledFrom(m.jobs).Draw(t, "job")
				from := ""
				if l := m.live[job]; len(l) > 0 {
					from = l[len(l)-1]
				}
				m.writeCheckpoint(job, from)
			},
			"subsume": func(t *rapid.T) {
				job := rapid.SampledFrom(m.jobs).Draw(t, "job")
				l := m.live[job]
				if len(l) < 2 {
					t.Skip("nothing to subsume")
				}
				old := l[0]
				d := m.check(old, verdict.OpUnlink)
				if !d.Allow {
					t.Fatalf("Flink's subsumption of %s refused: %s", old, d.Message)
				}
				if err := os.Remove(filepath.Join(m.tr.Root, old)); err != nil {
					t.Fatal(err)
				}
				if err := m.ix.Deleted(ctx, old); err != nil {
					t.Fatal(err)
				}
				oldRefs := m.refs[old]
				delete(m.refs, old)
				delete(m.tr.Files, old)
				m.live[job] = l[1:]
				// Flink deletes what no retained checkpoint uses any more: the guard must allow it.
				for k := range oldRefs {
					if len(m.referencedBy(k)) > 0 {
						continue
					}
					if _, exists := m.tr.Files[k]; !exists {
						continue
					}
					if d := m.check(k, verdict.OpUnlink); !d.Allow {
						t.Fatalf("Flink's cleanup of %s after subsuming %s refused: %s", k, old, d.Message)
					}
					os.Remove(filepath.Join(m.tr.Root, k))
					delete(m.tr.Files, k)
					if err := m.ix.Deleted(ctx, k); err != nil {
						t.Fatal(err)
					}
				}
			},
			"restore": func(t *rapid.T) {
				src := rapid.SampledFrom(m.jobs).Draw(t, "from-job")
				l := m.live[src]
				if len(l) == 0 {
					t.Skip("no checkpoint to restore from")
				}
				job := fmt.Sprintf("flink/restored%08d000000000000000000000", len(m.jobs))
				m.jobs = append(m.jobs, job)
				m.nextID[job] = m.nextID[src]
				m.writeCheckpoint(job, l[len(l)-1])
			},
			"script-delete": func(t *rapid.T) {
				files := m.tr.AllFiles()
				if len(files) == 0 {
					t.Skip("empty store")
				}
				k := rapid.SampledFrom(files).Draw(t, "file")
				d := m.check(k, verdict.OpUnlink)
				garbage := len(m.referencedBy(k)) == 0 && !m.isLiveMeta(k) && m.now.Sub(m.tr.Files[k].ModTime) >= time.Hour
				if garbage && !d.Allow {
					t.Fatalf("garbage %s (age %s) refused: %s", k, m.now.Sub(m.tr.Files[k].ModTime), d.Message)
				}
				if !d.Allow {
					return
				}
				// (Without the recheck every deletion is queued, so the model finds the loss sooner.)
				if !m.isLiveMeta(k) && path.Base(k) != "_metadata" && (!m.recheck || rapid.Bool().Draw(t, "queued")) {
					// The S3 mount acknowledges it and deletes later (a _metadata is always deleted at once:
					// its deletion retires a checkpoint only once it is gone).
					m.queueDelete(k)
					return
				}
				os.Remove(filepath.Join(m.tr.Root, k))
				delete(m.tr.Files, k)
				if err := m.ix.Deleted(ctx, k); err != nil {
					t.Fatal(err)
				}
				if m.isLiveMeta(k) {
					m.forget(k)
				}
			},
			"start-checkpoint": func(t *rapid.T) {
				// Flink writes the files of its next checkpoint; the _metadata comes with "checkpoint".
				job := rapid.SampledFrom(m.jobs).Draw(t, "job")
				if m.pending[job] == nil {
					m.pending[job] = map[string]time.Time{}
				}
				for i := rapid.IntRange(1, 3).Draw(t, "files"); i > 0; i-- {
					m.seq++
					k := fmt.Sprintf("%s/shared/inflight-%d", job, m.seq)
					if err := m.tr.Write(k, 64, m.now); err != nil {
						t.Fatal(err)
					}
					m.pending[job][k] = m.now
				}
			},
			"savepoint": func(t *rapid.T) {
				job := rapid.SampledFrom(m.jobs).Draw(t, "job")
				m.seq++
				dir := fmt.Sprintf("savepoints/savepoint-%s-%012d", jobHex(job), m.seq)
				c, err := m.tr.Checkpoint(treegen.Spec{Dir: dir, ID: m.nextID[job], Savepoint: true, Completed: m.now,
					Private: []string{"state-a", "state-b"}})
				if err != nil {
					t.Fatal(err)
				}
				if err := m.tr.Data(c, m.now); err != nil {
					t.Fatal(err)
				}
				set := map[string]bool{}
				for _, r := range c.Refs {
					set[r] = true
				}
				m.refs[c.Metadata] = set
				if m.savepoints[job] == nil {
					m.savepoints[job] = map[string]time.Time{}
				}
				m.savepoints[job][c.Metadata] = m.now
				m.notify(c.Metadata)
			},
			"foreign-write": func(t *rapid.T) {
				if os.Geteuid() != 0 {
					t.Skip("writing another user's _metadata needs root (chown)")
				}
				m.writeForeign(rapid.SampledFrom(m.jobs).Draw(t, "job"))
			},
			"foreign-delete": func(t *rapid.T) {
				var fs []string
				for k := range m.foreign {
					fs = append(fs, k)
				}
				if len(fs) == 0 {
					t.Skip("no foreign _metadata")
				}
				sort.Strings(fs)
				k := rapid.SampledFrom(fs).Draw(t, "foreign")
				if d := m.check(k, verdict.OpUnlink); !d.Allow {
					return // its owner's newest checkpoint or savepoint: protected like any other
				}
				if err := os.Remove(filepath.Join(m.tr.Root, k)); err != nil {
					t.Fatal(err)
				}
				delete(m.tr.Files, k)
				if err := m.ix.Deleted(ctx, k); err != nil {
					t.Fatal(err)
				}
				m.forget(k)
			},
			"script-rename-dir": func(t *rapid.T) {
				files := m.tr.AllFiles()
				if len(files) == 0 {
					t.Skip("empty store")
				}
				dir := path.Dir(rapid.SampledFrom(files).Draw(t, "file"))
				d := m.ix.Decide(ctx, dir, verdict.OpRename)
				for meta, rs := range m.refs {
					for r := range rs {
						if strings.HasPrefix(r, dir+"/") && d.Allow {
							t.Fatalf("rename of %s allowed though %s references %s", dir, meta, r)
						}
					}
				}
			},
			"relocate": func(t *rapid.T) {
				// The store is copied elsewhere (cp -a, an NFS export seen under another path) and guarded
				// there without --map, while Flink keeps writing the old URIs: the store proves the
				// mapping, so everything referenced stays protected.
				relocations++
				to := filepath.Join(root, fmt.Sprintf("relocated-%d", relocations), "store")
				if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := m.ix.Close(); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(m.tr.Root, to); err != nil {
					t.Fatal(err)
				}
				m.tr.Root = to
				open()
				// A reference the store cannot place (a foreign _metadata naming a file that is gone) stays
				// unmapped and its name refused: the invariant below still holds.
				if _, err := m.ix.Stats(ctx); err != nil {
					t.Fatal(err)
				}
			},
			"apply-queued": func(t *rapid.T) {
				if len(m.queued) == 0 {
					t.Skip("nothing queued")
				}
				m.applyQueued(t)
			},
			"reference-queued": func(t *rapid.T) { m.referenceQueued(t) },
			"clock": func(t *rapid.T) {
				m.now = m.now.Add(time.Duration(rapid.IntRange(1, 120).Draw(t, "minutes")) * time.Minute)
			},
			"sync": func(t *rapid.T) {
				if err := m.ix.Sync(ctx); err != nil {
					t.Fatal(err)
				}
			},
			"": func(t *rapid.T) {
				if checkFilter {
					if err := refindex.CheckFilter(m.ix); err != nil {
						t.Fatal(err)
					}
				}
				// Invariant: what the policy protects (each job's newest checkpoint, its newest savepoint,
				// savepoints within the retention) and the young files of checkpoints in flight are refused,
				// whatever foreign _metadata were written or deleted.
				for _, l := range m.live {
					if len(l) > 0 {
						m.check(l[len(l)-1], verdict.OpUnlink)
					}
				}
				for _, sps := range m.savepoints {
					for k := range sps {
						m.check(k, verdict.OpUnlink)
					}
				}
				for _, p := range m.pending {
					for k := range p {
						if _, ok := m.tr.Files[k]; ok {
							m.check(k, verdict.OpUnlink)
						}
					}
				}
				// Invariant: every object a live checkpoint references exists (nothing referenced was lost).
				for meta, rs := range m.refs {
					for r := range rs {
						if _, err := os.Stat(filepath.Join(m.tr.Root, r)); err != nil {
							t.Fatalf("%s lost %s", meta, r)
						}
					}
				}
			},
		})
	}
}
