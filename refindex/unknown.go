package refindex

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// Unknown subtrees (issue 29): an entry of the store a sync could not read (a folder it may not open
// or list, a name too long for the backend, a listing error on one S3 prefix) no longer fails the sync.
// It is recorded (key, cause, since when, owner) and the decision refuses, in the smallest scope that
// holds what could be hidden there (decideUnknown; the reasoning is in docs/SEMANTICS.md, "Unknown
// subtrees"):
//
//  1. the subtree itself and everything below it (any op);
//  2. rmdir, rename and replace of its ancestors (they would remove it);
//  3. unless it is confined (below), the files a `_metadata` hidden in it could reference:
//     a. the files of its own job folder (Flink's layout: the folder above the chk-N, shared,
//     taskowned or savepoint-* segment of its key, when it has one): a checkpoint written there
//     after it went dark references new files of its job;
//     b. the files whose last known reference was retired at or after the subtree was last read
//     (a tombstone at or after LastReadable): a checkpoint hidden there may have taken them over;
//     c. when it was never readable (it was unknown at the index's first build) everything: what it
//     references was never seen.
//     Files still in grace are refused by the grace rule anyway; every other file was unreferenced
//     when the subtree was last read, and a checkpoint written later references only files its job
//     writes (its job folder) or files a live checkpoint references (rule 3, or b once retired).
//
// Confined: where the store reports owners (store.ObjectInfo.UID: local stores), a subtree owned by a user who owns no indexed `_metadata` of
// the enclosing job folder (or, outside a job folder, of the store) cannot hold a checkpoint Flink
// wrote (only root can give a file away; Flink writes its checkpoints as its own user, into folders
// it creates): it protects only itself (1 and 2).
//
// An entry is cleared by the first sync that reads it again; the log says so once, as it said once
// when it went dark.

// UnknownSubtree is one entry the last sync could not read.
type UnknownSubtree struct {
	Key   string    `json:"key"`
	Cause string    `json:"cause"`
	Since time.Time `json:"since"` // the listing that first could not read it
	// LastReadable is the start of the last listing before Since (when what it held was last known);
	// zero: it was never readable since the index was built.
	LastReadable time.Time `json:"last_readable,omitzero"`
	UID          *uint32   `json:"uid,omitempty"`
	// JobFolder is the job folder its key lies in by Flink's layout, "" when none.
	JobFolder string `json:"job_folder,omitempty"`
	// Confined: owned by a user who wrote no indexed `_metadata` there, so it protects only itself.
	Confined bool `json:"confined,omitempty"`
	// Collapsed counts the unreadable entries this one stands for when more than maxUnknownSubtrees
	// were found (collapseUnknown: their common folder); 0 for an entry as the store reported it.
	Collapsed int    `json:"collapsed,omitempty"`
	example   string // of a collapsed entry: one of the entries it stands for and its cause
}

// maxUnknownSubtrees bounds the unknown subtrees an index keeps (every decision loops over them, and
// they are persisted as one value): beyond it, entries are replaced by their common folders
// (collapseUnknown). A variable for tests (export_test.go).
var maxUnknownSubtrees = 1000

// keyUnknown persists the unknown subtrees of the last sync beside the other sync facts.
var keyUnknown = []byte("m/unknown")

// unknownCollector gathers the unknown subtrees a listing reports (from any goroutine).
type unknownCollector struct {
	mu    sync.Mutex
	found map[string]store.UnknownSubtree
}

// withUnknown returns ctx under which the store's listings report unknown subtrees to c.
func (c *unknownCollector) withUnknown(ctx context.Context) context.Context {
	return store.WithUnknown(ctx, func(u store.UnknownSubtree) error {
		c.add(u)
		return nil
	})
}

func (c *unknownCollector) add(u store.UnknownSubtree) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.found == nil {
		c.found = map[string]store.UnknownSubtree{}
	}
	if _, ok := c.found[u.Key]; !ok {
		c.found[u.Key] = u
	}
}

// addUncovered adds u unless it lies below an entry already found (its folder is the unknown one).
func (c *unknownCollector) addUncovered(u store.UnknownSubtree) {
	c.mu.Lock()
	for k := range c.found {
		if isBelow(u.Key, k) {
			c.mu.Unlock()
			return
		}
	}
	c.mu.Unlock()
	c.add(u)
}

