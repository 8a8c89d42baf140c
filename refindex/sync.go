package refindex

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/ckguard/ckguard/refindex/store"
)

// failSync records a failed sync: every decision is refused until a sync succeeds. The error is
// persisted so that a restarted mount stays closed too.
func (ix *Index) failSync(err error) error {
	ix.mu.Lock()
	if ix.mu.closed {
		ix.mu.Unlock()
		return err
	}
	ix.mu.syncErr, ix.mu.failedAt = err.Error(), time.Now()
	g := ix.mu.cur
	g.users.Add(1) // Sync fails outside writeMu: keep Close or a switch from closing g meanwhile
	ix.mu.Unlock()
	_ = g.db.Update(func(txn *badger.Txn) error { return txn.Set(keySyncErr, []byte(err.Error())) })
	g.users.Done()
	ix.log.Error("index sync failed; refusing every deletion until a sync succeeds", "err", err)
	return err
}

// Sync brings the index up to date with the store: it lists every `_metadata`, parses the new and
// changed ones, and applies additions before removals in one transaction (or, for large changes and
// changed path maps, builds a new generation and switches to it atomically).
func (ix *Index) Sync(ctx context.Context) (err error) {
	// Listing, stats and parsing run without writeMu, so that a `_metadata` closed or renamed through
	// the mount (IndexMetadata, Renamed, Deleted) is indexed at once instead of waiting for a
	// whole sync; syncMu keeps syncs and rebuilds one at a time.
	ix.syncMu.Lock()
	defer ix.syncMu.Unlock()
	defer ix.afterSync(ctx, &err)
	defer ix.beginWork()()
	ix.readStoreClock(ctx)
	ix.loadSharedPins(ctx)
	ix.mu.RLock()
	need := ix.mu.needRebuild
	sr := &syncRun{cur: ix.mu.state, gen: ix.mu.cur, prevList: ix.mu.lastSync, start: time.Now()}
	ix.mu.RUnlock()
	if need {
		return ix.rebuildExclusive(ctx)
	}
	if err := ix.syncList(ctx, sr); err != nil {
		return ix.failSync(err)
	}
	if err := ix.syncRead(ctx, sr); err != nil {
		return ix.failSync(err)
	}
	return ix.syncCommit(ctx, sr)
}

// syncRun is one Sync's state from its listing to its commit. cur is the memory state the sync
// started from; everything it reads is compared with it, and at the commit only keys whose record is
// still cur's (nothing indexed, renamed or deleted through the mount meanwhile) are written.
type syncRun struct {
	cur      *memState
	gen      *generation // the generation the sync started on; a switch meanwhile ends the sync
	prevList time.Time   // the previous complete listing's start
	start    time.Time   // this listing's start: the index is synced as of it
	// unk collects the unknown subtrees every listing and stat of this sync reports; lctx carries it.
	unk     unknownCollector
	lctx    context.Context
	listed  map[string]bool    // every _metadata the listing named
	changed []store.ObjectInfo // listed or re-stat'ed, to be (re)read
	puts    []*entry
	removed []string
}

// syncList lists every _metadata into sr.listed and queues in sr.changed the new ones and those to
// read again. An entry the listing cannot read is an unknown subtree (unknown.go), not a failed sync;
// an unreadable store root is.
func (ix *Index) syncList(ctx context.Context, sr *syncRun) error {
	sr.listed = map[string]bool{}
	sr.lctx = sr.unk.withUnknown(ctx)
	err := ix.st.ListMetadata(sr.lctx, func(oi store.ObjectInfo) error {
		sr.listed[oi.Path] = true
		// A _metadata with unmapped references is read again at every sync: the store may prove their
		// place now (a copy that was still running, a file restored).
		// So is a damaged one holding its previous version's references (until it parses or is past
		// --grace), and a record of an older version without a class (Bad) for a bad _metadata.
		if c := sr.cur.ckpts[oi.Path]; c == nil || !sameVersion(c, oi) || c.Unmapped > 0 || c.HeldRefs || c.Changing || c.Err != "" && c.Bad == "" {
			sr.changed = append(sr.changed, oi)
		}
		return nil
	})
	if err == nil {
		err = sr.unk.rootUnreadable()
	}
	if err != nil {
		return fmt.Errorf("list _metadata in %s: %w", ix.st.Root(), err)
	}
	ix.noteListedJobs(slices.Collect(maps.Keys(sr.listed)))
	return nil
}

