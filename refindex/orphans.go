package refindex

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// Orphans lists every object the guard would let a script delete that no checkpoint needs:
// unreferenced, not a live _metadata, not pinned or --protect'ed, past the grace period, and at
// least olderThan old.
func (ix *Index) Orphans(ctx context.Context, olderThan time.Duration) (*OrphansResult, error) {
	defer ix.beginWork()()
	v, err := ix.acquire()
	if err != nil {
		return nil, err
	}
	defer v.release()
	res := &OrphansResult{OlderThan: duration.D(olderThan), Files: []OrphanFile{}}
	if b := v.blocked(); b != "" {
		res.Blocked = b
		return res, nil
	}
	if b := ix.unmappedBlock(v); b != "" {
		// Files named like an unmapped reference are kept from the list, but the list would still
		// claim more than is known: nothing is called garbage until the reference is placed.
		res.Blocked = b
		return res, nil
	}
	sc := &orphanScan{ix: ix, v: v, now: v.storeNow(v.now()), olderThan: olderThan, res: res}
	err = v.g.db.View(func(txn *badger.Txn) error {
		sc.txn = txn
		sc.it = txn.NewIterator(badger.IteratorOptions{})
		defer sc.it.Close()
		bar := ix.newCounter("scanning the store for orphans")
		defer bar.Finish()
		sc.bar = bar
		// An entry this walk cannot read is left out and named (exit 3), never an error that loses
		// the whole list, nor a silent gap.
		wctx := store.WithUnknown(ctx, func(u store.UnknownSubtree) error {
			sc.walkUnknown = append(sc.walkUnknown, u)
			return nil
		})
		return ix.st.Walk(wctx, "", sc.visit)
	})
	walkUnknown := sc.walkUnknown
	var behind errIndexBehind
	if errors.As(err, &behind) {
		return &OrphansResult{OlderThan: duration.D(olderThan), Files: []OrphanFile{},
			Blocked: fmt.Sprintf("%s %s since the last index sync, so what it references is unknown; run `ckguard index sync` (a running mount syncs every --sync-interval) and list again", behind.key, behind.what)}, nil
	}
	if err != nil {
		return nil, err
	}
	sort.Slice(res.Files, func(a, b int) bool { return res.Files[a].Path < res.Files[b].Path })
	res.Unknown = unknownHides(v.unknown)
	if len(walkUnknown) > 0 {
		u := walkUnknown[0]
		res.Unknown = strings.TrimPrefix(res.Unknown+"; ", "; ") + fmt.Sprintf("%d entr(ies) could not be read by this walk, e.g. %s (%v): what they hold is not listed", len(walkUnknown), orRoot(u.Key), u.Err)
	}
	return res, nil
}

// orphanScan is one walk of Orphans over the store, judging each file against one view of the
// index and the badger transaction holding its reverse table.
type orphanScan struct {
	ix          *Index
	v           *view
	txn         *badger.Txn
	it          *badger.Iterator
	bar         bar
	now         time.Time // the store's clock
	olderThan   time.Duration
	res         *OrphansResult
	walkUnknown []store.UnknownSubtree
}

// visit lists o as an orphan when nothing keeps it: not a checkpoint, not unknown, pinned,
// protected, referenced, younger than olderThan, or within grace without a tombstone lifting it.
func (sc *orphanScan) visit(o store.ObjectInfo) error {
	ix, v := sc.ix, sc.v
	if o.IsDir {
		return nil
	}
	if _, refused := ix.decideUnknown(v, o.Path, verdict.OpUnlink, o.Path, false); refused {
		return nil
	}
	_ = sc.bar.Add(1)
	sc.res.StoreBytes += o.Size
	if c := v.st.ckpts[o.Path]; c != nil {
		if !sameVersion(c, o) && !ix.indexedNow(o) {
			return errIndexBehind{o.Path, "changed"}
		}
		return nil
	}
	if store.IsCheckpointFile(o) && !ix.indexedNow(o) {
		// A checkpoint the index has not read (written beside the mount since the last sync):
		// what it references is unknown, so nothing may be called garbage.
		return errIndexBehind{o.Path, "appeared"}
	}
	if _, pinned := v.pins[o.Path]; pinned {
		return nil
	}
	if v.pol.protectedBy(o.Path) != "" || sc.referenced(o.Path) {
		return nil
	}
	age := sc.now.Sub(o.ModTime)
	if age < sc.olderThan || (age < v.pol.Grace && !sc.tombLifts(o)) {
		return nil
	}
	sc.res.Files = append(sc.res.Files, OrphanFile{Path: o.Path, Size: o.Size, ModTime: o.ModTime})
	sc.res.Bytes += o.Size
	return nil
}

// referenced reports whether a live checkpoint references key, or a folder above it by a
// directory handle.
func (sc *orphanScan) referenced(key string) bool {
	p := append([]byte(tblReverse+key), 0)
	sc.it.Seek(p)
	if sc.it.ValidForPrefix(p) {
		return true
	}
	for a := key; len(sc.v.st.dirRefs) > 0; {
		if sc.v.st.dirRefs[a] > 0 {
			return true
		}
		if a == "" {
			return false
		}
		a = parentKey(a)
	}
	return false
}

// tombLifts reports whether a tombstone of o lifts its grace period (a file of a retired
// checkpoint need not wait for grace).
func (sc *orphanScan) tombLifts(o store.ObjectInfo) bool {
	it, err := sc.txn.Get(tombKey(o.Path))
	if err != nil {
		return false
	}
	b, err := it.ValueCopy(nil)
	return err == nil && tombstoneLifts(b, o)
}

// indexedNow reports whether the index holds o as it is now, though the view a long walk started with
// does not: a checkpoint indexed through the mount during the walk. Its new files are young
// (grace keeps them off the list) and the older files it reuses are referenced by the checkpoints it
// follows, which the view holds.
func (ix *Index) indexedNow(o store.ObjectInfo) bool {
	ix.mu.RLock()
	cur := ix.mu.state
	ix.mu.RUnlock()
	c := cur.ckpts[o.Path]
	return c != nil && sameVersion(c, o)
}

// errIndexBehind stops an orphans walk at a _metadata the index does not hold as it is in the store.
type errIndexBehind struct{ key, what string }

func (e errIndexBehind) Error() string { return e.key + " " + e.what + " since the last index sync" }