// jobFolderOf returns the job folder key lies in by Flink's layout (the folder above its chk-N,
// shared, taskowned or savepoint-* segment, the last such one), "" when it has none.
func jobFolderOf(key string) string {
	segs := strings.Split(key, "/")
	for i := len(segs) - 1; i >= 0; i-- {
		s := segs[i]
		if flinklayout.IsJobFolderEntry(s) || flinklayout.IsSavepointDir(s) {
			return strings.Join(segs[:i], "/")
		}
	}
	return ""
}

// installUnknown makes found the unknown subtrees of the index after a listing that started at
// listedAt (prevList: the start of the listing before it), once the state that listing read is
// installed (confinement compares owners with it). Entries still unknown keep their Since and
// LastReadable; each new one and each cleared one is logged once. Persisted in the current generation.
//
// rebuilt: the index was rebuilt from this listing; a rebuild keeps no tombstones, so what was retired
// since an entry was last read is no longer known: every entry counts as never readable (refuses
// everything unless confined) until it is read again.
func (ix *Index) installUnknown(found map[string]store.UnknownSubtree, listedAt, prevList time.Time, rebuilt bool) {
	ix.mu.Lock()
	old := ix.mu.unknown
	next := nextUnknown(old, ix.mu.state, found, listedAt, prevList, rebuilt)
	ix.mu.unknown = next
	g := ix.mu.cur
	g.users.Add(1) // the generation stays open while the set is persisted in it, outside mu
	ix.mu.Unlock()
	defer g.users.Done()
	ix.logUnknownChanges(old, next)
	if len(next) == 0 && len(old) == 0 {
		return // the common case: nothing to write at every sync
	}
	b, err := json.Marshal(next)
	if err == nil {
		err = g.db.Update(func(txn *badger.Txn) error {
			if len(next) == 0 {
				return txn.Delete(keyUnknown)
			}
			return txn.Set(keyUnknown, b)
		})
	}
	if err != nil {
		ix.log.Warn("persisting the unknown subtrees", "err", err)
	}
}

// nextUnknown is the unknown subtrees after a listing that found found, sorted by key, given the
// previous set old (sorted) and the state st the listing read: an entry still unknown, or unknown as
// part of a folder collapsed at the last sync, keeps its Since and LastReadable (none after a
// rebuild); beyond maxUnknownSubtrees they are collapsed into their folders.
func nextUnknown(old []UnknownSubtree, st *memState, found map[string]store.UnknownSubtree, listedAt, prevList time.Time, rebuilt bool) []UnknownSubtree {
	next := make([]UnknownSubtree, 0, len(found))
	collapsedOld := map[string]*UnknownSubtree{}
	for i := range old {
		if old[i].Collapsed > 0 {
			collapsedOld[old[i].Key] = &old[i]
		}
	}
	for k, u := range found {
		rec := UnknownSubtree{Key: k, Cause: u.Err.Error(), Since: listedAt, LastReadable: prevList, JobFolder: jobFolderOf(k)}
		if u.HasUID {
			uid := u.UID
			rec.UID = &uid
		}
		if i := sort.Search(len(old), func(i int) bool { return old[i].Key >= k }); i < len(old) && old[i].Key == k {
			rec.Since, rec.LastReadable = old[i].Since, old[i].LastReadable
		} else if c := coveringCollapsed(collapsedOld, k); c != nil {
			// Unknown at the last sync as part of a collapsed folder: what it holds was last read
			// then, not at the listing before this one.
			rec.Since, rec.LastReadable = c.Since, c.LastReadable
		}
		if rebuilt {
			rec.LastReadable = time.Time{}
		}
		rec.Confined = confined(st, rec)
		next = append(next, rec)
	}
	if len(next) > maxUnknownSubtrees {
		next = collapseUnknown(next, st, maxUnknownSubtrees)
		for i := range next {
			if next[i].Collapsed == 0 {
				continue
			}
			// A folder collapsed at the last sync too keeps when it was first unknown and the
			// earliest time what it holds was last read.
			k := next[i].Key
			if j := sort.Search(len(old), func(j int) bool { return old[j].Key >= k }); j < len(old) && old[j].Key == k {
				mergeUnknownTimes(&next[i], old[j])
			}
		}
	}
	sort.Slice(next, func(i, j int) bool { return next[i].Key < next[j].Key })
	return next
}

