package refindex

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

var incidentNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// incidentIndex opens an index over the IncidentTwo tree in dir (reopen with the same dir) and returns
// a live checkpoint with a file only it references.
func incidentIndex(t *testing.T, root, dir string, tr *treegen.Tree) (ix *Index, meta, only string) {
	t.Helper()
	st, err := localstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	pol := DefaultPolicy()
	pol.MaxStaleness, pol.ActiveWindow = 0, 0
	pol.Now = func() time.Time { return incidentNow }
	ix, err = Open(dir, st, pol, WithPathMap(tr.Maps, tr.EntropyKey), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]int{}
	for _, c := range tr.Live {
		for _, r := range c.Refs {
			owners[r]++
		}
	}
	for m, c := range tr.Live {
		for _, r := range c.Refs {
			if owners[r] == 1 {
				return ix, m, r
			}
		}
	}
	ix.Close()
	t.Fatal("scenario has no checkpoint with an exclusive file")
	return nil, "", ""
}

func incidentTree(t *testing.T) *treegen.Tree {
	t.Helper()
	tr, err := treegen.IncidentTwo(t.TempDir(), incidentNow)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// A decrement of a zero slot never wraps it (a wrapped slot returns to 0 after one increment and then
// "proves" a referenced object unreferenced): the filter is disabled for good and says so once.
func TestFilterDecOfZeroDisablesFilter(t *testing.T) {
	var logged bytes.Buffer
	f := newRefFilter(0, slog.New(slog.NewTextHandler(&logged, nil)))
	f.ready.Store(true)
	h := f.hash("flink/job/shared/a")
	if !f.unreferenced("flink/job/shared/a", 1) {
		t.Fatal("an empty ready filter must answer unreferenced")
	}
	f.dec(h)
	f.dec(h)
	if got := f.count(h); got != 0 {
		t.Fatalf("a decrement of a zero slot left it at %d", got)
	}
	f.inc(h)
	if f.unreferenced("flink/job/shared/a", 1) || f.unreferenced("flink/job/other", 1) {
		t.Fatal("a filter that under-counted is still consulted")
	}
	if n := strings.Count(logged.String(), "level=ERROR"); n != 1 {
		t.Fatalf("want one error log for the broken filter, got %d: %s", n, logged.String())
	}
	if f.count(h) != 1 {
		t.Fatal("increments still count")
	}
}

// Every path that counts the filter splits a reverse key the same way: an index generation written
// before NUL references were refused may hold r/a\x00b\x00<meta>; after a reopen (background fill)
// retiring that checkpoint must leave every slot at zero, never decrement a slot the fill did not
// count.
func TestFilterFillSplitsKeysAsApply(t *testing.T) {
	ctx := context.Background()
	tr := incidentTree(t)
	dir := t.TempDir()
	ix, _, _ := incidentIndex(t, tr.Root, dir, tr)
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// Written directly (the parser now refuses such a reference): what an older index may hold.
	const evil = "flink/evil/chk-1/_metadata"
	e := &entry{rec: &checkpointRecord{Key: evil, Job: "flink/evil", ID: 1, Kind: "checkpoint", ModTime: incidentNow.Add(-48 * time.Hour), Refs: 2},
		refs: []ref{{Key: "flink/evil/shared/a\x00b", Inside: true, Kind: RefFile}, {Key: "flink/evil/shared/c\x00d\x00e", Inside: true, Kind: RefFile}}}
	ix.writeMu.Lock()
	err := ix.apply(change{puts: []*entry{e}})
	ix.writeMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	ix.Close()

	ix, _, _ = incidentIndex(t, tr.Root, dir, tr)
	defer ix.Close()
	ix.Decide(ctx, "flink/nothing", verdict.OpUnlink) // starts the background fill
	for t0 := time.Now(); !FilterReady(ix); time.Sleep(time.Millisecond) {
		if time.Since(t0) > 30*time.Second {
			t.Fatal("filter not built")
		}
	}
	f := ix.mu.cur.filt.Load()
	want := map[uint64]uint32{}
	err = ix.mu.cur.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(tblReverse)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if k := it.Item().Key(); !bytes.Contains(k, []byte(evil)) {
				obj, _ := splitPair(k, tblReverse)
				want[f.slot(f.hash(obj))]++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ix.writeMu.Lock()
	err = ix.apply(change{removes: []string{evil}})
	ix.writeMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if f.broken.Load() {
		t.Fatal("retiring the checkpoint decremented a slot the fill did not count")
	}
	for i := uint64(0); i < f.n; i++ {
		if got := f.countAt(i); got != want[i] {
			t.Fatalf("after retiring %s slot %d holds %d, the other checkpoints' entries %d", evil, i, got, want[uint64(i)])
		}
	}
}

// A filter built in the background counts the state of the snapshot its fill reads: a view of an
// older snapshot (which may still read reverse entries a commit before the fill removed) must not
// consult it, even if it got hold of it.
func TestFilterNotConsultedByOlderSnapshots(t *testing.T) {
	ctx := context.Background()
	tr := incidentTree(t)
	dir := t.TempDir()
	ix, meta, only := incidentIndex(t, tr.Root, dir, tr)
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ix.Close()
	ix, _, _ = incidentIndex(t, tr.Root, dir, tr)
	defer ix.Close()
	old, err := ix.acquire() // reads the state where meta references only
	if err != nil {
		t.Fatal(err)
	}
	defer old.release()
	if d := ix.decide(ctx, old, only, verdict.OpUnlink, maxNamed, nil); d.Allow {
		t.Fatalf("%s is referenced by %s: %+v", only, meta, d)
	}
	if err := os.Remove(filepath.Join(tr.Root, meta)); err != nil {
		t.Fatal(err)
	}
	if err := ix.Deleted(ctx, meta); err != nil {
		t.Fatal(err)
	}
	ix.Decide(ctx, "flink/nothing", verdict.OpUnlink) // starts the background fill, after the retirement
	for t0 := time.Now(); !FilterReady(ix); time.Sleep(time.Millisecond) {
		if time.Since(t0) > 30*time.Second {
			t.Fatal("filter not built")
		}
	}
	old.filt = ix.mu.cur.filt.Load()
	if d := ix.decide(ctx, old, only, verdict.OpUnlink, maxNamed, nil); d.Allow || d.Reason != verdict.ReasonReferenced {
		t.Fatalf("a view of the state before the fill's snapshot consulted the filter: unlink %s %+v, want refused as referenced by %s", only, d, meta)
	}
}

// A commit that fails may still have written its entries; its filter increments stay (never an
// under-count) and the index fails closed until a sync succeeds.
func TestFilterKeepsIncrementsOfFailedCommit(t *testing.T) {
	ctx := context.Background()
	tr := incidentTree(t)
	ix, _, _ := incidentIndex(t, tr.Root, t.TempDir(), tr)
	defer ix.Close()
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Checkpoint(treegen.Spec{Dir: "flink/l4/chk-1", ID: 1, Completed: incidentNow.Add(-2 * time.Hour), Shared: []string{"flink/l4/shared/sst-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Data(c, incidentNow.Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	orig := commitTxn
	commitTxn = func(txn *badger.Txn) error {
		if err := txn.Commit(); err != nil {
			return err
		}
		return errors.New("injected: write to the value log failed after the memtable")
	}
	err = ix.IndexMetadata(ctx, c.Metadata)
	commitTxn = orig
	if err == nil {
		t.Fatal("IndexMetadata reported success for a failed commit")
	}
	if d := ix.Decide(ctx, "flink/l4/shared/sst-1", verdict.OpUnlink); d.Allow {
		t.Fatalf("after a failed index commit a deletion was allowed: %+v", d)
	}
	if err := CheckFilter(ix); err != nil && strings.Contains(err.Error(), "under-count") {
		t.Fatalf("after a failed commit that reached badger: %v", err)
	}
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, "flink/l4/shared/sst-1", verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonReferenced {
		t.Fatalf("after the sync: %+v, want refused as referenced", d)
	}
	if err := CheckFilter(ix); err != nil && strings.Contains(err.Error(), "under-count") {
		t.Fatal(err)
	}
}

// A snapshot that is no longer current closes its idle iterators, and iterators given back to it
// later are closed instead of kept (one long view must not pin the iterators of every later state).
func TestRetiredSnapshotKeepsNoIterators(t *testing.T) {
	ctx := context.Background()
	tr := incidentTree(t)
	ix, meta, _ := incidentIndex(t, tr.Root, t.TempDir(), tr)
	defer ix.Close()
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	v, err := ix.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer v.release()
	idle := func() int { v.snap.itMu.Lock(); defer v.snap.itMu.Unlock(); return len(v.snap.its) }
	a, b := v.snap.reverseIterator(), v.snap.reverseIterator()
	v.snap.putIterator(a)
	if idle() != 1 {
		t.Fatalf("current snapshot keeps %d idle iterators, want 1", idle())
	}
	if err := os.Remove(filepath.Join(tr.Root, meta)); err != nil {
		t.Fatal(err)
	}
	if err := ix.Deleted(ctx, meta); err != nil { // a commit: v's snapshot is no longer current
		t.Fatal(err)
	}
	kept := idle()
	v.snap.putIterator(b) // before failing: an iterator still open when the view ends is a panic
	if kept != 0 {
		t.Fatalf("a snapshot that is no longer current keeps %d idle iterators", kept)
	}
	if idle() != 0 {
		t.Fatal("an iterator given back to a retired snapshot was pooled")
	}
	w, err := ix.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer w.release()
	w.snap.putIterator(w.snap.reverseIterator())
	if err := ix.Rebuild(ctx); err != nil { // a generation switch retires the current snapshot too
		t.Fatal(err)
	}
	w.snap.itMu.Lock()
	n := len(w.snap.its)
	w.snap.itMu.Unlock()
	if n != 0 {
		t.Fatalf("the last snapshot of a replaced generation keeps %d idle iterators", n)
	}
}

// While a background fill still counts, a commit may uncount an entry the fill has not reached yet
// (it reads the snapshot before that commit): that decrement is no under-count and must not disable
// the filter. A decrement whose entry the fill never finds is one, and the fill's end says so.
func TestFillToleratesDecrementsAheadOfIt(t *testing.T) {
	ctx := context.Background()
	tr := incidentTree(t)
	ix, _, only := incidentIndex(t, tr.Root, t.TempDir(), tr)
	defer ix.Close()
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var seed *refFilter
	fill := func(early ...string) *refFilter {
		f := newRefFilter(1000, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if seed != nil {
			f.seed = seed.seed // same slots as the full count
		}
		for _, k := range early {
			f.dec(f.hash(k)) // before the fill reaches it
		}
		txn := ix.mu.cur.db.NewTransaction(false)
		defer txn.Discard()
		if !f.fill(txn, nil) {
			t.Fatal("fill stopped")
		}
		f.ready.Store(true)
		return f
	}
	full := fill()
	seed = full
	never := ""
	for i := 0; never == ""; i++ {
		if k := "flink/never/referenced-" + strconv.Itoa(i); full.count(full.hash(k)) == 0 {
			never = k
		}
	}
	f := fill(only)
	if f.broken.Load() {
		t.Fatalf("a decrement of %s ahead of the fill disabled the filter", only)
	}
	if got, want := f.count(f.hash(only)), full.count(full.hash(only))-1; got != want {
		t.Fatalf("slot of %s after the early decrement: %d, want %d", only, got, want)
	}
	if f := fill(never); !f.broken.Load() {
		t.Fatal("a decrement the fill never matched left the filter enabled")
	}
	// After ready a decrement of a zero slot is an under-count at once.
	f.dec(f.hash(never))
	if !f.broken.Load() {
		t.Fatal("a decrement of a zero slot after the fill left the filter enabled")
	}
}
