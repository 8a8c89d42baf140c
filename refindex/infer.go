package refindex

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
)

// resolveOutside decides, for one parsed `_metadata`, where its references that no mapping ties to
// the store live. The invariant it protects: no reference is silently unprotected. Each such
// reference ends in exactly one of three states:
//
//   - placed: the store proves a mapping for it. A candidate mapping PREFIX=STOREPATH
//     (pathnorm.Candidates: Flink's layout, anchored at the `_metadata`'s own folders or at a job
//     folder's shared/, taskowned/ or chk-N/) is proven when every reference of this `_metadata`
//     below PREFIX exists at the same relative place below STOREPATH (directory handles may be
//     absent, see below). The references become store keys and protect their files like any other;
//     the mapping is recorded (Inferred) and logged once. An explicit --map is applied before
//     (Absolute), so it always wins. Candidates are tried most specific first (longest prefix).
//   - external: below a declared --external prefix: legitimately on other storage, reported only.
//   - unmapped: anything else. Its base name is recorded (Unproven), and the decision refuses every
//     store file of that name (memState.unprovenFor): a prefix map rewrites folders, never a file's
//     name, so under whatever --map is missing the object is one of those files.
//
// A store error while proving fails the read (the sync fails and the index fails closed).
func (ix *Index) resolveOutside(ctx context.Context, e *entry) error {
	o := ix.outsideRefs(e)
	if len(o.pending) == 0 {
		return nil
	}
	placed, err := ix.proveCandidates(ctx, e, o)
	if err != nil {
		return err
	}
	rec := e.rec
	for _, i := range o.pending {
		r := &e.refs[i]
		if k, ok := placed[i]; ok {
			r.Key, r.Inside = k, true
			continue
		}
		recordUnmapped(rec, r)
	}
	sort.Strings(rec.Inferred)
	if len(placed) > 0 {
		e.refs = mergeAliases(e.refs)
	}
	if rec.Unmapped > 0 {
		ix.log.Warn("a live _metadata references files that no --map ties to the store and the store does not hold at the same relative place: every store file that could be one of them is refused",
			"file", rec.Key, "unmapped", rec.Unmapped, "uri", rec.UnmappedURI, "fix", ix.unmappedFix(rec.Key, rec.UnmappedURI))
	}
	return nil
}

// outsideCandidate is one candidate mapping and the outside references below its prefix.
type outsideCandidate struct {
	c    pathnorm.Candidate
	refs []int // indexes into entry.refs
}

// outside is what resolveOutside has to place: the references no mapping ties to the store and
// the candidate mappings that could.
type outside struct {
	pending []int                // indexes into entry.refs: outside, not below an --external prefix
	uris    map[int]pathnorm.URI // pending's parsed URIs
	cands   []*outsideCandidate  // most specific first
}

// outsideRefs counts the external references of e and collects the others with every candidate
// mapping that could place them. A candidate covers every pending reference below its prefix,
// whether or not that reference's own path shows Flink's layout (changelog files in dstl/, files at
// the checkpoint root).
func (ix *Index) outsideRefs(e *entry) outside {
	rec := e.rec
	var o outside
	byMap := map[string]*outsideCandidate{}
	for i, r := range e.refs {
		if r.Inside {
			continue
		}
		if ix.norm.IsExternal(r.Key) {
			rec.External++
			continue
		}
		o.pending = append(o.pending, i)
		if strings.HasPrefix(r.Key, relativeOutside) {
			continue // a relative name climbing above the store root names no place in it
		}
		for _, c := range ix.norm.Candidates(r.Key, rec.Key, ix.jobParents) {
			if k := c.Map(); byMap[k] == nil {
				cd := &outsideCandidate{c: pathnorm.Candidate{Prefix: c.Prefix, Dir: c.Dir}}
				byMap[k] = cd
				o.cands = append(o.cands, cd)
			}
		}
	}
	o.uris = make(map[int]pathnorm.URI, len(o.pending))
	for _, i := range o.pending {
		o.uris[i] = pathnorm.ParseURI(e.refs[i].Key)
	}
	for _, cd := range o.cands {
		p := cd.c.Prefix
		for _, i := range o.pending {
			u := o.uris[i]
			if strings.HasPrefix(e.refs[i].Key, relativeOutside) || u.Scheme != p.Scheme || u.Authority != p.Authority ||
				len(u.Segs) <= len(p.Segs) || !slices.Equal(u.Segs[:len(p.Segs)], p.Segs) {
				continue
			}
			cd.refs = append(cd.refs, i)
		}
	}
	// Most specific candidates first: the longest prefix, then the deepest folder (Candidates' order
	// among equals).
	sort.SliceStable(o.cands, func(a, b int) bool { return len(o.cands[a].c.Prefix.Segs) > len(o.cands[b].c.Prefix.Segs) })
	return o
}

