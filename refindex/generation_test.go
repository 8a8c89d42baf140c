package refindex_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

func TestSchemaAndMapChanges(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.SchemeAliasing(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	ls, dir := localStore(t, tr.Root), t.TempDir()
	// Without the map the store proves it (every file lies at the same relative place); the other
	// bucket's file stays unmapped.
	ix := openIndex(t, dir, ls)
	syncIndex(t, ix)
	s, _ := ix.Stats(ctx)
	if s.References != 13 || s.OutsideReferences != 1 || s.UnmappedReferences != 1 || !slices.Equal(s.InferredMaps, []string{"s3://bucket/flink="}) {
		t.Fatalf("inferred stats %+v", s)
	}
	ix.Close()
	// With the map, the next sync rebuilds (the fingerprint changed) and the aliases meet.
	ix = openIndex(t, dir, ls, refindex.WithPathMap(tr.Maps, ""))
	syncIndex(t, ix)
	s, _ = ix.Stats(ctx)
	if s.OutsideReferences != 1 {
		t.Fatalf("mapped stats %+v", s)
	}
	gen := s.Generation
	ix.Close()
	// Tamper with the schema version: Open refuses and says to rebuild; WithFreshIndex recovers.
	db, err := badger.Open(badger.DefaultOptions(filepath.Join(dir, "gen-"+pad(gen))).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("m/schema"), []byte("0")) })
	db.Close()
	_, err = refindex.Open(dir, ls, testPolicy(), refindex.WithLogger(quiet))
	if !errors.Is(err, refindex.ErrSchema) || !strings.Contains(err.Error(), "ckguard index rebuild") {
		t.Fatalf("schema mismatch: %v", err)
	}
	ix = openIndex(t, dir, ls, refindex.WithFreshIndex(), refindex.WithPathMap(tr.Maps, ""))
	defer ix.Close()
	if err := ix.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	// A second Open of the same index is refused while the first holds it.
	if _, err := refindex.Open(dir, ls, testPolicy(), refindex.WithLogger(quiet)); !errors.Is(err, refindex.ErrLocked) {
		t.Fatalf("second open: %v", err)
	}
	if _, err := pathnorm.New(pathnorm.Config{}); err != nil {
		t.Fatal(err)
	}
}

