package refindex

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/ristretto/v2/z"
	"github.com/schollz/progressbar/v3"

	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
)

// maxMetadataSize bounds the `_metadata` the index reads (Flink's are KBs to a few MB; 1,000,000
// references take about 120 MB). Parsing holds every reference in memory, about 1 KB each at the peak
// (128 MiB: under 1.2 GB), and a larger file (anyone who can create one through the mount can make it
// as large as they like) is unparseable: every deletion is refused until it is removed.
const maxMetadataSize = 128 << 20

// readWholeMax is the size up to which a `_metadata` is read into memory in one request before
// parsing; larger files are parsed through the store's reader.
var readWholeMax int64 = 8 << 20 // a variable for tests (export_test.go)

// watchedReader remembers the first error reading the store returned, so that a parse that failed
// because the store failed (to retry: the sync fails) is told apart from bad content (unparseable).
type watchedReader struct {
	r   io.ReaderAt
	mu  sync.Mutex
	err error
}

func (w *watchedReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := w.r.ReadAt(p, off)
	if err != nil && !errors.Is(err, io.EOF) {
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
	}
	return n, err
}

// entry is one read `_metadata`: its record and normalised references.
type entry struct {
	rec  *checkpointRecord
	refs []ref
}

// writer is what badger.Txn and badger.WriteBatch have in common.
type writer interface {
	Set(k, v []byte) error
	Delete(k []byte) error
}

// layoutOf derives job folder, checkpoint id and kind from where a `_metadata` lies.
func layoutOf(key string) (job string, id int64, kind string) {
	dir := path.Dir(key)
	if dir == "." {
		dir = ""
	}
	base := path.Base(dir)
	parent := path.Dir(dir)
	if parent == "." || dir == "" {
		parent = ""
	}
	switch {
	case pathnorm.IsCheckpointDir(base):
		n, err := strconv.ParseInt(base[4:], 10, 64)
		if err != nil {
			n = -1
		}
		return parent, n, "checkpoint"
	case strings.HasPrefix(base, "savepoint-"):
		return parent, -1, "savepoint"
	}
	return parent, -1, "unknown"
}