// proveCandidates tries the candidates in order and returns the store key of every reference a
// proven candidate places (by index into e.refs). Proven: every file reference still unplaced below
// the prefix is there and at least one reference is. A directory handle proves nothing when absent
// (file merging's managed folders may be empty, and S3 has no folders), so it neither fails nor
// alone proves a candidate.
func (ix *Index) proveCandidates(ctx context.Context, e *entry, o outside) (map[int]string, error) {
	rec := e.rec
	placed := map[int]string{}
	exists := map[string]bool{}
	found := func(key string, dir bool) (bool, error) {
		if v, ok := exists[key]; ok {
			return v, nil
		}
		if k, err := store.CleanKey(key); err != nil || k != key {
			exists[key] = false
			return false, nil
		}
		oi, err := ix.st.Stat(ctx, key)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			exists[key] = false
		case err != nil:
			return false, fmt.Errorf("stat %s (proving where %s's references live): %w", key, rec.Key, err)
		default:
			exists[key] = oi.IsDir == dir && !oi.Special
		}
		return exists[key], nil
	}
	for _, cd := range o.cands {
		var todo []int
		for _, i := range cd.refs {
			if _, ok := placed[i]; !ok {
				todo = append(todo, i)
			}
		}
		if len(todo) == 0 {
			continue
		}
		keys := make([]string, len(todo))
		ok, hits := true, 0
		for j, i := range todo {
			rel := o.uris[i].Segs[len(cd.c.Prefix.Segs):]
			keys[j] = pathnorm.Candidate{Rel: rel, Dir: cd.c.Dir}.Key()
			dir := e.refs[i].Kind == RefDirectory
			hit, err := found(keys[j], dir)
			if err != nil {
				return nil, err
			}
			if hit {
				hits++
			} else if !dir {
				ok = false
				break
			}
		}
		if !ok || hits == 0 {
			continue
		}
		for j, i := range todo {
			placed[i] = keys[j]
		}
		m := cd.c.Map()
		rec.Inferred = append(rec.Inferred, m)
		if _, warned := ix.inferredWarned.LoadOrStore(m, true); !warned {
			ix.log.Warn("references that no --map ties to the store were found at the same relative place in the store: the mapping is applied and protects them; add it as --map to make it explicit",
				"map", m, "file", rec.Key, "references", len(todo))
		}
	}
	return placed, nil
}

// recordUnmapped records a reference no candidate placed: its base name protects every store file
// of that name (memState.unprovenFor), a directory handle is listed as unproven.
func recordUnmapped(rec *checkpointRecord, r *ref) {
	rec.Unmapped++
	if rec.UnmappedURI == "" {
		rec.UnmappedURI = r.Key
	}
	if r.Kind == RefDirectory {
		rec.UnprovenDirs = append(rec.UnprovenDirs, r.Key)
		return
	}
	if rec.Unproven == nil {
		rec.Unproven = map[string]string{}
	}
	b := path.Base(r.Key)
	if _, dup := rec.Unproven[b]; !dup {
		rec.Unproven[b] = r.Key
	}
}

// mergeAliases folds two names of one object (an alias and the mapped spelling) into one reference.
func mergeAliases(refs []ref) []ref {
	seen := map[string]int{}
	out := refs[:0]
	for _, r := range refs {
		id := string(rune('0'+r.Kind)) + fmt.Sprint(r.Inside) + r.Key
		if j, ok := seen[id]; ok {
			out[j].Length += r.Length
			continue
		}
		seen[id] = len(out)
		out = append(out, r)
	}
	return out
}

// jobParents returns the store folders holding a job folder named job (where the last listing of
// the store, or the index, has a checkpoint <parent>/<job>/chk-N/_metadata), then the folders holding
// any job folder.
func (ix *Index) jobParents(job string) []string {
	ix.mu.RLock()
	listed, st := ix.mu.listedJobs, ix.mu.state
	ix.mu.RUnlock()
	// Then every folder that holds some job folder: a job whose checkpoints are all retired still has
	// its shared files beside the other jobs.
	var out []string
	for _, ps := range [][]string{listed[job], st.jobParents[job], listed[""], st.jobParents[""]} {
		for _, p := range ps {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// addJobParent records in m that a checkpoint `_metadata` key lies in a job folder (see jobParents).
func addJobParent(m map[string][]string, key string) {
	if j, _, kind := layoutOf(key); kind == "checkpoint" && j != "" {
		b, p := path.Base(j), parentKey(j)
		for _, k := range []string{b, ""} { // "": every folder holding a job folder
			if !slices.Contains(m[k], p) {
				m[k] = append(m[k], p)
			}
		}
	}
}

// noteListedJobs records the job folders of a listing of `_metadata` keys (see jobParents), before
// they are read: a rebuild reads them into a new generation the current state does not show.
func (ix *Index) noteListedJobs(keys []string) {
	m := map[string][]string{}
	for _, k := range keys {
		addJobParent(m, k)
	}
	ix.mu.Lock()
	ix.mu.listedJobs = m
	ix.mu.Unlock()
}

// relativeOutside starts the outside key of a relative handle that climbs above the store root
// (pathnorm.Normalizer.Relative).
const relativeOutside = "relative:"

// unmappedFix says what to add for an unmapped reference uri of the `_metadata` meta: the most likely
// --map, or --external when it lies on other storage.
func (ix *Index) unmappedFix(meta, uri string) string {
	m := "PREFIX=STOREPATH"
	if cs := ix.norm.Candidates(uri, meta, ix.jobParents); len(cs) > 0 {
		m = cs[0].Suggest()
	}
	ext := ix.norm.Directory(uri)
	if ext == "" {
		ext = "PREFIX"
	}
	return fmt.Sprintf("add --map %s if that storage is this store under another name, or --external %s if it lies on other storage, then run `ckguard index sync`", m, ext)
}

// unprovenFor returns the live `_metadata` and the URI of an unmapped reference that the object key
// could be (its base name matches), or that could lie below any folder (an unmapped directory
// handle); ok is false when there is none. A `_metadata` itself is never one: deleting it retires a
// checkpoint, which is how an unmapped one is removed.
func (s *memState) unprovenFor(key string) (meta, uri string, ok bool) {
	if len(s.unmapped) == 0 {
		return "", "", false
	}
	b := key
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		b = key[i+1:]
	}
	if b == flinklayout.MetadataName {
		return "", "", false
	}
	if len(s.unprovenDirs) > 0 {
		c := s.ckpts[s.unprovenDirs[0]]
		return c.Key, c.UnprovenDirs[0], true
	}
	if m, ok := s.unproven[b]; ok {
		return m, s.ckpts[m].Unproven[b], true
	}
	return "", "", false
}