func pad(n int) string {
	s := "00000000" + itoa(n)
	return s[len(s)-8:]
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestSyncPaths: a small change is applied in one transaction on the live generation, and so is a large
// one (300 new checkpoints, in several transactions if it needs them): a sync never becomes a rebuild.
func TestSyncPaths(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	now := time.Now()
	if _, err := treegen.Large(root, treegen.LargeSpec{Jobs: 2, CheckpointsPerJob: 10, RefsPerCheckpoint: 50, NewPerCheckpoint: 5, Seed: "a"}, now.Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	ix := openIndexWith(t, t.TempDir(), localStore(t, root), refindex.DefaultPolicy())
	defer ix.Close()
	syncIndex(t, ix)
	s1, _ := ix.Stats(ctx)
	big, err := treegen.Large(root, treegen.LargeSpec{Jobs: 3, CheckpointsPerJob: 100, RefsPerCheckpoint: 20, NewPerCheckpoint: 2, Seed: "b"}, now.Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	s2, _ := ix.Stats(ctx)
	if s2.Checkpoints != 320 || s2.Generation != s1.Generation {
		t.Fatalf("large sync: %d checkpoints, generation %d → %d", s2.Checkpoints, s1.Generation, s2.Generation)
	}
	for _, k := range big.SampleReferenced {
		if d := ix.Decide(ctx, k, verdict.OpUnlink); d.Reason != verdict.ReasonReferenced {
			t.Fatalf("%s after the large sync: %+v", k, d)
		}
	}
	// Retire the newest checkpoint of one job directly in the store: a small, transactional sync.
	meta := treegen.LargeJob("b", 0) + "/chk-1099/_metadata"
	if err := os.Remove(filepath.Join(root, meta)); err != nil {
		t.Fatal(err)
	}
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	s3, _ := ix.Stats(ctx)
	if s3.Checkpoints != 319 || s3.Generation != s2.Generation {
		t.Fatalf("small sync: %d checkpoints, generation %d → %d", s3.Checkpoints, s2.Generation, s3.Generation)
	}
	if st, _, _ := ix.Explain(ctx, meta); st != verdict.StateDeletable {
		t.Fatalf("retired _metadata state %s", st)
	}
}

// TestFreshIndexKeepsUsableGeneration: `ckguard index rebuild` (WithFreshIndex) on a healthy index
// keeps deciding from the previous generation until the new one is complete.
func TestFreshIndexKeepsUsableGeneration(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.IncidentTwo(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	ix := reopened(t, localStore(t, tr.Root), refindex.WithFreshIndex())
	if d := ix.Decide(ctx, tr.Referenced()[0], verdict.OpUnlink); d.Reason != verdict.ReasonReferenced {
		t.Fatalf("before the rebuild completes: %+v", d)
	}
	if err := ix.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, tr.Referenced()[0], verdict.OpUnlink); d.Reason != verdict.ReasonReferenced {
		t.Fatalf("after the rebuild: %+v", d)
	}
}

// TestConcurrentDecideAndSync decides from several goroutines while syncs, rebuilds (generation
// switches) and mount notifications run; every referenced object stays refused throughout (run with
// -race to check the locking).
func TestConcurrentDecideAndSync(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.IncidentOne(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, tr)
	refs := tr.Referenced()
	stop := make(chan struct{})
	errs := make(chan error, 8)
	for g := 0; g < 4; g++ {
		go func(g int) {
			for i := 0; ; i++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				k := refs[(i+g)%len(refs)]
				if d := ix.Decide(ctx, k, verdict.OpUnlink); d.Allow {
					errs <- errors.New("allowed deleting referenced " + k)
					return
				}
				if _, _, err := ix.Explain(ctx, k); err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	meta := "flink-checkpoints/" + treegen.IncidentOneNewJob + "/chk-100274/_metadata"
	for i := 0; i < 5; i++ {
		if err := ix.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if err := ix.Rebuild(ctx); err != nil {
			t.Fatal(err)
		}
		if err := ix.IndexMetadata(ctx, meta); err != nil {
			t.Fatal(err)
		}
		if _, err := ix.Orphans(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	for g := 0; g < 4; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Every snapshot the deciders read is finished: the filter counts the reverse table exactly.
	if err := refindex.CheckFilter(ix); err != nil {
		t.Fatal(err)
	}
}

// TestIndexWithValuesInValueLogOpens: an index written when values above 1 KiB went to badger's value
// log (the checkpoints' forward references) opens and reads as before with values inline: a verify
// reads every forward reference list, and retiring a checkpoint (its forward references read back
// to remove its reverse entries) leaves the reference filter exact.
func TestIndexWithValuesInValueLogOpens(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	root := filepath.Join(dir, "store")
	lr, err := treegen.Large(root, treegen.LargeSpec{Jobs: 1, CheckpointsPerJob: 6, RefsPerCheckpoint: 500, NewPerCheckpoint: 100, Seed: "vlog"}, time.Now().Add(-48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	m, err := pathnorm.ParseMapping("file:" + root + "=")
	if err != nil {
		t.Fatal(err)
	}
	ls := presentStore{localStore(t, root)}
	index := filepath.Join(dir, "index")
	open := func(opts ...refindex.Option) *refindex.Index {
		t.Helper()
		ix, err := refindex.Open(index, ls, refindex.DefaultPolicy(), append([]refindex.Option{refindex.WithLogger(quiet), refindex.WithPathMap([]pathnorm.Mapping{m}, "")}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return ix
	}
	verify := func(ix *refindex.Index, what string) int {
		t.Helper()
		res, err := ix.Verify(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !res.OK || len(res.Broken) != 0 {
			t.Fatalf("%s: verify %+v", what, res)
		}
		if err := refindex.CheckFilter(ix); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return res.Objects
	}
	ix := open(refindex.WithValueThreshold(1 << 10))
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	before := verify(ix, "written with values in the value log")
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	vlogs, _ := filepath.Glob(filepath.Join(index, "gen-*", "*.vlog"))
	var inLog int64
	for _, f := range vlogs {
		if fi, err := os.Stat(f); err == nil {
			inLog += fi.Size()
		}
	}
	if inLog < 10<<10 {
		t.Fatalf("the old layout's value log holds %d bytes: the forward references were not written there", inLog)
	}
	ix = open()
	defer ix.Close()
	if got := verify(ix, "reopened with values inline"); got != before {
		t.Fatalf("reopened with values inline: verify checked %d objects, want %d as written", got, before)
	}
	metas, _ := filepath.Glob(filepath.Join(root, "flink", "*", "chk-*", "_metadata"))
	slices.Sort(metas)
	if len(metas) != lr.Checkpoints {
		t.Fatalf("%d _metadata in the store, want %d", len(metas), lr.Checkpoints)
	}
	if err := os.Remove(metas[0]); err != nil {
		t.Fatal(err)
	}
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := verify(ix, "after retiring a checkpoint written in the old layout"); got >= before {
		t.Fatalf("after retiring %s: verify checked %d objects, want fewer than %d", metas[0], got, before)
	}
}
