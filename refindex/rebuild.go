package refindex

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
