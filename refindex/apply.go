package refindex

import (
	"errors"
	"fmt"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// change is one batch of index updates applied atomically.
type change struct {
	puts    []*entry // new or changed _metadata (applied first)
	removes []string // retired _metadata keys
	synced  time.Time
	// tombstoneTTL: tombstones of objects retired longer ago than this are dropped on sync (they only
	// matter while the object is younger than the grace period).
	tombstoneTTL time.Duration
}

// maxTombstonePurge bounds the tombstones one sync drops (the rest go on the next sync).
const maxTombstonePurge = 10_000

// purgeTombstones drops tombstones written before before (at most maxTombstonePurge of them).
func purgeTombstones(rt *rollingTxn, before time.Time) error {
	txn := rt.txn
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(tblTombstone), PrefetchValues: false})
	var old [][]byte
	for it.Rewind(); it.Valid() && len(old) < maxTombstonePurge; it.Next() {
		v, err := it.Item().ValueCopy(nil)
		if err == nil && tombstoneTime(v).Before(before) {
			old = append(old, it.Item().KeyCopy(nil))
		}
	}
	it.Close()
	for _, k := range old {
		if err := rt.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// errNeedRebuild asks the caller to fall back to a full rebuild into a new generation.
var errNeedRebuild = errors.New("change too large for one transaction")

// apply writes a change, additions before removals, in one badger transaction or, when it is larger
// than one, in several under one sync epoch (rolling.go), and installs the new in-memory state.
// Readers see either the old or the new state, never a mix.
func (ix *Index) apply(ch change) error {
	ix.mu.RLock()
	g, cur := ix.mu.cur, ix.mu.state
	ix.mu.RUnlock()
	rt, err := newRollingTxn(g.db, ix.opt.txnWrites)
	if err != nil {
		return err
	}
	ix.mu.RLock()
	grace, skew := ix.mu.pol.Grace, ix.mu.skew
	ix.mu.RUnlock()
	w := &changeWriter{ix: ix, rt: rt, cur: cur, next: cur.clone(), now: time.Now(), grace: grace, skew: skew, filt: filterDelta{f: g.filt.Load()}}
	committed := false
	defer func() {
		rt.discard()
		if rt.commits > 0 && !committed {
			// Part of the change is on disk, the rest is not: only a rebuild re-derives the index (the
			// marker left on disk says the same to a restarted process).
			ix.mu.Lock()
			ix.mu.needRebuild, ix.mu.interrupted = true, true
			ix.mu.Unlock()
		}
	}()
	commitCalled := false
	defer func() {
		if !commitCalled && rt.commits == 0 {
			w.filt.undoIncs()
		}
	}()
	if err := w.write(ch); err != nil {
		if rt.commits > 0 && !errors.Is(err, errCommitFailed) {
			// Part of the change is committed: the index on disk no longer matches the in-memory
			// state, exactly as after a failed commit.
			return fmt.Errorf("%w: %w", errCommitFailed, err)
		}
		return err
	}
	commitCalled = true
	if err := rt.finish(); err != nil {
		return fmt.Errorf("%w: %w", errCommitFailed, err)
	}
	committed = true
	if rt.commits > 0 {
		ix.log.Info("index change written in several transactions", "transactions", rt.commits+1, "added_or_changed", len(ch.puts), "removed", len(ch.removes))
	}
	w.next.finish()
	ix.install(g, w.next, w.filt, ch.synced)
	if len(ch.puts)+len(ch.removes) > 0 {
		// After install: a reader takes the version before it reads the keys, so a version it records
		// is never newer than the state it read (at worst older: one reconciliation more).
		ix.protChanges.Add(1)
	}
	return nil
}

// changeWriter writes one change into the index's transaction(s) and builds the in-memory state
// that goes with it (next, from the current state cur).
type changeWriter struct {
	ix        *Index
	rt        *rollingTxn
	cur, next *memState
	now       time.Time // the time of the tombstones the change writes
	grace     time.Duration
	skew      time.Duration // the store clock's correction (Index.mu.skew)
	filt      filterDelta
}

// write writes the change's puts, then its removals, then (for a sync) the sync's own records.
func (w *changeWriter) write(ch change) error {
	for _, e := range ch.puts {
		if err := w.put(e); err != nil {
			return err
		}
	}
	for _, k := range ch.removes {
		if err := w.remove(k); err != nil {
			return err
		}
	}
	if ch.synced.IsZero() {
		return nil
	}
	return w.markSynced(ch)
}

// put writes a new or changed `_metadata`; references its previous version named and this one no
// longer does lose it (and get a tombstone).
func (w *changeWriter) put(e *entry) error {
	var oldRefs []ref
	if old := w.cur.ckpts[e.rec.Key]; old != nil {
		var err error
		if oldRefs, err = readRefs(w.rt.txn, old.Key); err != nil {
			return err
		}
	}
	if old := w.cur.ckpts[e.rec.Key]; old != nil && w.holdsPrevious(old, e) {
		// A rewrite read half-way (or garbage over a checkpoint): within grace the previous
		// version's references stay, so a transient read frees nothing; past it they go, as when
		// the file is deleted (Flink never rewrites a completed _metadata).
		e.refs = oldRefs
		e.rec.HeldRefs, e.rec.Refs, e.rec.Outside = true, old.Refs, old.Outside
	}
	w.filt.count(e.rec.Key, oldRefs, e.refs)
	if err := putEntry(w.rt, e, true); err != nil {
		return err
	}
	if oldRefs != nil {
		keep := map[string]bool{}
		for _, r := range e.refs {
			keep[string(pairKeyFor(r, e.rec.Key))] = true
		}
		if err := removeEntry(w.rt, w.cur.ckpts[e.rec.Key], oldRefs, keep, w.now, false); err != nil {
			return err
		}
		adjustDirRefs(w.next, oldRefs, -1)
	}
	adjustDirRefs(w.next, e.refs, +1)
	w.next.ckpts[e.rec.Key] = e.rec
	return nil
}

// holdsPrevious reports whether the damaged new version e of a `_metadata` keeps the references of
// its previous version old: old was parseable (or itself held them), and e is younger than --grace by
// the store's clock.
func (w *changeWriter) holdsPrevious(old *checkpointRecord, e *entry) bool {
	if !e.rec.damaged() || old.Err != "" && !old.HeldRefs || w.grace <= 0 {
		return false
	}
	return w.now.Add(w.skew).Sub(e.rec.ModTime) < w.grace
}

// remove retires the checkpoint of `_metadata` key k (nothing when it is not indexed).
func (w *changeWriter) remove(k string) error {
	if w.cur.ckpts[k] == nil {
		return nil
	}
	refs, err := readRefs(w.rt.txn, k)
	if err != nil {
		return err
	}
	w.filt.count(k, refs, nil)
	if err := removeEntry(w.rt, w.cur.ckpts[k], refs, nil, w.now, true); err != nil {
		return err
	}
	adjustDirRefs(w.next, refs, -1)
	delete(w.next.ckpts, k)
	return nil
}

// markSynced drops old tombstones and records the sync's listing time; the persisted sync error is
// cleared only by a sync whose listing began after the failure.
func (w *changeWriter) markSynced(ch change) error {
	// Tombstones an unknown subtree's scope relies on (retired since it was last read) are kept while
	// it is unknown (unknown.go).
	if err := purgeTombstones(w.rt, w.ix.keepTombstonesFrom(ch.synced.Add(-ch.tombstoneTTL))); err != nil {
		return err
	}
	if err := w.rt.Set(keyLastSync, encodeTime(ch.synced)); err != nil {
		return err
	}
	w.ix.mu.RLock()
	clears := ch.synced.After(w.ix.mu.failedAt)
	w.ix.mu.RUnlock()
	if clears {
		return w.rt.Delete(keySyncErr)
	}
	return nil
}

// filterDelta is how one change moves the generation's reference filter (nil: none). The filter
// counts reverse entries: the ones a change adds are counted before the commit (and uncounted if the
// change fails before Commit is called: they never existed); the ones it removes are uncounted only
// when no view reads a state that still has them (decs: the current snapshot's undo, see snapshot).
// A failed Commit may still have written some of its entries (badger can fail after writing to the
// memtable), so after a Commit error the increments stay (an over-count only costs exact scans) and
// the caller fails closed (errCommitFailed).
type filterDelta struct {
	f          *refFilter
	incs, decs []uint64
}

// count notes that the reverse objects of `_metadata` meta go from oldRefs' to newRefs'.
func (d *filterDelta) count(meta string, oldRefs, newRefs []ref) {
	if d.f == nil {
		return
	}
	was, is := reverseObjects(oldRefs, meta), reverseObjects(newRefs, meta)
	for o := range is {
		if _, ok := was[o]; !ok {
			if testSkipFilterInc {
				continue
			}
			h := d.f.hash(o)
			d.f.inc(h)
			d.incs = append(d.incs, h)
		}
	}
	for o := range was {
		if _, ok := is[o]; !ok {
			d.decs = append(d.decs, d.f.hash(o))
		}
	}
}

// undoIncs uncounts the increments of a change that never reached Commit.
func (d *filterDelta) undoIncs() {
	for _, h := range d.incs {
		d.f.dec(h)
	}
}

// install makes next (committed in g) the current state with a new snapshot. The previous snapshot
// hands its filter decrements on (they apply once no view reads it); a sync's listing time becomes
// lastSync, and it clears a sync error raised before that listing began.
func (ix *Index) install(g *generation, next *memState, filt filterDelta, synced time.Time) {
	snap := ix.newSnapshot(g) // after the commit: its read timestamp includes it
	snap.users.Add(1)         // held by the previous snapshot until that one is finished
	ix.mu.Lock()
	old := ix.mu.snap
	old.next, old.filt, old.undo = snap, filt.f, filt.decs
	ix.mu.state, ix.mu.snap = next, snap
	if !synced.IsZero() {
		ix.mu.lastSync = synced
		// A failure after this sync's listing began (a _metadata the mount could not index) may be about
		// an object the listing did not see: it stays until a sync that started later.
		if synced.After(ix.mu.failedAt) {
			ix.mu.syncErr = ""
		}
	}
	ix.mu.Unlock()
	old.retire()
	old.release() // no longer current
}

// errCommitFailed marks an apply whose badger commit failed: some of its writes may be visible to
// later transactions, so the in-memory state no longer matches the index; the caller fails closed
// (failSync) until a sync or rebuild re-derives it.
var errCommitFailed = errors.New("index commit failed")

// commitTxn commits an apply's transaction (a test replaces it to inject commit failures).
var commitTxn = func(txn *badger.Txn) error { return txn.Commit() }

// adjustDirRefs adds d to the count of checkpoints naming each file-merging directory in refs.
func adjustDirRefs(s *memState, refs []ref, d int) {
	for _, r := range refs {
		if r.Inside && r.Kind == RefDirectory {
			if _, ok := s.dirRefs[r.Key]; !ok && d > 0 {
				s.dirRefs[strings.Clone(r.Key)] = 0 // do not pin the parsed file
			}
			s.dirRefs[r.Key] += d
			if s.dirRefs[r.Key] <= 0 {
				delete(s.dirRefs, r.Key)
			}
		}
	}
}
