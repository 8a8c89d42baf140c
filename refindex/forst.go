package refindex

import (
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// ForSt (Flink 2.x disaggregated state) keeps a running job's database on the checkpoint file system.
// Its layout (facts from Flink's ForStStateBackend.getForStBasePath and ForStPathContainer):
//
//   - each keyed operator instance works in a folder op_<id>_attempt_<n>, where <id> is the operator
//     identifier with every character outside [A-Za-z0-9-] replaced by "_" and <n> the task's attempt
//     number; its database is the folder db inside it;
//   - with state.backend.forst.primary-dir = checkpoint-dir that folder lies in the job's shared
//     state folder: <checkpoint dir>/<job id hex>/shared/op_<id>_attempt_<n>/db/…;
//   - with an explicit primary dir: <primary dir>/<job id hex>/op_<id>_attempt_<n>/db/….
//
// The files there are live while the job runs whatever their age: SSTs the database wrote since the
// last completed checkpoint are referenced by no `_metadata`, and a restored attempt keeps using files
// under an older attempt's folder (a restore reuses the restored checkpoint's files where they lie
// rather than copying them), so every attempt folder of a job counts as its working directory, not
// only the newest.

// forstJobID matches a Flink job id as ForSt names its folder under an explicit primary dir.
var forstJobID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// forstDir is where a key lies in a ForSt working directory.
type forstDir struct {
	// Attempt is the key of the op_…_attempt_… folder holding the key (or the key itself).
	Attempt string
	// Root is the folder holding every working folder of the job (<job>/shared, or <primary>/<job id>).
	Root string
	// Jobs are the job folders whose checkpoints tell whether the job is active: the folder holding
	// shared/ for the default layout; under an explicit primary dir every folder named after the job
	// id that holds checkpoints (the checkpoint dir is configured apart from the primary dir).
	Jobs []string
	// Primary is the --forst-primary the key lies under ("" for the default layout).
	Primary string
}

// matchForst reports whether key lies in (or is) a ForSt working folder, by layout: below
// <job>/shared/ or below one of the primary roots (store keys, "" = the store root).
func (s *memState) matchForst(key string, primaries []string) (forstDir, bool) {
	segs := strings.Split(key, "/")
	for i := 2; i < len(segs); i++ {
		if segs[i-1] == flinklayout.SharedDir && flinklayout.IsForStAttemptDir(segs[i]) {
			job := strings.Join(segs[:i-1], "/")
			return forstDir{Attempt: strings.Join(segs[:i+1], "/"), Root: job + "/" + flinklayout.SharedDir, Jobs: []string{job}}, true
		}
	}
	for _, p := range primaries {
		rest := key
		if p != "" {
			if !strings.HasPrefix(key, p+"/") {
				continue
			}
			rest = key[len(p)+1:]
		}
		r := strings.Split(rest, "/")
		if len(r) < 2 || !forstJobID.MatchString(r[0]) || !flinklayout.IsForStAttemptDir(r[1]) {
			continue
		}
		root := path.Join(p, r[0])
		d := forstDir{Attempt: root + "/" + r[1], Root: root, Primary: p}
		for _, parent := range s.jobParents[r[0]] {
			d.Jobs = append(d.Jobs, path.Join(parent, r[0]))
		}
		return d, true
	}
	return forstDir{}, false
}

// forstRoots resolves the policy's --forst-primary entries to store keys: a store-relative folder as
// it is, a URI or absolute path through the path mapping. One that maps outside the store is an
// error: it would protect nothing without a word.
func (ix *Index) forstRoots(p Policy) ([]string, error) {
	var out []string
	for _, f := range p.ForStPrimary {
		if strings.Contains(f, ":") || strings.HasPrefix(f, "/") {
			k := ix.norm.Absolute(f)
			if !k.Inside {
				return nil, fmt.Errorf("--forst-primary %q is not inside the guarded store %s: give the folder relative to the store root, or the URI Flink is configured with (state.backend.forst.primary-dir) where a --map ties it to the store", f, ix.st.Root())
			}
			out = append(out, k.Path)
			continue
		}
		k, err := store.CleanKey(f)
		if err != nil {
			return nil, fmt.Errorf("--forst-primary %q: %w", f, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// forstActivity is what the store says about a ForSt job: whether it is active and the signal that says so.
type forstActivity struct {
	active bool
	signal string // "newest checkpoint flink/<job>/chk-12 3m ago", "<file> modified 2h ago"
	meta   string // the newest checkpoint's _metadata when it is the signal
}

// forstCache keeps the working-folder walks of a sync (keyed by the job's working root), so that a
// `find -delete` over a working folder does not walk it once per file. An entry saying "no recent
// file" is kept at most forstCacheTTL and never past half --grace: a file written after the walk is
// then still within --grace, which protects it, until the entry expires.
type forstCache struct {
	mu sync.Mutex
	m  map[string]forstCacheEntry
}

type forstCacheEntry struct {
	synced, at time.Time
	act        forstActivity
}

const forstCacheTTL = time.Minute

// forstActive judges whether the job owning working folder d is active by the store's own signals:
// its newest checkpoint completed within --active-window, or any file in its working folders
// modified within it.
func (ix *Index) forstActive(ctx context.Context, v *view, d forstDir, storeNow time.Time) (forstActivity, error) {
	win := v.pol.ActiveWindow
	var newest *checkpointRecord
	for _, job := range d.Jobs {
		for _, k := range v.st.below(job) {
			c := v.st.ckpts[k]
			if c == nil || c.Job != job {
				continue
			}
			if _, ok := c.candidateID(); !ok {
				continue
			}
			if newest == nil || c.ModTime.After(newest.ModTime) {
				newest = c
			}
		}
	}
	if newest != nil && storeNow.Sub(newest.ModTime) < win {
		return forstActivity{true, fmt.Sprintf("newest checkpoint %s %s ago", strings.TrimSuffix(newest.Key, "/"+flinklayout.MetadataName), duration.Format(storeNow.Sub(newest.ModTime).Round(time.Second))), newest.Key}, nil
	}
	ttl := min(forstCacheTTL, v.pol.Grace/2)
	ix.forst.mu.Lock()
	e, ok := ix.forst.m[d.Root]
	ix.forst.mu.Unlock()
	if ok && e.synced.Equal(v.last) && storeNow.Sub(e.at) < ttl && storeNow.Sub(e.at) >= 0 {
		return e.act, nil
	}
	var act forstActivity
	err := ix.st.Walk(ctx, d.Root, func(o store.ObjectInfo) error {
		if o.IsDir || !inForstAttempt(d.Root, o.Path) {
			return nil
		}
		if age := storeNow.Sub(o.ModTime); age < win {
			act = forstActivity{active: true, signal: fmt.Sprintf("%s modified %s ago", o.Path, duration.Format(max(age, 0).Round(time.Second)))}
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return forstActivity{}, err
	}
	if newest != nil && !act.active {
		act.signal = fmt.Sprintf("newest checkpoint %s %s ago", strings.TrimSuffix(newest.Key, "/"+flinklayout.MetadataName), duration.Format(storeNow.Sub(newest.ModTime).Round(time.Second)))
	}
	if ttl > 0 {
		ix.forst.mu.Lock()
		if ix.forst.m == nil {
			ix.forst.m = map[string]forstCacheEntry{}
		}
		ix.forst.m[d.Root] = forstCacheEntry{synced: v.last, at: storeNow, act: act}
		ix.forst.mu.Unlock()
	}
	return act, nil
}

// inForstAttempt reports whether key lies below an op_…_attempt_… folder directly in root.
func inForstAttempt(root, key string) bool {
	rest, ok := strings.CutPrefix(key, root+"/")
	if !ok {
		return false
	}
	first, _, below := strings.Cut(rest, "/")
	return below && flinklayout.IsForStAttemptDir(first)
}

// decideForst refuses op on key when key lies in (or is) a ForSt working folder of a job the store
// shows active (rule 4c of Decide). It answers nothing (false) for other keys; folders above working
// folders are judged file by file in rule 6's walk (forstBelow).
func (ix *Index) decideForst(ctx context.Context, v *view, key string, op verdict.Op, what string, storeNow time.Time) (verdict.Decision, bool) {
	if v.pol.ActiveWindow <= 0 {
		return verdict.Decision{}, false
	}
	roots, err := ix.forstRoots(v.pol)
	if err != nil {
		return refuse(verdict.ReasonStoreError, fmt.Sprintf("refusing to %s %s: %v", op, what, err)), true
	}
	d, ok := v.st.matchForst(key, roots)
	if !ok {
		return verdict.Decision{}, false
	}
	return ix.forstRefusal(ctx, v, d, key, false, op, what, storeNow)
}

// forstRefusal is the decision for key in working folder d: refused while its job is active.
func (ix *Index) forstRefusal(ctx context.Context, v *view, d forstDir, key string, below bool, op verdict.Op, what string, storeNow time.Time) (verdict.Decision, bool) {
	act, err := ix.forstActive(ctx, v, d, storeNow)
	if err != nil {
		return refuse(verdict.ReasonStoreError, fmt.Sprintf("refusing to %s %s: it lies in the ForSt working directory %s, and listing that to see whether its job is active failed: %v", op, what, d.Attempt, err)), true
	}
	if !act.active {
		return verdict.Decision{}, false
	}
	jobName := path.Base(d.Root)
	if d.Primary == "" {
		jobName = path.Base(path.Dir(d.Root))
	}
	where := key
	if below {
		where = key + " (below it)"
	}
	layout := "the job's shared folder (state.backend.forst.primary-dir = checkpoint-dir)"
	if d.Primary != "" {
		layout = "--forst-primary " + orRoot(d.Primary)
	}
	msg := fmt.Sprintf("refusing to %s %s: job %s is active (%s, within --active-window %s); %s is in its ForSt working directory %s/db in %s, which the running job's database needs whatever the files' age (files written since its last checkpoint are referenced by no _metadata, and after a restore a newer attempt uses files in older attempt folders). Stop or cancel the job first; once it is inactive for --active-window the folder is judged by the other rules",
		op, what, jobName, act.signal, duration.Format(v.pol.ActiveWindow), where, path.Base(d.Attempt), layout)
	// Referencing names the _metadata whose age keeps the job active, when that is the signal: `why`
	// lists it as what protects the file.
	dec := verdict.Decision{Reason: verdict.ReasonForStWorkingDir, Message: msg}
	if act.meta != "" {
		dec.Referencing, dec.RefCount = []string{act.meta}, 1
	}
	return dec, true
}

// forstBelow is rule 6's check of one object o below a folder being removed or renamed (what): refused
// when o lies in a working folder of an active ForSt job.
func (ix *Index) forstBelow(ctx context.Context, v *view, o store.ObjectInfo, op verdict.Op, what string, storeNow time.Time) (verdict.Decision, bool) {
	if v.pol.ActiveWindow <= 0 {
		return verdict.Decision{}, false
	}
	roots, err := ix.forstRoots(v.pol)
	if err != nil {
		return refuse(verdict.ReasonStoreError, fmt.Sprintf("refusing to %s %s: %v", op, what, err)), true
	}
	d, ok := v.st.matchForst(o.Path, roots)
	if !ok {
		return verdict.Decision{}, false
	}
	return ix.forstRefusal(ctx, v, d, o.Path, true, op, what, storeNow)
}