// logUnknownChanges logs each entry of next not in old (newly unknown) and each of old not in next
// (readable again, or gone); both sorted by key.
func (ix *Index) logUnknownChanges(old, next []UnknownSubtree) {
	nextKeys := make(map[string]bool, len(next))
	for _, u := range next {
		nextKeys[u.Key] = true
	}
	for _, u := range next {
		if i := sort.Search(len(old), func(i int) bool { return old[i].Key >= u.Key }); i < len(old) && old[i].Key == u.Key {
			continue
		}
		ix.log.Warn("store entry cannot be read: refusing what it may hold, deciding the rest of the store as usual", "subtree", orRoot(u.Key), "cause", u.Cause, "confined", u.Confined, "job_folder", u.JobFolder)
	}
	for _, u := range old {
		if !nextKeys[u.Key] {
			ix.log.Info("store entry readable again (or gone): no longer refused as unknown", "subtree", orRoot(u.Key), "unknown_since", u.Since)
		}
	}
}

// collapseUnknown bounds recs (more than max entries) by replacing the deepest entries by their
// folders, level by level, until at most max remain or only entries directly below the store root
// are left (those stay, however many: collapsing them into the root would refuse every deletion of
// the store, the outage this file exists to prevent; only the decision cost grows).
//
// Invariant: the collapsed set refuses at least what the entries refused. A folder's subtree holds
// each entry's (rule 1), its ancestors are theirs (rule 2), its job folder is the one of each entry
// below it unless an entry's key ends in a chk-N/shared/taskowned segment, whose job folder is then
// the folder itself (rule 3a, held by rule 1); it is confined only when every entry it stands for
// was, with one owner, and it is still confined for its own job folder; it was last read at the
// earliest time any of them was (zero, never read, when one was) (rules 3b, 3c).
func collapseUnknown(recs []UnknownSubtree, st *memState, max int) []UnknownSubtree {
	depth := func(k string) int { return strings.Count(k, "/") + 1 }
	deepest := 0
	for _, r := range recs {
		deepest = maxInt(deepest, depth(r.Key))
	}
	// First only entries that share their folder with another at the same depth, deepest first (a
	// lone entry keeps its own, narrower scope); then, while still too many, every entry of the
	// deepest level.
	for _, force := range []bool{false, true} {
		for d := deepest; d >= 2 && len(recs) > max; d-- {
			if force {
				d = 0
				for _, r := range recs {
					d = maxInt(d, depth(r.Key))
				}
				if d < 2 {
					break
				}
			}
			siblings := map[string]int{}
			for _, r := range recs {
				if depth(r.Key) == d {
					siblings[path.Dir(r.Key)]++
				}
			}
			for i := range recs {
				if dir := path.Dir(recs[i].Key); depth(recs[i].Key) == d && (force || siblings[dir] > 1) {
					recs[i] = asFolder(recs[i], dir)
				}
			}
			recs = mergeCovered(recs, st)
			if force {
				d = deepest + 1 // the loop's d-- keeps it going; d is recomputed above
			}
		}
	}
	return recs
}

// asFolder is r standing for its folder dir.
func asFolder(r UnknownSubtree, dir string) UnknownSubtree {
	n := maxInt(r.Collapsed, 1)
	ex := r.example
	if ex == "" {
		ex = r.Key + ": " + r.Cause
	}
	return UnknownSubtree{Key: dir, JobFolder: jobFolderOf(dir), Since: r.Since, LastReadable: r.LastReadable, UID: r.UID,
		Confined: r.Confined, Collapsed: n, example: ex}
}