// syncRead decides what the listing means: the indexed _metadata the store confirms gone are
// removed, the changed ones read into sr.puts. When some are removed, the guard is asked to retire
// them first and the store listed again, so that what the guard brings back is found and kept.
func (ix *Index) syncRead(ctx context.Context, sr *syncRun) error {
	unlisted := sr.cur.unlisted(sr.listed)
	// A listing may be partial (S3 targeted discovery only looks where it found checkpoints at its
	// last full walk): an indexed _metadata is retired only when the store says it is gone.
	removed, restat, _, err := ix.confirmGone(ctx, sr.cur, unlisted, &sr.unk)
	if err != nil {
		return err
	}
	sr.removed = removed
	// However many changed, they are applied as one change (in several transactions when it is large:
	// rolling.go), never by a rebuild, which would list the whole store and re-read every _metadata.
	sr.changed = append(sr.changed, restat...)
	read := func(infos []store.ObjectInfo) error {
		return ix.readAll(ctx, infos, func(e *entry) error { sr.puts = append(sr.puts, e); return nil }, func(key string) {
			sr.removed = append(sr.removed, key)
		})
	}
	if err := read(sr.changed); err != nil {
		return err
	}
	if len(sr.removed) == 0 {
		return nil
	}
	incoming := make([]string, 0, len(sr.changed))
	for _, oi := range sr.changed {
		if sr.cur.ckpts[oi.Path] == nil {
			incoming = append(incoming, oi.Path) // new, not re-read
		}
	}
	// Before the second listing, so that what the guard brings back is found there and kept.
	ix.guardRetire(ctx, slices.Clone(sr.removed), incoming)
	more, err := ix.relistAfterRetire(sr.lctx, sr.cur, sr.listed, sr.changed, &sr.removed)
	if err != nil {
		return err
	}
	return read(more)
}

// syncCommit applies what sr read under writeMu, as of sr.start, unless the index closed or switched
// generation meanwhile; then installs the unknown subtrees the sync found.
func (ix *Index) syncCommit(ctx context.Context, sr *syncRun) error {
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.mu.RLock()
	now, closed, switched := ix.mu.state, ix.mu.closed, ix.mu.cur != sr.gen
	ttl := max(ix.mu.pol.Grace, time.Hour)
	ix.mu.RUnlock()
	if closed {
		return errors.New("index is closed")
	}
	if switched {
		// A rebuild (IndexMetadata's fallback) replaced the generation meanwhile: it listed the
		// store after this sync started.
		return nil
	}
	// A key indexed, renamed or deleted through the mount while this sync ran has a newer record
	// than what this sync read: leave it alone (records are replaced, never modified, so an
	// unchanged pointer means untouched).
	untouched := func(k string) bool { return now.ckpts[k] == sr.cur.ckpts[k] }
	puts := slices.DeleteFunc(sr.puts, func(e *entry) bool { return !untouched(e.rec.Key) })
	removed := slices.DeleteFunc(sr.removed, func(k string) bool { return !untouched(k) })
	sort.Strings(removed)
	err := ix.apply(change{puts: puts, removes: removed, synced: sr.start, tombstoneTTL: ttl})
	if errors.Is(err, errNeedRebuild) {
		return ix.rebuildLocked(ctx)
	}
	if err != nil {
		return ix.failSync(fmt.Errorf("write index: %w", err))
	}
	ix.installUnknown(sr.unk.found, sr.start, sr.prevList, false)
	ix.log.Info("index synced", "added_or_changed", len(puts), "removed", len(removed), "checkpoints", len(ix.mu.state.ckpts), "took", time.Since(sr.start).Round(time.Millisecond))
	return nil
}

// sameVersion reports whether a listed or stat'ed object is the version a record was read from.
// Where both sides carry an ETag it decides (with the size): S3 reports LastModified at different
// precisions in listings (milliseconds) and HEAD (seconds), so comparing times would call every
// object changed. Otherwise the modification times must agree, at second precision when either side
// has none finer.
//
// Where the store has owners, a record read without one (an index written before owners were kept)
// or with another one (root gave the file away) is another version too: the owner decides which
// checkpoints compete for a job's newest and which files a retirement may tombstone.
func sameVersion(c *checkpointRecord, oi store.ObjectInfo) bool {
	if c.Size != oi.Size {
		return false
	}
	if oi.HasUID && (c.UID == nil || *c.UID != oi.UID) {
		return false
	}
	if c.ETag != "" && oi.ETag != "" {
		return strings.Trim(c.ETag, `"`) == strings.Trim(oi.ETag, `"`)
	}
	if c.ModTime.Equal(oi.ModTime) {
		return true
	}
	if c.ModTime.Nanosecond() == 0 || oi.ModTime.Nanosecond() == 0 {
		return c.ModTime.Truncate(time.Second).Equal(oi.ModTime.Truncate(time.Second))
	}
	return false
}

