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
	g, cur := ix.cur, ix.state
	ix.mu.RUnlock()
	now := time.Now()
	next := cur.clone()
	rt, err := newRollingTxn(g.db, ix.opt.txnWrites)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		rt.discard()
		if rt.commits > 0 && !committed {
			// Part of the change is on disk, the rest is not: only a rebuild re-derives the index (the
			// marker left on disk says the same to a restarted process).
			ix.mu.Lock()
			ix.needRebuild, ix.interrupted = true, true
			ix.mu.Unlock()
		}
	}()
	// The reference filter counts reverse entries: the ones this change adds are counted before the
	// commit (and uncounted if the change fails before Commit is called: they never existed); the
	// ones it removes are uncounted only when no view reads a state that still has them (the current
	// snapshot's undo, see snapshot). A failed Commit may still have written some of its entries
	// (badger can fail after writing to the memtable), so after a Commit error the increments stay
	// (an over-count only costs exact scans) and the caller fails closed (errCommitFailed).
	f := g.filt.Load()
	var incs, decs []uint64
	commitCalled := false
	defer func() {
		if !commitCalled && rt.commits == 0 {
			for _, h := range incs {
				f.dec(h)
			}
		}
	}()
	count := func(meta string, oldRefs, newRefs []ref) {
		if f == nil {
			return
		}
		was, is := reverseObjects(oldRefs, meta), reverseObjects(newRefs, meta)
		for o := range is {
			if _, ok := was[o]; !ok {
				if testSkipFilterInc {
					continue
				}
				h := f.hash(o)
				f.inc(h)
				incs = append(incs, h)
			}
		}
		for o := range was {
			if _, ok := is[o]; !ok {
				decs = append(decs, f.hash(o))
			}
		}
	}
	fail := func(err error) error {
		if rt.commits > 0 && !errors.Is(err, errCommitFailed) {
			// Part of the change is committed: the index on disk no longer matches the in-memory
			// state, exactly as after a failed commit.
			return fmt.Errorf("%w: %w", errCommitFailed, err)
		}
		return err
	}
	for _, e := range ch.puts {
		var oldRefs []ref
		if old := cur.ckpts[e.rec.Key]; old != nil {
			var err error
			if oldRefs, err = readRefs(rt.txn, old.Key); err != nil {
				return fail(err)
			}
		}
		count(e.rec.Key, oldRefs, e.refs)
		if err := putEntry(rt, e, true); err != nil {
			return fail(err)
		}
		if oldRefs != nil {
			keep := map[string]bool{}
			for _, r := range e.refs {
				keep[string(pairKeyFor(r, e.rec.Key))] = true
			}
			if err := removeEntry(rt, cur.ckpts[e.rec.Key], oldRefs, keep, now, false); err != nil {
				return fail(err)
			}
			adjustDirRefs(next, oldRefs, -1)
		}
		adjustDirRefs(next, e.refs, +1)
		next.ckpts[e.rec.Key] = e.rec
	}
	for _, k := range ch.removes {
		if cur.ckpts[k] == nil {
			continue
		}
		refs, err := readRefs(rt.txn, k)
		if err != nil {
			return fail(err)
		}
		count(k, refs, nil)
		if err := removeEntry(rt, cur.ckpts[k], refs, nil, now, true); err != nil {
			return fail(err)
		}
		adjustDirRefs(next, refs, -1)
		delete(next.ckpts, k)
	}
	if !ch.synced.IsZero() {
		if err := purgeTombstones(rt, ch.synced.Add(-ch.tombstoneTTL)); err != nil {
			return fail(err)
		}
		if err := rt.Set(keyLastSync, encodeTime(ch.synced)); err != nil {
			return fail(err)
		}
		ix.mu.RLock()
		clears := ch.synced.After(ix.failedAt)
		ix.mu.RUnlock()
		if clears {
			if err := rt.Delete(keySyncErr); err != nil {
				return fail(err)
			}
		}
	}
	commitCalled = true
	if err := rt.finish(); err != nil {
		return fmt.Errorf("%w: %w", errCommitFailed, err)
	}
	committed = true
	if rt.commits > 0 {
		ix.log.Info("index change written in several transactions", "transactions", rt.commits+1, "added_or_changed", len(ch.puts), "removed", len(ch.removes))
	}
	next.finish()
	snap := ix.newSnapshot(g) // after the commit: its read timestamp includes it
	snap.users.Add(1)         // held by the previous snapshot until that one is finished
	ix.mu.Lock()
	old := ix.snap
	old.next, old.filt, old.undo = snap, f, decs
	ix.state, ix.snap = next, snap
	if !ch.synced.IsZero() {
		ix.lastSync = ch.synced
		// A failure after this sync's listing began (a _metadata the mount could not index) may be about
		// an object the listing did not see: it stays until a sync that started later.
		if ch.synced.After(ix.failedAt) {
			ix.syncErr = ""
		}
	}
	ix.mu.Unlock()
	old.retire()
	old.release() // no longer current
	return nil
}

// errCommitFailed marks an apply whose badger commit failed: some of its writes may be visible to
// later transactions, so the in-memory state no longer matches the index; the caller fails closed
// (failSync) until a sync or rebuild re-derives it.
var errCommitFailed = errors.New("index commit failed")

// commitTxn commits an apply's transaction (a test replaces it to inject commit failures).
var commitTxn = func(txn *badger.Txn) error { return txn.Commit() }

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