// mergeCovered merges every entry at or below another into that one (sorted so that a folder comes
// right before what lies below it).
func mergeCovered(recs []UnknownSubtree, st *memState) []UnknownSubtree {
	sortKey := func(k string) string { return strings.ReplaceAll(k, "/", "\x00") }
	sort.Slice(recs, func(i, j int) bool { return sortKey(recs[i].Key) < sortKey(recs[j].Key) })
	out := recs[:0:0]
	var stack []int // indexes into out of the folders enclosing the current key
	for _, r := range recs {
		for len(stack) > 0 && !isBelow(r.Key, out[stack[len(stack)-1]].Key) {
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 {
			d := &out[stack[len(stack)-1]]
			n := maxInt(d.Collapsed, 1) + maxInt(r.Collapsed, 1)
			if d.example == "" {
				d.example = r.example
			}
			d.Collapsed = n
			if d.UID != nil && (r.UID == nil || *r.UID != *d.UID) {
				d.UID = nil
			}
			d.Confined = d.Confined && r.Confined && d.UID != nil
			mergeUnknownTimes(d, r)
			continue
		}
		out = append(out, r)
		stack = append(stack, len(out)-1)
	}
	for i := range out {
		if out[i].Collapsed == 0 {
			continue
		}
		if out[i].Confined {
			out[i].Confined = confined(st, out[i])
		}
		if out[i].example == "" {
			out[i].example = out[i].Key + ": " + out[i].Cause
		}
		out[i].Cause = fmt.Sprintf("%d entr(ies) at or below it could not be read (more than %d unknown subtrees are kept as their folders), e.g. %s",
			out[i].Collapsed, maxUnknownSubtrees, out[i].example)
	}
	return out
}

// coveringCollapsed returns the collapsed entry (of the last sync, by key) at or above key, nil when
// there is none: one lookup per ancestor, so a sync with thousands of entries stays cheap under the
// index's lock.
func coveringCollapsed(collapsed map[string]*UnknownSubtree, key string) *UnknownSubtree {
	if len(collapsed) == 0 {
		return nil
	}
	for k := key; ; k = path.Dir(k) {
		if k == "." {
			k = ""
		}
		if c := collapsed[k]; c != nil {
			return c
		}
		if k == "" {
			return nil
		}
	}
}

// mergeUnknownTimes makes d first unknown at the earlier Since of d and r, and last read at the
// earlier LastReadable (zero, never read, dominates).
func mergeUnknownTimes(d *UnknownSubtree, r UnknownSubtree) {
	if r.Since.Before(d.Since) {
		d.Since = r.Since
	}
	if r.LastReadable.IsZero() || (!d.LastReadable.IsZero() && r.LastReadable.Before(d.LastReadable)) {
		d.LastReadable = r.LastReadable
	}
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// keepTombstonesFrom returns the purge cutoff for tombstones: before, or earlier while an unknown
// subtree that is not confined was last read before it (its scope refuses the files retired since:
// their tombstones must outlive --grace for as long as it stays unknown).
func (ix *Index) keepTombstonesFrom(before time.Time) time.Time {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for _, u := range ix.mu.unknown {
		if !u.Confined && !u.LastReadable.IsZero() && u.LastReadable.Before(before) {
			before = u.LastReadable
		}
	}
	return before
}

// loadUnknown reads the persisted unknown subtrees of a generation (none when absent or unreadable).
func loadUnknown(txn *badger.Txn) []UnknownSubtree {
	it, err := txn.Get(keyUnknown)
	if err != nil {
		return nil
	}
	var out []UnknownSubtree
	if err := it.Value(func(b []byte) error { return json.Unmarshal(b, &out) }); err != nil {
		return nil
	}
	return out
}

// confined reports whether u cannot hold a checkpoint Flink wrote: its owner is known and owns no
// indexed `_metadata` of its job folder (outside a job folder: of the store). Where no `_metadata` is
// indexed there at all, who Flink is is unknown: not confined.
func confined(st *memState, u UnknownSubtree) bool {
	if u.UID == nil || st == nil {
		return false
	}
	owners := func(keys []string) map[uint32]bool {
		m := map[uint32]bool{}
		for _, k := range keys {
			// Only a writer the store trusts for its job folder (JobOwner) counts as the job's: any
			// user can copy a real `_metadata` into a folder of their own.
			if c := st.ckpts[k]; c != nil && c.UID != nil && c.JobOwner {
				m[*c.UID] = true
			}
		}
		return m
	}
	var trusted map[uint32]bool
	if u.JobFolder != "" {
		trusted = owners(st.below(u.JobFolder))
	}
	if len(trusted) == 0 {
		// A job folder with no indexed checkpoint (a new job): the writers of the store's checkpoints.
		trusted = owners(st.sorted)
	}
	return len(trusted) > 0 && !trusted[*u.UID]
}

func isBelow(key, dir string) bool {
	return dir == "" || key == dir || strings.HasPrefix(key, dir+"/")
}

// decideUnknown refuses op on key when an unknown subtree may hold what the op would touch (see the
// rules at the top of this file).
func (ix *Index) decideUnknown(v *view, key string, op verdict.Op, what string, maybeDir bool) (verdict.Decision, bool) {
	removes := op == verdict.OpRmdir || op == verdict.OpRename || op == verdict.OpReplace
	// The tombstone scope of every unconfined entry at once: the one read longest ago bounds them all
	// (one tombstone lookup or scan per decision, however many entries are unknown).
	var earliest *UnknownSubtree
	for i := range v.unknown {
		u := &v.unknown[i]
		switch {
		case isBelow(key, u.Key):
			return ix.unknownRefusal(op, what, u, "it lies in"), true
		case removes && isBelow(u.Key, key):
			return ix.unknownRefusal(op, what, u, "it holds"), true
		case u.Confined:
			continue
		case u.LastReadable.IsZero():
			return ix.unknownRefusal(op, what, u, "a `_metadata` never read may lie in"), true
		case u.JobFolder != "" && isBelow(key, u.JobFolder):
			return ix.unknownRefusal(op, what, u, "it belongs to the job folder "+orRoot(u.JobFolder)+" of"), true
		}
		if earliest == nil || u.LastReadable.Before(earliest.LastReadable) {
			earliest = u
		}
	}
	if earliest != nil {
		if f, ok := ix.retiredSince(v, key, maybeDir, earliest.LastReadable); ok {
			return ix.unknownRefusal(op, what, earliest, "the last known reference to "+f+" was retired after the store last read"), true
		}
	}
	return verdict.Decision{}, false
}

// retiredSince reports a file at key (or below it, for a directory) whose last live reference was
// retired at or after t (a tombstone written then).
func (ix *Index) retiredSince(v *view, key string, below bool, t time.Time) (string, bool) {
	if it, err := v.snap.txn.Get(tombKey(key)); err == nil {
		hit := false
		_ = it.Value(func(b []byte) error { hit = !tombstoneTime(b).Before(t); return nil })
		if hit {
			return key, true
		}
	}
	if !below {
		return "", false
	}
	p := []byte(tblTombstone)
	if key != "" {
		p = append(p, key+"/"...)
	}
	it := v.snap.txn.NewIterator(badger.IteratorOptions{Prefix: p})
	defer it.Close()
	for it.Seek(p); it.ValidForPrefix(p); it.Next() {
		hit := false
		_ = it.Item().Value(func(b []byte) error { hit = !tombstoneTime(b).Before(t); return nil })
		if hit {
			return string(it.Item().Key()[len(tblTombstone):]), true
		}
	}
	return "", false
}

func (ix *Index) unknownRefusal(op verdict.Op, what string, u *UnknownSubtree, rel string) verdict.Decision {
	fix := "make it readable to the guard's user (its mode, owner, ACL; on NFS the export's root squash), or remove it beside the mount; the next sync clears it"
	if u.Confined && isBelow(what, u.Key) {
		fix = "remove it beside the mount, or make it readable to the guard; the next sync clears it"
	}
	since := u.Since.UTC().Format(time.RFC3339)
	return verdict.Decision{Reason: verdict.ReasonUnknownSubtree, Referencing: []string{u.Key},
		Message: fmt.Sprintf("refusing to %s %s: %s %s, which the store could not read at the last sync (%s; since %s), so what it holds is unknown: %s", op, what, rel, orRoot(u.Key), u.Cause, since, fix)}
}

// UnknownSubtrees returns the entries the last sync could not read, sorted by key.
func (ix *Index) UnknownSubtrees() []UnknownSubtree {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return append([]UnknownSubtree(nil), ix.mu.unknown...)
}

// unknownHides says why an answer is incomplete when an unknown subtree that is not confined may hide
// `_metadata` (verify and orphans exit 3), "" when none may.
func unknownHides(us []UnknownSubtree) string {
	n, first := 0, -1
	for i, u := range us {
		if !u.Confined {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	if n == 0 {
		return ""
	}
	u := us[first]
	return fmt.Sprintf("%d store entr(ies) could not be read at the last sync and may hold `_metadata` not checked, e.g. %s (%s, since %s): make it readable to the guard or remove it, then sync",
		n, orRoot(u.Key), u.Cause, u.Since.UTC().Format(time.RFC3339))
}

// rootUnreadable returns an error when the store root itself could not be read: that is no single
// entry but the whole store (credentials expired, the NameNode or bucket unreachable), so the sync
// fails as a whole (every decision refused until one succeeds), as it did before unknown subtrees.
func (c *unknownCollector) rootUnreadable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if u, ok := c.found[""]; ok {
		return fmt.Errorf("the store root cannot be read: %w", u.Err)
	}
	return nil
}