// confirmGone stats indexed `_metadata` keys a listing did not report. It returns the keys the store
// says do not exist (to retire), the ones that exist in another version than indexed (to re-read)
// and the unchanged ones (kept). Any other stat error keeps the key as indexed (its references stay
// protected) and makes it an unknown subtree of unk (scoped: the rest of the sync goes on); without unk
// it fails: the index cannot tell whether they are live.
func (ix *Index) confirmGone(ctx context.Context, cur *memState, keys []string, unk *unknownCollector) (gone []string, restat, kept []store.ObjectInfo, err error) {
	if len(keys) == 0 {
		return nil, nil, nil, nil
	}
	type res struct {
		key     string
		oi      store.ObjectInfo
		err     error
		statted bool
	}
	out := make([]res, len(keys))
	ix.inParallel(ctx, len(keys), noBar{}, func(i int) {
		oi, err := ix.st.Stat(ctx, keys[i])
		out[i] = res{key: keys[i], oi: oi, err: err, statted: true}
	})
	for i, r := range out {
		if !r.statted {
			// Not stat'ed: ctx was done before its turn. Unknown is not gone.
			r = res{key: keys[i], err: ctx.Err()}
		}
		switch {
		case errors.Is(r.err, fs.ErrNotExist):
			gone = append(gone, r.key)
		case r.err != nil && unk != nil && ctx.Err() == nil:
			unk.addUncovered(store.UnknownSubtree{Key: r.key, Err: fmt.Errorf("stat of the indexed _metadata: %w", r.err)})
			kept = append(kept, store.ObjectInfo{Path: r.key})
		case r.err != nil:
			return nil, nil, nil, fmt.Errorf("stat %s (indexed; checking whether it is gone from %s): %w", r.key, ix.st.Root(), r.err)
		case r.oi.IsDir || r.oi.Special:
			gone = append(gone, r.key) // a directory (or a FIFO, a symlink) named _metadata is no checkpoint
		case !sameVersion(cur.ckpts[r.key], r.oi):
			r.oi.Path = r.key
			restat = append(restat, r.oi)
		default:
			r.oi.Path = r.key
			kept = append(kept, r.oi)
		}
	}
	return gone, restat, kept, nil
}

// listAll lists every `_metadata` of the store, never a store's partial shortcut (see FullLister).
func (ix *Index) listAll(ctx context.Context, fn func(store.ObjectInfo) error) error {
	if fl, ok := ix.st.(store.FullLister); ok {
		return fl.ListAllMetadata(ctx, fn)
	}
	return ix.st.ListMetadata(ctx, fn)
}

// relistAfterRetire lists the store again once a sync has found `_metadata` to retire, and returns what
// this listing reports that the first did not and the index does not hold as it is (to read and put
// with the retirements); a key to retire that it reports again is not retired but read again.
//
// A listing is no snapshot of the store. Flink completes a checkpoint (writes its `_metadata`) before it
// deletes the one it subsumes; when the new one lies where the first listing had already been (chk-10
// is listed before chk-9; a job restored in CLAIM mode deletes the claimed checkpoint in another job
// folder) and the old one where it had not been yet, that listing reports neither. Retiring the old
// one then would leave a file both reference (an old shared SST) deletable until the next sync, though
// a live checkpoint referenced it all along. This listing starts after the old one was found gone, so
// it reports the new one, and the additions are applied before the retirements, in one change.
// Left open: a second hand-over of the same files completing within this listing.
//
// Only what the first listing did not report (or what is to be retired) matters here, so a store that
// can leave out known keys (store.NewLister) is asked for the others only: on S3 that spares the
// requests that would only report checkpoints the first listing saw, not the listings that find new ones.
func (ix *Index) relistAfterRetire(ctx context.Context, cur *memState, listed map[string]bool, queued []store.ObjectInfo, removed *[]string) ([]store.ObjectInfo, error) {
	inQueue := make(map[string]bool, len(queued))
	for _, oi := range queued {
		inQueue[oi.Path] = true
	}
	gone := make(map[string]bool, len(*removed))
	for _, k := range *removed {
		gone[k] = true
	}
	var more []store.ObjectInfo
	list := ix.st.ListMetadata
	if nl, ok := ix.st.(store.NewLister); ok {
		// What the first listing reported (or the sync queued) and is not to be retired is ignored
		// below: the store need not look for it again (at scale this is most of the first listing's
		// requests). A key to retire is always looked for. A copy: listed changes below.
		skip := make(map[string]bool, len(listed)+len(inQueue))
		for k := range listed {
			skip[k] = !gone[k]
		}
		for k := range inQueue {
			skip[k] = !gone[k]
		}
		list = func(ctx context.Context, fn func(store.ObjectInfo) error) error {
			return nl.ListNewMetadata(ctx, func(k string) bool { return skip[k] }, fn)
		}
	}
	err := list(ctx, func(oi store.ObjectInfo) error {
		if gone[oi.Path] {
			// There again (renamed back, rewritten): read it like any changed one.
			delete(gone, oi.Path)
			more = append(more, oi)
			return nil
		}
		if listed[oi.Path] || inQueue[oi.Path] {
			return nil
		}
		listed[oi.Path] = true
		// So is a damaged one holding its previous version's references (until it parses or is past
		// --grace), and a record of an older version without a class (Bad) for a bad _metadata.
		if c := cur.ckpts[oi.Path]; c == nil || !sameVersion(c, oi) || c.Unmapped > 0 || c.HeldRefs || c.Changing || c.Err != "" && c.Bad == "" {
			more = append(more, oi)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list _metadata in %s again before retiring %d checkpoint(s) it no longer holds: %w", ix.st.Root(), len(*removed), err)
	}
	*removed = slices.DeleteFunc(*removed, func(k string) bool { return !gone[k] })
	ix.noteListedJobs(slices.Collect(maps.Keys(listed)))
	return more, nil
}