// readEntry reads and parses one `_metadata`. A file that cannot be parsed yields a record with Err
// (fail closed); a file that vanished yields fs.ErrNotExist; other read errors are returned.
func (ix *Index) readEntry(ctx context.Context, oi store.ObjectInfo) (*entry, error) {
	if k, err := store.CleanKey(oi.Path); err != nil || k != oi.Path {
		// A listed _metadata at a key with "//", "." or ".." segments (S3 keys are plain strings; Flink
		// never writes such a key) cannot be opened by its canonical key, which names another object or
		// none: it used to count as gone at every sync, its references unprotected. Kept
		// as unparseable, it fails the index closed and says how to fix it.
		return ix.unparseable(oi, oi.Size, fmt.Errorf("a _metadata at the key %q, which ckguard cannot address (an empty, . or .. segment): what it references is unknown; move it to a clean key or delete it with an S3 tool, then run `ckguard index sync`", oi.Path)), nil
	}
	r, err := ix.st.Open(ctx, oi.Path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	size := r.Size()
	if size > maxMetadataSize {
		return ix.unparseable(oi, size, fmt.Errorf("%s is %d bytes, larger than the %d bytes (128 MiB, about a million references) a _metadata may have: remove it, or replace it by the real checkpoint's", oi.Path, size, maxMetadataSize)), nil
	}
	// Small files (nearly all) are read in one request; larger ones are parsed through the reader
	// (the parser buffers), so a parse worker never holds a whole large file.
	watched := &watchedReader{r: r}
	var src io.ReaderAt = watched
	if size <= readWholeMax {
		buf := make([]byte, size)
		if n, err := r.ReadAt(buf, 0); n != int(size) {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("read %s: %w", oi.Path, err)
		}
		src = bytes.NewReader(buf)
	}
	job, id, kind := layoutOf(oi.Path)
	rec := &checkpointRecord{Key: oi.Path, Job: job, ID: id, Kind: kind, ModTime: oi.ModTime, Size: size, ETag: oi.ETag, UID: uidOf(oi)}
	if oi.HasUID {
		// Only a store with owners can tell (a stat of the folder; on S3 it would cost a listing).
		rec.JobOwner = ix.ownsJobFolder(ctx, job, oi.UID)
	}
	pm, err := ix.opt.parse(src, size, oi.Path)
	if err != nil {
		if watched.err != nil {
			return nil, fmt.Errorf("read %s: %w", oi.Path, watched.err)
		}
		return ix.unparseable(oi, size, err), nil
	}
	rec.Format = pm.Format
	if pm.Kind == "checkpoint" || pm.Kind == "savepoint" {
		rec.Kind = pm.Kind
	}
	if rec.Kind == "checkpoint" || pm.ID >= 0 {
		rec.ID = pm.ID
	}
	e := &entry{rec: rec}
	seen := make(map[string]int, len(pm.Refs))
	for _, rr := range pm.Refs {
		var k pathnorm.Key
		if rr.Kind == RefRelative {
			k = ix.norm.Relative(oi.Path, rr.URI)
		} else {
			k = ix.norm.Absolute(rr.URI)
		}
		// Relative and segment references need the whole object just like files; the kind is kept
		// for reports.
		kind := rr.Kind
		id := string(rune('0'+kind)) + k.Path
		if i, ok := seen[id]; ok {
			e.refs[i].Length += rr.Length
			continue
		}
		seen[id] = len(e.refs)
		e.refs = append(e.refs, ref{Key: k.Path, Inside: k.Inside, Kind: kind, Length: rr.Length})
	}
	if err := ix.resolveOutside(ctx, e); err != nil {
		return nil, err
	}
	for _, r := range e.refs {
		if r.Inside {
			rec.Refs++
		} else {
			rec.Outside++
		}
	}
	return e, nil
}

func (ix *Index) unparseable(oi store.ObjectInfo, size int64, err error) *entry {
	job, id, kind := layoutOf(oi.Path)
	ix.log.Warn("unparseable _metadata: every deletion is refused until it is fixed or removed", "file", oi.Path, "err", err)
	return &entry{rec: &checkpointRecord{Key: oi.Path, Job: job, ID: id, Kind: kind, ModTime: oi.ModTime, Size: size, ETag: oi.ETag, UID: uidOf(oi), Err: err.Error()}}
}

// putEntry writes a checkpoint and its references.
func putEntry(w writer, e *entry, clearTombstones bool) error {
	if err := w.Set(ckKey(e.rec.Key), e.rec.marshal()); err != nil {
		return err
	}
	if err := w.Set(fwdKey(e.rec.Key), encodeRefs(e.refs)); err != nil {
		return err
	}
	for _, r := range e.refs {
		if err := w.Set(pairKeyFor(r, e.rec.Key), nil); err != nil {
			return err
		}
		if clearTombstones && r.Inside {
			if err := w.Delete(tombKey(r.Key)); err != nil {
				return err
			}
		}
	}
	return nil
}

func pairKeyFor(r ref, meta string) []byte {
	switch {
	case !r.Inside:
		return pairKey(tblOutside, r.Key, meta)
	case r.Kind == RefDirectory:
		return pairKey(tblDir, r.Key, meta)
	}
	return pairKey(tblReverse, r.Key, meta)
}

// removeEntry deletes a checkpoint's records; references not in keep lose this checkpoint and get a
// tombstone (their last checkpoint was retired, so they are not in-flight files).
// The tombstone records the retired record's owner and completion: it lifts grace only from files
// that checkpoint could have owned (tombstoneLifts).
func removeEntry(w writer, rec *checkpointRecord, refs []ref, keep map[string]bool, now time.Time, dropRecord bool) error {
	meta := rec.Key
	tomb, inJob := encodeTombstone(now, rec, false), encodeTombstone(now, rec, rec.JobOwner)
	if dropRecord {
		if err := w.Delete(ckKey(meta)); err != nil {
			return err
		}
		if err := w.Delete(fwdKey(meta)); err != nil {
			return err
		}
	}
	for _, r := range refs {
		pk := pairKeyFor(r, meta)
		if keep[string(pk)] {
			continue
		}
		if err := w.Delete(pk); err != nil {
			return err
		}
		if r.Inside && r.Kind != RefDirectory {
			t := tomb
			if rec.Job == "" || strings.HasPrefix(r.Key, rec.Job+"/") {
				t = inJob
			}
			if err := w.Set(tombKey(r.Key), t); err != nil {
				return err
			}
		}
	}
	return nil
}

func readRefs(txn *badger.Txn, meta string) ([]ref, error) {
	it, err := txn.Get(fwdKey(meta))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	v, err := it.ValueCopy(nil)
	if err != nil {
		return nil, err
	}
	return decodeRefs(v)
}

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

// ErrUnparseable is wrapped by IndexMetadata when the file was recorded as unparseable: the index
// then fails closed (every deletion is refused), so for the writer this is no failure.
var ErrUnparseable = errors.New("unparseable _metadata")

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

// failSync records a failed sync: every decision is refused until a sync succeeds. The error is
// persisted so that a restarted mount stays closed too.
func (ix *Index) failSync(err error) error {
	ix.mu.Lock()
	if ix.closed {
		ix.mu.Unlock()
		return err
	}
	ix.syncErr, ix.failedAt = err.Error(), time.Now()
	g := ix.cur
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
func (ix *Index) Sync(ctx context.Context) error {
	// Listing, stats and parsing run without writeMu, so that a `_metadata` closed or renamed through
	// the mount (IndexMetadata, Renamed, Deleted) is indexed at once instead of waiting for a
	// whole sync; syncMu keeps syncs and rebuilds one at a time.
	ix.syncMu.Lock()
	defer ix.syncMu.Unlock()
	defer ix.beginWork()()
	ix.readStoreClock(ctx)
	ix.mu.RLock()
	need, cur, gen := ix.needRebuild, ix.state, ix.cur
	ix.mu.RUnlock()
	if need {
		return ix.rebuildExclusive(ctx)
	}
	t0 := time.Now()
	start := t0
	var changed []store.ObjectInfo
	listed := map[string]bool{}
	err := ix.st.ListMetadata(ctx, func(oi store.ObjectInfo) error {
		listed[oi.Path] = true
		// A _metadata with unmapped references is read again at every sync: the store may prove their
		// place now (a copy that was still running, a file restored).
		if c := cur.ckpts[oi.Path]; c == nil || !sameVersion(c, oi) || c.Unmapped > 0 {
			changed = append(changed, oi)
		}
		return nil
	})
	if err != nil {
		return ix.failSync(fmt.Errorf("list _metadata in %s: %w", ix.st.Root(), err))
	}
	ix.noteListedJobs(slices.Collect(maps.Keys(listed)))
	unlisted := cur.unlisted(listed)
	// A listing may be partial (S3 targeted discovery only looks where it found checkpoints at its
	// last full walk): an indexed _metadata is retired only when the store says it is gone.
	removed, restat, _, err := ix.confirmGone(ctx, cur, unlisted)
	if err != nil {
		return ix.failSync(err)
	}
	// However many changed, they are applied as one change (in several transactions when it is large:
	// rolling.go), never by a rebuild, which would list the whole store and re-read every _metadata.
	changed = append(changed, restat...)
	var puts []*entry
	err = ix.readAll(ctx, changed, func(e *entry) error { puts = append(puts, e); return nil }, func(key string) {
		removed = append(removed, key)
	})
	if err != nil {
		return ix.failSync(err)
	}

	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.mu.RLock()
	now, closed, switched := ix.state, ix.closed, ix.cur != gen
	ttl := max(ix.pol.Grace, time.Hour)
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
	untouched := func(k string) bool { return now.ckpts[k] == cur.ckpts[k] }
	puts = slices.DeleteFunc(puts, func(e *entry) bool { return !untouched(e.rec.Key) })
	removed = slices.DeleteFunc(removed, func(k string) bool { return !untouched(k) })
	sort.Strings(removed)
	err = ix.apply(change{puts: puts, removes: removed, synced: start, tombstoneTTL: ttl})
	if errors.Is(err, errNeedRebuild) {
		return ix.rebuildLocked(ctx)
	}
	if err != nil {
		return ix.failSync(fmt.Errorf("write index: %w", err))
	}
	ix.log.Info("index synced", "added_or_changed", len(puts), "removed", len(removed), "checkpoints", len(ix.state.ckpts), "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

// rebuildExclusive runs a rebuild under writeMu (Sync holds syncMu).
func (ix *Index) rebuildExclusive(ctx context.Context) error {
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.mu.RLock()
	closed := ix.closed
	ix.mu.RUnlock()
	if closed {
		return errors.New("index is closed")
	}
	return ix.rebuildLocked(ctx)
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
// and the unchanged ones (kept). Any other stat error fails: the index cannot tell whether they are
// live.
func (ix *Index) confirmGone(ctx context.Context, cur *memState, keys []string) (gone []string, restat, kept []store.ObjectInfo, err error) {
	if len(keys) == 0 {
		return nil, nil, nil, nil
	}
	type res struct {
		key string
		oi  store.ObjectInfo
		err error
	}
	out := make([]res, len(keys))
	sem := make(chan struct{}, ix.opt.workers)
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			oi, err := ix.st.Stat(ctx, k)
			out[i] = res{key: k, oi: oi, err: err}
		}()
	}
	wg.Wait()
	for _, r := range out {
		switch {
		case errors.Is(r.err, fs.ErrNotExist):
			gone = append(gone, r.key)
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

// readAll reads infos with bounded concurrency, calling fn (serially) for each entry and gone for
// files that disappeared in the meantime. The first read error cancels the rest.
func (ix *Index) readAll(ctx context.Context, infos []store.ObjectInfo, fn func(*entry) error, gone func(string)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		e    *entry
		key  string
		err  error
		gone bool
	}
	jobs := make(chan store.ObjectInfo)
	results := make(chan result, ix.opt.workers)
	var wg sync.WaitGroup
	for range ix.opt.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for oi := range jobs {
				e, err := ix.readEntry(ctx, oi)
				r := result{e: e, key: oi.Path, err: err}
				if errors.Is(err, fs.ErrNotExist) {
					r = result{key: oi.Path, gone: true}
				}
				select {
				case results <- r:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		defer close(jobs)
		for _, oi := range infos {
			select {
			case jobs <- oi:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(results) }()
	bar := ix.newBar(len(infos), "parsing _metadata")
	var first error
	for r := range results {
		bar.Add(1)
		if first != nil {
			continue
		}
		switch {
		case r.gone:
			gone(r.key)
		case r.err != nil:
			first = r.err
			cancel()
		default:
			if err := fn(r.e); err != nil {
				first = err
				cancel()
			}
		}
	}
	bar.Finish()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

type bar interface {
	Add(int) error
	Finish() error
}

type noBar struct{}

func (noBar) Add(int) error { return nil }
func (noBar) Finish() error { return nil }

func (ix *Index) newBar(n int, what string) bar {
	if n < 100 {
		return noBar{}
	}
	return ix.progressBar(n, what)
}

// newCounter shows progress for work of unknown size (a store walk): a running count, no total.
func (ix *Index) newCounter(what string) bar { return ix.progressBar(-1, what) }

// progressBar draws on the WithProgress writer (total -1: a running count), or nothing without one.
func (ix *Index) progressBar(total int, what string) bar {
	if ix.opt.progress == nil {
		return noBar{}
	}
	return progressbar.NewOptions(total, progressbar.OptionSetWriter(ix.opt.progress), progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
}

// Rebuild recreates the index from the store alone: it writes a new generation and switches to it
// atomically; until then the previous generation stays in use, and a crash leaves it in place.
func (ix *Index) Rebuild(ctx context.Context) error {
	ix.syncMu.Lock()
	defer ix.syncMu.Unlock()
	ix.readStoreClock(ctx)
	return ix.rebuildExclusive(ctx)
}

// Stream ids of a rebuild: one per table, whose key ranges are disjoint and written in order.
const (
	streamCheckpoint uint32 = iota + 1
	streamDir
	streamForward
	streamMeta
	streamOutside
	streamReverse
)

// rebuildLocked bulk-loads a new generation with badger's StreamWriter (sorted tables written
// straight to the bottom level: no memtables, no write-ahead log, no compaction). `_metadata` files
// are parsed in parallel but consumed in key order, so checkpoint records and forward references
// stream out sorted; reverse pairs are collected as (object, checkpoint) number pairs, sorted, and
// streamed last. Memory: the distinct referenced object keys plus 8 bytes per reference.
func (ix *Index) rebuildLocked(ctx context.Context) (err error) {
	// Also reached from inside a FUSE request (an index write too large for one transaction): the
	// hook raises GOMAXPROCS for it there too. Nested works are counted.
	defer ix.beginWork()()
	t0 := time.Now()
	start := t0
	var infos []store.ObjectInfo
	listed := map[string]bool{}
	// The listing of a big bucket takes minutes: its progress is the _metadata found so far.
	listBar := ix.newCounter("listing the store for _metadata")
	err = ix.listAll(ctx, func(oi store.ObjectInfo) error {
		infos = append(infos, oi)
		listed[oi.Path] = true
		_ = listBar.Add(1)
		return nil
	})
	listBar.Finish()
	if err != nil {
		return ix.failSync(fmt.Errorf("list _metadata in %s: %w", ix.st.Root(), err))
	}
	// Belt and braces for a store whose listing misses something: a rebuild keeps every indexed
	// _metadata that still exists.
	ix.mu.RLock()
	cur := ix.state
	ix.mu.RUnlock()
	unlisted := cur.unlisted(listed)
	_, restat, kept, err := ix.confirmGone(ctx, cur, unlisted)
	if err != nil {
		return ix.failSync(err)
	}
	infos = append(append(infos, restat...), kept...)
	sort.Slice(infos, func(i, j int) bool { return infos[i].Path < infos[j].Path })
	keys := make([]string, len(infos))
	for i, oi := range infos {
		keys[i] = oi.Path
	}
	ix.noteListedJobs(keys)
	ix.mu.RLock()
	next := max(ix.cur.n, ix.maxGenOnDisk()) + 1
	ix.mu.RUnlock()
	p := filepath.Join(ix.dir, genName(next))
	if err := os.RemoveAll(p); err != nil {
		return ix.failSync(err)
	}
	db, err := badger.Open(ix.badgerOptions(p))
	if err != nil {
		return ix.failSync(fmt.Errorf("create index generation %s: %w", p, err))
	}
	committed := false
	defer func() {
		if !committed {
			db.Close()
			os.RemoveAll(p)
		}
	}()
	sw := db.NewStreamWriter()
	if err := sw.Prepare(); err != nil {
		return ix.failSync(err)
	}
	buf := z.NewBuffer(8<<20, "ckguard.rebuild")
	defer buf.Release()
	put := func(stream uint32, k, v []byte) error {
		badger.KVToBuffer(&pb.KV{Key: k, Value: v, Version: 1, StreamId: stream}, buf)
		if buf.LenNoPadding() < 4<<20 {
			return nil
		}
		err := sw.Write(buf)
		buf.Reset()
		return err
	}
	st := newMemState()
	intern := map[string]uint32{}
	var objs, metas []string
	var pairs []uint64
	var dirKeys, outKeys []string
	err = ix.readOrdered(ctx, infos, func(e *entry) error {
		mi := uint64(len(metas))
		meta := e.rec.Key
		metas = append(metas, meta)
		st.ckpts[meta] = e.rec
		adjustDirRefs(st, e.refs, +1)
		if err := put(streamCheckpoint, ckKey(meta), e.rec.marshal()); err != nil {
			return err
		}
		if err := put(streamForward, fwdKey(meta), encodeRefs(e.refs)); err != nil {
			return err
		}
		for _, r := range e.refs {
			switch {
			case !r.Inside:
				outKeys = append(outKeys, string(pairKey(tblOutside, r.Key, meta)))
			case r.Kind == RefDirectory:
				dirKeys = append(dirKeys, string(pairKey(tblDir, r.Key, meta)))
			default:
				id, ok := intern[r.Key]
				if !ok {
					// Copy: the key may be a substring of the parsed file, which must not stay pinned.
					k := strings.Clone(r.Key)
					id = uint32(len(objs))
					objs = append(objs, k)
					intern[k] = id
				}
				pairs = append(pairs, uint64(id)<<32|mi)
			}
		}
		return nil
	})
	if err != nil {
		sw.Cancel()
		return ix.failSync(fmt.Errorf("rebuild index: %w", err))
	}
	intern = nil
	// Rank the distinct objects by key so that (rank, checkpoint) pairs sort like the reverse keys.
	order := make([]uint32, len(objs))
	for i := range order {
		order[i] = uint32(i)
	}
	sort.Slice(order, func(a, b int) bool { return objs[order[a]] < objs[order[b]] })
	rank := make([]uint32, len(objs))
	for r, id := range order {
		rank[id] = uint32(r)
	}
	for i, pr := range pairs {
		pairs[i] = uint64(rank[pr>>32])<<32 | pr&0xffffffff
	}
	rank = nil
	slices.Sort(pairs)
	emitSorted := func(stream uint32, keys []string) error {
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 && keys[i-1] == k {
				continue
			}
			if err := put(stream, []byte(k), nil); err != nil {
				return err
			}
		}
		return nil
	}
	err = emitSorted(streamDir, dirKeys)
	if err == nil {
		err = put(streamMeta, keyFingerprint, []byte(ix.norm.Fingerprint()))
	}
	if err == nil {
		err = put(streamMeta, keyLastSync, encodeTime(start))
	}
	if err == nil {
		err = put(streamMeta, keyMountRules, []byte(ix.norm.MountRules()))
	}
	if err == nil {
		err = put(streamMeta, keySchema, []byte(strconv.Itoa(SchemaVersion)))
	}
	if err == nil {
		err = emitSorted(streamOutside, outKeys)
	}
	filt := newRefFilter(len(objs), ix.log)
	var h uint64
	for i := 0; err == nil && i < len(pairs); i++ {
		if i > 0 && pairs[i] == pairs[i-1] {
			continue // the same object named twice by one checkpoint (e.g. file and segment)
		}
		pr := pairs[i]
		pk := pairKey(tblReverse, objs[order[pr>>32]], metas[pr&0xffffffff])
		if i == 0 || pr>>32 != pairs[i-1]>>32 {
			obj, _ := reverseObject(pk) // what the background fill hashes for this key
			h = filt.hashBytes(obj)
		}
		filt.inc(h) // one count per reverse entry, as apply keeps it
		err = put(streamReverse, pk, nil)
	}
	if err == nil && buf.LenNoPadding() > 0 {
		err = sw.Write(buf)
	}
	if err == nil {
		err = sw.Flush()
	} else {
		sw.Cancel()
	}
	if err == nil {
		err = db.Sync()
	}
	if err == nil {
		err = ix.writeCurrent(next)
	}
	if err != nil {
		return ix.failSync(fmt.Errorf("rebuild index: %w", err))
	}
	committed = true
	st.finish()
	filt.ready.Store(true)
	gen := &generation{db: db, n: next}
	gen.filt.Store(filt)
	ix.switchGeneration(gen, st, start)
	ix.log.Info("index rebuilt", "generation", next, "checkpoints", len(st.ckpts), "references", len(pairs)+len(dirKeys)+len(outKeys),
		"objects", len(objs), "unparseable", len(st.unparseable), "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

// readOrdered reads infos with bounded concurrency and calls fn in the order of infos; files that
// vanished meanwhile are skipped. At most a small window of parsed entries is held at once.
func (ix *Index) readOrdered(ctx context.Context, infos []store.ObjectInfo, fn func(*entry) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		e   *entry
		err error
	}
	slots := make([]chan result, len(infos))
	for i := range slots {
		slots[i] = make(chan result, 1)
	}
	window := make(chan struct{}, 4*ix.opt.workers)
	jobs := make(chan int)
	go func() {
		defer close(jobs)
		for i := range infos {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	for range ix.opt.workers {
		go func() {
			for i := range jobs {
				e, err := ix.readEntry(ctx, infos[i])
				slots[i] <- result{e, err}
			}
		}()
	}
	bar := ix.newBar(len(infos), "parsing _metadata")
	defer bar.Finish()
	for i := range infos {
		var r result
		select {
		case r = <-slots[i]:
		case <-ctx.Done():
			return ctx.Err()
		}
		<-window
		bar.Add(1)
		switch {
		case errors.Is(r.err, fs.ErrNotExist):
			continue
		case r.err != nil:
			return r.err
		}
		if err := fn(r.e); err != nil {
			return err
		}
	}
	return nil
}

// IndexMetadata parses and indexes one `_metadata` synchronously (a guarded filesystem calls it when
// a `_metadata` was written and closed, or renamed into place, through the mount). A file that cannot
// be parsed is recorded as unparseable (every deletion is then refused) and the parse error returned.
func (ix *Index) IndexMetadata(ctx context.Context, p string) error {
	key, err := store.CleanKey(p)
	if err != nil {
		return err
	}
	if !store.IsMetadata(key) {
		return fmt.Errorf("index %s: not a %s file", key, store.MetadataName)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	// A _metadata the mount just wrote that cannot be read is a live checkpoint the index does not know:
	// every decision is refused until a sync reads it, instead of only this writer hearing
	// of it.
	oi, err := ix.st.Stat(ctx, key)
	if errors.Is(err, fs.ErrNotExist) {
		// A second look before believing it: a server node that has not seen the mount's own write yet.
		oi, err = ix.st.Stat(ctx, key)
	}
	if errors.Is(err, fs.ErrNotExist) || err == nil && !store.IsCheckpointFile(oi) {
		// Gone, or no checkpoint: a folder, or a FIFO or symlink named _metadata, which is never opened
		// (a FIFO would block the read under the index's and the mount's locks).
		return ix.applyOrRebuild(ctx, change{removes: []string{key}})
	}
	if err != nil {
		return ix.failSync(fmt.Errorf("index %s, written through the mount: %w", key, err))
	}
	e, err := ix.readEntry(ctx, oi)
	if errors.Is(err, fs.ErrNotExist) {
		// Gone between the stat and the read, or a store that lists an object it then cannot find (a
		// cache, an eventually consistent read right after the mount's own write): only a second stat
		// that agrees makes it gone.
		if _, serr := ix.st.Stat(ctx, key); !errors.Is(serr, fs.ErrNotExist) {
			return ix.failSync(fmt.Errorf("index %s, written through the mount: the store reports it (%v) but cannot read it: %w", key, serr, err))
		}
		return ix.applyOrRebuild(ctx, change{removes: []string{key}})
	}
	if err != nil {
		return ix.failSync(fmt.Errorf("index %s, written through the mount: %w", key, err))
	}
	if err := ix.applyOrRebuild(ctx, change{puts: []*entry{e}}); err != nil {
		return err
	}
	if e.rec.Err != "" {
		return fmt.Errorf("index %s: %w, every deletion is refused until it is fixed or removed: %s", key, ErrUnparseable, e.rec.Err)
	}
	return nil
}

func (ix *Index) applyOrRebuild(ctx context.Context, ch change) error {
	err := ix.apply(ch)
	if errors.Is(err, errNeedRebuild) {
		return ix.rebuildLocked(ctx)
	}
	if errors.Is(err, errCommitFailed) {
		return ix.failSync(fmt.Errorf("write index: %w", err))
	}
	return err
}

// Deleted records that path (a file or a directory) was removed: deleting a `_metadata` retires
// its checkpoint at once, so the files only it referenced become deletable.
func (ix *Index) Deleted(ctx context.Context, p string) error {
	key, err := store.CleanKey(p)
	if err != nil {
		return err
	}
	// Most removals through a mount (rm -rf of old files) retire nothing: answer those without
	// waiting for a running sync's write. A _metadata indexed meanwhile from a file read before this
	// removal stays indexed until the next sync: the index then refuses more, never less.
	ix.mu.RLock()
	cur := ix.state
	ix.mu.RUnlock()
	if cur.ckpts[key] == nil && len(cur.below(key)) == 0 {
		return nil
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.mu.RLock()
	cur = ix.state
	ix.mu.RUnlock()
	var removes []string
	if cur.ckpts[key] != nil {
		removes = append(removes, key)
	}
	removes = append(removes, cur.below(key)...)
	if len(removes) == 0 {
		return nil
	}
	// Retire only what the store confirms gone, as a sync does. The mount's word is not enough: on S3 a
	// file a and the folder a/ can both exist, so deleting the file removes nothing below a/; a rmdir of an
	// S3 folder marker removes only the marker; and a _metadata may have been indexed below a folder after
	// its emptiness was checked. Retiring a checkpoint that still exists would make its
	// files deletable.
	gone, _, _, err := ix.confirmGone(ctx, cur, removes)
	if err != nil {
		return fmt.Errorf("confirm that %s and the checkpoints below it are gone: %w", key, err)
	}
	if len(gone) == 0 {
		return nil
	}
	return ix.applyOrRebuild(ctx, change{removes: gone})
}

// Renamed records a rename done through the mount: checkpoints at or below from are retired and
// every `_metadata` at or below to is (re)indexed — e.g. Flink renaming its temporary metadata file
// to `_metadata`, or a savepoint directory moved (its relative references now resolve there).
func (ix *Index) Renamed(ctx context.Context, from, to string) error {
	fk, err := store.CleanKey(from)
	if err != nil {
		return err
	}
	tk, err := store.CleanKey(to)
	if err != nil {
		return err
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.mu.RLock()
	cur := ix.state
	ix.mu.RUnlock()
	var removes []string
	for _, k := range []string{fk, tk} {
		if cur.ckpts[k] != nil {
			removes = append(removes, k)
		}
		removes = append(removes, cur.below(k)...)
	}
	// Errors leave checkpoints at the target unknown to the index: every decision is refused until a sync
	// reads them.
	fail := func(err error) error { return ix.failSync(fmt.Errorf("index rename %s → %s: %w", fk, tk, err)) }
	var infos []store.ObjectInfo
	oi, err := ix.st.Stat(ctx, tk)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fail(err)
	case oi.IsDir:
		err = ix.st.Walk(ctx, tk, func(o store.ObjectInfo) error {
			if store.IsCheckpointFile(o) {
				infos = append(infos, o)
			}
			return nil
		})
		if err != nil {
			return fail(err)
		}
	case store.IsCheckpointFile(oi):
		infos = append(infos, oi)
	}
	var puts []*entry
	var unread []string
	put := map[string]bool{}
	err = ix.readAll(ctx, infos, func(e *entry) error { puts = append(puts, e); put[e.rec.Key] = true; return nil },
		func(k string) { unread = append(unread, k) })
	if err != nil {
		return fail(err)
	}
	// Listed (stat'ed) but not found when read: gone meanwhile, or a store that cannot read what it just
	// reported (a cache, a node behind the mount's own write). Only a second stat that agrees makes it
	// gone.
	for _, k := range unread {
		if o, serr := ix.st.Stat(ctx, k); !errors.Is(serr, fs.ErrNotExist) && (serr != nil || store.IsCheckpointFile(o)) {
			return fail(fmt.Errorf("the store reports %s (%v) but cannot read it", k, serr))
		}
	}
	var rm []string
	for _, k := range removes {
		if !put[k] {
			rm = append(rm, k)
		}
	}
	// As for a deletion, only what the store confirms gone is retired (an S3 rename is a copy and a
	// delete, and a failed delete leaves the source).
	gone, _, _, err := ix.confirmGone(ctx, cur, rm)
	if err != nil {
		return fail(err)
	}
	return ix.applyOrRebuild(ctx, change{puts: puts, removes: gone})
}
