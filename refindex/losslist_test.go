package refindex_test

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// listingStore is a local store that also lists folders (refindex.DirLister) the way S3 does: in key
// order, page keys per request, counting requests as S3 would bill them.
type listingStore struct {
	store.Store
	root         string
	page         int
	lists, stats atomic.Int64
	// delay holds each listing request this long; inflight and maxInflight count the listings under way.
	delay                 time.Duration
	inflight, maxInflight atomic.Int64
}

func (s *listingStore) Stat(ctx context.Context, p string) (store.ObjectInfo, error) {
	s.stats.Add(1)
	return s.Store.Stat(ctx, p)
}

func (s *listingStore) ListDirRange(_ context.Context, dir, from, to string, maxRequests int, wait func(context.Context) (func(), error), fn func(string)) (int, bool, error) {
	in := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	for m := s.maxInflight.Load(); in > m && !s.maxInflight.CompareAndSwap(m, in); m = s.maxInflight.Load() {
	}
	time.Sleep(s.delay)
	es, err := os.ReadDir(filepath.Join(s.root, filepath.FromSlash(dir)))
	if err != nil {
		return 1, false, err
	}
	var keys []string
	for _, e := range es {
		keys = append(keys, path.Join(dir, e.Name()))
	}
	sort.Strings(keys)
	i := sort.SearchStrings(keys, from)
	n := 0
	for {
		if n >= maxRequests {
			return n, true, nil
		}
		if wait != nil {
			release, err := wait(context.Background())
			if err != nil {
				return n, false, err
			}
			release()
		}
		n++
		s.lists.Add(1)
		end := min(i+s.page, len(keys))
		for _, k := range keys[i:end] {
			fn(k)
		}
		if end == len(keys) || keys[end-1] >= to {
			return n, false, nil
		}
		i = end
	}
}

