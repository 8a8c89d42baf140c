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

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

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
	modelCatches(t, "a delete queue that applies without deciding again", " lost ", "a referenced object lost",
		func(rt *rapid.T) { runModel(rt, false, false) })
}

// TestModelCatchesBrokenFilter runs the model test against an index whose reference filter misses
// the increments of incremental updates (BreakFilter), without the filter invariant: the model must
// catch the referenced files Decide then allows.
func TestModelCatchesBrokenFilter(t *testing.T) {
	restore := refindex.BreakFilter()
	defer restore()
	modelCatches(t, "a reference filter that misses increments", "Decide allowed", "an allowed referenced file",
		func(rt *rapid.T) { runModel(rt, false, true) })
}

// modelCatches runs the model (run) against something broken and fails t unless the model fails, for
// the reason it must: a failure message containing want. The model shrinks briefly and writes no fail
// file (the failure is expected). Only some random sequences meet the breakage (about one in nine
// deletes a file only an incrementally indexed checkpoint references); rapid stops at the first
// failure, so it runs many sequences (a fifth of them with -short) to make missing it practically
// impossible.
func modelCatches(t *testing.T, broken, want, reason string, run func(*rapid.T)) {
	t.Helper()
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
		rapid.Check(rec, run)
	}()
	<-done
	if !rec.failed {
		t.Fatalf("the model test passed with %s", broken)
	}
	if !strings.Contains(rec.msg, want) {
		t.Fatalf("the model test failed for another reason than %s: %s", reason, rec.msg)
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
			foreign: map[string]bool{}, savepoints: map[string]map[string]time.Time{}, queued: map[string]time.Time{}, recheck: recheck,
			st: &modelDarkStore{}, bad: map[string]bool{}}
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
			m.st.Store = ls
			m.ix, err = refindex.Open(filepath.Join(root, "index"), m.st, pol, refindex.WithLogger(quiet), refindex.WithParseWorkers(2))
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
				if m.flinkRefusedByBad(d) {
					t.Skip("refused while an unreadable subtree may hide a checkpoint (the bad-entry rule)")
				}
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
					d := m.check(k, verdict.OpUnlink)
					if m.flinkRefusedByBad(d) {
						continue // left as garbage while the subtree is unreadable (the bad-entry rule)
					}
					if !d.Allow {
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
				if garbage && !d.Allow && !m.badExcuses(k, d) {
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
			"bad-appears":    func(t *rapid.T) { m.badAppears(t) },
			"bad-disappears": func(t *rapid.T) { m.badDisappears(t) },
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
