package refindex

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/ristretto/v2/z"

	"github.com/ckguard/ckguard/refindex/store"
)

// Rebuild recreates the index from the store alone: it writes a new generation and switches to it
// atomically; until then the previous generation stays in use, and a crash leaves it in place.
func (ix *Index) Rebuild(ctx context.Context) (err error) {
	ix.syncMu.Lock()
	defer ix.syncMu.Unlock()
	defer ix.afterSync(ctx, &err)
	ix.readStoreClock(ctx)
	ix.loadSharedPins(ctx)
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
	ix.mu.RLock()
	prevList := ix.mu.lastSync
	ix.mu.RUnlock()
	infos, unknown, err := ix.listForRebuild(ctx)
	if err != nil {
		return ix.failSync(err)
	}
	ix.mu.RLock()
	next := max(ix.mu.cur.n, ix.maxGenOnDisk()) + 1
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
	out := &streamBuf{sw: sw, buf: z.NewBuffer(8<<20, "ckguard.rebuild")}
	defer out.buf.Release()
	t := newRebuildTables()
	if err := ix.readOrdered(ctx, infos, func(e *entry) error { return t.add(e, out) }); err != nil {
		sw.Cancel()
		return ix.failSync(fmt.Errorf("rebuild index: %w", err))
	}
	t.sortPairs()
	filt := newRefFilter(len(t.objs), ix.log)
	err = ix.emitTables(t, out, filt, start)
	if err == nil && out.buf.LenNoPadding() > 0 {
		err = sw.Write(out.buf)
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
	t.st.finish()
	filt.markReady()
	gen := &generation{db: db, n: next}
	gen.filt.Store(filt)
	ix.switchGeneration(gen, t.st, start)
	ix.installUnknown(unknown, start, prevList, true)
	ix.log.Info("index rebuilt", "generation", next, "checkpoints", len(t.st.ckpts), "references", len(t.pairs)+len(t.dirKeys)+len(t.outKeys),
		"objects", len(t.objs), "unparseable", len(t.st.unparseable), "took", time.Since(t0).Round(time.Millisecond))
	// The rebuild's tables (every distinct object key, 8 bytes per reference: gigabytes at 10 M
	// objects) are garbage now; give their memory back to the system at once instead of at the
	// scavenger's pace, so a mount's resident size after its first build is its steady state. It
	// costs one collection of what is live now (the new generation's state) per rebuild, under the
	// writeMu the whole rebuild held; the enforcer's lock is never held across a rebuild.
	t, infos = nil, nil
	debug.FreeOSMemory()
	return nil
}

// listForRebuild lists every `_metadata` of the store, sorted by key (the order the tables stream
// out in). Belt and braces for a store whose listing misses something: every indexed `_metadata`
// that still exists is kept.
func (ix *Index) listForRebuild(ctx context.Context) ([]store.ObjectInfo, map[string]store.UnknownSubtree, error) {
	var infos []store.ObjectInfo
	listed := map[string]bool{}
	// The listing of a big bucket takes minutes: its progress is the _metadata found so far.
	listBar := ix.newCounter("listing the store for _metadata")
	var unk unknownCollector
	ctx = unk.withUnknown(ctx)
	err := ix.listAll(ctx, func(oi store.ObjectInfo) error {
		infos = append(infos, oi)
		listed[oi.Path] = true
		_ = listBar.Add(1)
		return nil
	})
	listBar.Finish()
	if err == nil {
		err = unk.rootUnreadable()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list _metadata in %s: %w", ix.st.Root(), err)
	}
	ix.mu.RLock()
	cur := ix.mu.state
	ix.mu.RUnlock()
	unlisted := cur.unlisted(listed)
	gone, restat, kept, err := ix.confirmGone(ctx, cur, unlisted, nil) // a rebuild keeps only what it reads: a stat error fails it
	if err != nil {
		return nil, nil, err
	}
	infos = append(append(infos, restat...), kept...)
	if len(gone) > 0 {
		// A checkpoint that completed where the listing had already been, while the one it subsumed
		// (indexed, now gone) was deleted where it had not been yet, is in neither: list again, from
		// after the old one was found gone (see relistAfterRetire).
		for _, oi := range infos {
			listed[oi.Path] = true
		}
		err := ix.listAll(ctx, func(oi store.ObjectInfo) error {
			if !listed[oi.Path] {
				listed[oi.Path] = true
				infos = append(infos, oi)
			}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("list _metadata in %s again before dropping %d checkpoint(s) it no longer holds: %w", ix.st.Root(), len(gone), err)
		}
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Path < infos[j].Path })
	keys := make([]string, len(infos))
	for i, oi := range infos {
		keys[i] = oi.Path
	}
	ix.noteListedJobs(keys)
	return infos, unk.found, nil
}

// streamBuf batches a rebuild's key-value pairs for the StreamWriter, writing every 4 MiB.
type streamBuf struct {
	sw  *badger.StreamWriter
	buf *z.Buffer
}

func (s *streamBuf) put(stream uint32, k, v []byte) error {
	badger.KVToBuffer(&pb.KV{Key: k, Value: v, Version: 1, StreamId: stream}, s.buf)
	if s.buf.LenNoPadding() < 4<<20 {
		return nil
	}
	err := s.sw.Write(s.buf)
	s.buf.Reset()
	return err
}

// emitSorted streams the distinct keys of one table in order.
func (s *streamBuf) emitSorted(stream uint32, keys []string) error {
	sort.Strings(keys)
	for i, k := range keys {
		if i > 0 && keys[i-1] == k {
			continue
		}
		if err := s.put(stream, []byte(k), nil); err != nil {
			return err
		}
	}
	return nil
}

// rebuildTables is what a rebuild collects while it streams checkpoint records and forward
// references: the in-memory state, and the other tables' entries, to be sorted before they stream.
type rebuildTables struct {
	st     *memState
	intern map[string]uint32 // object key → index in objs (dropped once the reading is done)
	objs   []string          // distinct reverse-referenced object keys
	metas  []string          // _metadata keys, in the order read
	// pairs: (object, checkpoint) as objs index << 32 | metas index; after sortPairs, the object's
	// rank by key instead of its index, sorted (the order of the reverse keys).
	pairs            []uint64
	order            []uint32 // after sortPairs: rank → objs index
	dirKeys, outKeys []string
}

func newRebuildTables() *rebuildTables {
	return &rebuildTables{st: newMemState(), intern: map[string]uint32{}}
}

// add records one read `_metadata`: its checkpoint record and forward references stream out at
// once (they come in key order), its other references are kept for later.
func (t *rebuildTables) add(e *entry, out *streamBuf) error {
	mi := uint64(len(t.metas))
	meta := e.rec.Key
	t.metas = append(t.metas, meta)
	t.st.ckpts[meta] = e.rec
	adjustDirRefs(t.st, e.refs, +1)
	if err := out.put(streamCheckpoint, ckKey(meta), e.rec.marshal()); err != nil {
		return err
	}
	if err := out.put(streamForward, fwdKey(meta), encodeRefs(e.refs)); err != nil {
		return err
	}
	for _, r := range e.refs {
		switch {
		case !r.Inside:
			t.outKeys = append(t.outKeys, string(pairKey(tblOutside, r.Key, meta)))
		case r.Kind == RefDirectory:
			t.dirKeys = append(t.dirKeys, string(pairKey(tblDir, r.Key, meta)))
		default:
			id, ok := t.intern[r.Key]
			if !ok {
				// Copy: the key may be a substring of the parsed file, which must not stay pinned.
				k := strings.Clone(r.Key)
				id = uint32(len(t.objs))
				t.objs = append(t.objs, k)
				t.intern[k] = id
			}
			t.pairs = append(t.pairs, uint64(id)<<32|mi)
		}
	}
	return nil
}

// sortPairs ranks the distinct objects by key so that (rank, checkpoint) pairs sort like the
// reverse keys, and sorts them.
func (t *rebuildTables) sortPairs() {
	t.intern = nil
	order := make([]uint32, len(t.objs))
	for i := range order {
		order[i] = uint32(i)
	}
	sort.Slice(order, func(a, b int) bool { return t.objs[order[a]] < t.objs[order[b]] })
	rank := make([]uint32, len(t.objs))
	for r, id := range order {
		rank[id] = uint32(r)
	}
	for i, pr := range t.pairs {
		t.pairs[i] = uint64(rank[pr>>32])<<32 | pr&0xffffffff
	}
	slices.Sort(t.pairs)
	t.order = order
}

// emitTables streams the tables that follow the forward references, in key order: directory
// references, the metadata keys (fingerprint, last sync at start, mount rules, schema), outside
// references, and the reverse pairs, counted into filt as apply counts them.
func (ix *Index) emitTables(t *rebuildTables, out *streamBuf, filt *refFilter, start time.Time) error {
	err := out.emitSorted(streamDir, t.dirKeys)
	if err == nil {
		err = out.put(streamMeta, keyFingerprint, []byte(ix.norm.Fingerprint()))
	}
	if err == nil {
		err = out.put(streamMeta, keyLastSync, encodeTime(start))
	}
	if err == nil {
		err = out.put(streamMeta, keyMountRules, []byte(ix.norm.MountRules()))
	}
	if err == nil {
		err = out.put(streamMeta, keySchema, []byte(strconv.Itoa(SchemaVersion)))
	}
	if err == nil {
		err = out.emitSorted(streamOutside, t.outKeys)
	}
	var h uint64
	for i := 0; err == nil && i < len(t.pairs); i++ {
		if i > 0 && t.pairs[i] == t.pairs[i-1] {
			continue // the same object named twice by one checkpoint (e.g. file and segment)
		}
		pr := t.pairs[i]
		pk := pairKey(tblReverse, t.objs[t.order[pr>>32]], t.metas[pr&0xffffffff])
		if i == 0 || pr>>32 != t.pairs[i-1]>>32 {
			obj, _ := reverseObject(pk) // what the background fill hashes for this key
			h = filt.hashBytes(obj)
		}
		filt.inc(h) // one count per reverse entry, as apply keeps it
		err = out.put(streamReverse, pk, nil)
	}
	return err
}

// rebuildExclusive runs a rebuild under writeMu (Sync holds syncMu).
func (ix *Index) rebuildExclusive(ctx context.Context) error {
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.mu.RLock()
	closed := ix.mu.closed
	ix.mu.RUnlock()
	if closed {
		return errors.New("index is closed")
	}
	return ix.rebuildLocked(ctx)
}
