package refindex_test

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"pgregory.net/rapid"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinkmeta"
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
	// st is the store the index reads (modelDarkStore: it can make subtrees unreadable); bad the bad
	// entries present (key → damaged `_metadata`, else an unreadable subtree), badSeq their count.
	st     *modelDarkStore
	bad    map[string]bool
	badSeq int
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