func openListingIndex(t *testing.T, st store.Store, prefix string) *refindex.Index {
	t.Helper()
	m, err := pathnorm.ParseMapping(prefix + "=")
	if err != nil {
		t.Fatal(err)
	}
	ix, err := refindex.Open(t.TempDir(), st, refindex.DefaultPolicy(), refindex.WithLogger(quiet), refindex.WithPathMap([]pathnorm.Mapping{m}, ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	if err := ix.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ix
}

// TestLossCheckListsFolders: on a store that lists folders, a folder holding several referenced objects
// is checked by listing it (fewer requests than objects), a deletion there is found in the same pass as
// by stats, and a listing is cut off at one request per object (a folder crowded with unreferenced files
// between the referenced ones never costs more than stating each).
func TestLossCheckListsFolders(t *testing.T) {
	for _, tc := range []struct {
		name    string
		page    int // keys per listing request; 0: the store does not list
		crowded int // unreferenced files added to the victim's folder
	}{
		{"stats only", 0, 0},
		{"listing, 1000 keys per request", 1000, 0},
		{"listing, crowded folder, 1 key per request", 1, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			root, prefix := drillStore(t, "2.2", "incremental")
			victim, _ := largestState(t, root)
			for i := range tc.crowded {
				// Names sorting between the folder's referenced keys.
				p := filepath.Join(root, filepath.FromSlash(path.Dir(victim)), strings.Repeat("0", 4)+string(rune('a'+i%26))+string(rune('a'+i/26)))
				if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ls, err := localstore.New(root)
			if err != nil {
				t.Fatal(err)
			}
			var st store.Store = ls
			var counted *listingStore
			if tc.page > 0 {
				counted = &listingStore{Store: ls, root: root, page: tc.page}
				st = counted
			}
			ix := openListingIndex(t, st, prefix)
			lc := ix.NewLossChecker(refindex.LossCheckOptions{})
			rep, err := lc.Check(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Missing) != 0 || !rep.Complete || rep.RoundPasses != 1 {
				t.Fatalf("intact store: %+v", rep)
			}
			t.Logf("%d referenced objects: %d requests", rep.Objects, rep.Requests)
			switch {
			case tc.page == 0 && rep.Requests != rep.Objects:
				t.Errorf("stats only: %d requests for %d objects, want one each", rep.Requests, rep.Objects)
			case tc.page >= 1000 && (rep.Requests >= rep.Objects || counted.lists.Load() == 0):
				t.Errorf("listing: %d requests (%d listings) for %d objects, want fewer requests than objects", rep.Requests, counted.lists.Load(), rep.Objects)
			case tc.page > 0 && rep.Requests > rep.Objects:
				t.Errorf("listing: %d requests for %d objects, want never more than one per object", rep.Requests, rep.Objects)
			}
			if err := os.Remove(filepath.Join(root, victim)); err != nil {
				t.Fatal(err)
			}
			if rep, err = lc.Check(ctx); err != nil {
				t.Fatal(err)
			}
			if len(rep.New) == 0 {
				t.Fatalf("deleted %s not found by the next pass", victim)
			}
			for _, m := range rep.New {
				if m.Path != victim {
					t.Fatalf("reported %s, deleted %s", m.Path, victim)
				}
			}
		})
	}
}

// TestLossCheckBudgetRounds: under a request budget smaller than a full check, RoundPasses says how many
// passes a complete check takes, and the rotation completes in exactly that many.
func TestLossCheckBudgetRounds(t *testing.T) {
	ctx := context.Background()
	root, prefix := drillStore(t, "2.2", "incremental")
	ix := openListingIndex(t, localStore(t, root), prefix)
	lc := ix.NewLossChecker(refindex.LossCheckOptions{Budget: 4})
	var rep *refindex.LossReport
	passes := 0
	for rep == nil || !rep.Complete {
		var err error
		if rep, err = lc.Check(ctx); err != nil {
			t.Fatal(err)
		}
		passes++
		if rep.Requests > 4 {
			t.Fatalf("pass %d: %d requests over a budget of 4", passes, rep.Requests)
		}
	}
	if rep.RoundPasses < 2 || passes != rep.RoundPasses || rep.RoundRequests != rep.Objects {
		t.Fatalf("rotation took %d passes; report: %d round passes, %d round requests, %d objects", passes, rep.RoundPasses, rep.RoundRequests, rep.Objects)
	}
}

// countingPacer counts the waits of a pass.
type countingPacer struct{ waits atomic.Int64 }

func (p *countingPacer) Wait(ctx context.Context) (func(), error) {
	p.waits.Add(1)
	return func() {}, ctx.Err()
}

// TestLossCheckPacedLargeFolder: a folder holding more than a page of referenced objects is listed in
// chunks of a page each, in parallel (not one page after the other), every request of the pass waits on
// the pacer first, and a loss in the middle chunk is found.
func TestLossCheckPacedLargeFolder(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "store")
	lr, err := treegen.Large(root, treegen.LargeSpec{Jobs: 1, CheckpointsPerJob: 1, RefsPerCheckpoint: 3500, NewPerCheckpoint: 3500, DataFiles: true, Seed: "pace"}, time.Now().Add(-48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ls, err := localstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	st := &listingStore{Store: ls, root: root, page: 1000, delay: 50 * time.Millisecond}
	ix := openListingIndex(t, st, "file:"+root)
	p := &countingPacer{}
	lc := ix.NewLossChecker(refindex.LossCheckOptions{Pacer: p})
	rep, err := lc.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d referenced objects (%d generated): %d requests, %d listings, at most %d at once, %d waits", rep.Objects, lr.Distinct, rep.Requests, st.lists.Load(), st.maxInflight.Load(), p.waits.Load())
	if len(rep.Missing) != 0 || !rep.Complete || rep.Objects < 3000 {
		t.Fatalf("intact store: %+v", rep)
	}
	if int(p.waits.Load()) != rep.Requests {
		t.Errorf("%d waits on the pacer for %d requests: every request must be paced", p.waits.Load(), rep.Requests)
	}
	if st.maxInflight.Load() < 2 {
		t.Errorf("at most %d listing at once: the chunks of one large folder must be listed in parallel", st.maxInflight.Load())
	}
	if rep.Requests > 2*rep.RoundRequests || rep.RoundRequests > (rep.Objects+999)/1000+1 {
		t.Errorf("%d requests, %d estimated, for %d objects: want about one per 1,000", rep.Requests, rep.RoundRequests, rep.Objects)
	}
	var keys []string
	for _, k := range lr.SampleReferenced {
		if strings.Contains(k, "/shared/") {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		t.Fatalf("no referenced shared key in %v", lr.SampleReferenced)
	}
	victim := keys[len(keys)/2]
	if err := os.Remove(filepath.Join(root, filepath.FromSlash(victim))); err != nil {
		t.Fatal(err)
	}
	if rep, err = lc.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if len(rep.New) != 1 || rep.New[0].Path != victim {
		t.Fatalf("deleted %s; the pass reported %+v", victim, rep.New)
	}
}

// tickingPacer is a pacer whose every request advances a fake clock by a second.
type tickingPacer struct {
	mu  sync.Mutex
	now time.Time
}

func (p *tickingPacer) Wait(ctx context.Context) (func(), error) {
	p.mu.Lock()
	p.now = p.now.Add(time.Second)
	p.mu.Unlock()
	return func() {}, ctx.Err()
}

func (p *tickingPacer) Now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now
}

func (p *tickingPacer) sleep(d time.Duration) {
	p.mu.Lock()
	p.now = p.now.Add(d)
	p.mu.Unlock()
}

// chunkedStore is a listing store of one job whose shared/ folder holds 3,500 referenced objects: four
// listing units of at most 1,000 keys.
func chunkedStore(t *testing.T) (root string, st *listingStore, ix *refindex.Index, shared []string) {
	t.Helper()
	root = filepath.Join(t.TempDir(), "store")
	if _, err := treegen.Large(root, treegen.LargeSpec{Jobs: 1, CheckpointsPerJob: 1, RefsPerCheckpoint: 3500, NewPerCheckpoint: 3500, DataFiles: true, Seed: "chunk"}, time.Now().Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	ls, err := localstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	st = &listingStore{Store: ls, root: root, page: 1000}
	ix = openListingIndex(t, st, "file:"+root)
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, "/shared/") {
			rel, _ := filepath.Rel(root, p)
			shared = append(shared, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(shared)
	return root, st, ix, shared
}

// countingFinder is a quarantine holding the keys of held, counting lookups.
type countingFinder struct {
	held  map[string]bool
	looks atomic.Int64
}

func (f *countingFinder) FindQuarantined(_ context.Context, key string) (refindex.QuarantinedObject, bool, error) {
	f.looks.Add(1)
	if f.held[key] {
		return refindex.QuarantinedObject{Since: time.Unix(1e9, 0), Restore: "restore " + key}, true, nil
	}
	return refindex.QuarantinedObject{}, false, nil
}

// TestLossCheckChunkProgress: a pass split into chunks reports a loss found in its first chunk before
// it lists the folders of the next chunks (the gauges move a chunk after the listing, not a pass after),
// reports each lost pair once as new, and its final report still holds the loss; a chunk's report looks
// up in quarantine only the objects it names first.
func TestLossCheckChunkProgress(t *testing.T) {
	ctx := context.Background()
	root, st, ix, shared := chunkedStore(t)
	victim := shared[0] // in the first listing unit of the folder
	if err := os.Remove(filepath.Join(root, filepath.FromSlash(victim))); err != nil {
		t.Fatal(err)
	}
	var partial []*refindex.LossReport
	var listsAtFirst int64 = -1
	q := &countingFinder{held: map[string]bool{victim: true}}
	lc := ix.NewLossChecker(refindex.LossCheckOptions{Chunk: 1, Parallel: 1, Quarantine: q, Progress: func(r *refindex.LossReport) {
		if len(partial) == 0 {
			listsAtFirst = st.lists.Load()
		}
		partial = append(partial, r)
	}})
	rep, err := lc.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Partial || !rep.Complete || len(partial) < 3 {
		t.Fatalf("final report partial=%v complete=%v after %d progress reports; want a complete final report after at least 3", rep.Partial, rep.Complete, len(partial))
	}
	first := partial[0]
	if !first.Partial || len(first.New) != 1 || first.New[0].Path != victim || first.Jobs[first.New[0].Job].MissingObjects != 1 || first.New[0].Quarantine == nil {
		t.Fatalf("first progress report: %+v; want %s new, with its quarantine entry, and counted for its job", first, victim)
	}
	// A chunk's report looks up what it names first; the pass's own report every missing object.
	if n := q.looks.Load(); n != 2 {
		t.Errorf("%d quarantine lookups for one loss over %d reports, want 2 (its first report and the pass's)", n, len(partial)+1)
	}
	if listsAtFirst != 1 || st.lists.Load() < 4 {
		t.Fatalf("%d listings before the first progress report, %d in all: want the loss reported after the first chunk's one listing", listsAtFirst, st.lists.Load())
	}
	for i, r := range append(partial[1:], rep) {
		if len(r.New) != 0 || len(r.Missing) != 1 || r.Missing[0].Path != victim {
			t.Fatalf("report %d after the first: new %+v, missing %+v; want the loss still missing, not new again", i+2, r.New, r.Missing)
		}
	}
}

// TestLossCheckRevisit: LossReport.Revisit is the measured time from a chunk's start in the previous
// pass to the same chunk's report in this one (with a second per request: the gap between the passes,
// a whole pass and one chunk), zero on a first pass and after a pass that was not a whole rotation.
func TestLossCheckRevisit(t *testing.T) {
	ctx := context.Background()
	_, _, ix, _ := chunkedStore(t)
	p := &tickingPacer{now: time.Unix(1e9, 0)}
	lc := ix.NewLossChecker(refindex.LossCheckOptions{Chunk: 1, Parallel: 1, Pacer: p})
	refindex.SetLossClock(lc, p.Now)
	rep, err := lc.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Revisit != 0 || rep.Requests != 4 || rep.LongestChunk != time.Second {
		t.Fatalf("first pass: revisit %s, %d requests, longest chunk %s; want 0, 4 listings, 1 s", rep.Revisit, rep.Requests, rep.LongestChunk)
	}
	p.sleep(10 * time.Second)
	if rep, err = lc.Check(ctx); err != nil {
		t.Fatal(err)
	}
	// Chunk i began at i s in the first pass and is reported at 4 + 10 + i+1 s.
	if want := 15 * time.Second; rep.Revisit != want {
		t.Fatalf("second pass: revisit %s, want %s (10 s between the passes, 4 s of the first, one chunk)", rep.Revisit, want)
	}
	// A rotation over passes: the previous pass no longer tells when an object was last checked.
	lc = ix.NewLossChecker(refindex.LossCheckOptions{Chunk: 1, Parallel: 1, Pacer: p, Budget: 2})
	refindex.SetLossClock(lc, p.Now)
	for i := range 3 {
		if rep, err = lc.Check(ctx); err != nil {
			t.Fatal(err)
		}
		if rep.Revisit != 0 || rep.RoundPasses != 2 {
			t.Fatalf("pass %d of a budget of 2: revisit %s, round passes %d; want 0 (unknown), 2", i+1, rep.Revisit, rep.RoundPasses)
		}
	}
}
