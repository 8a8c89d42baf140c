package refindex_test

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/localstore"
)

// listingStore is a local store that also lists folders (refindex.DirLister) the way S3 does: in key
// order, page keys per request, counting requests as S3 would bill them.
type listingStore struct {
	store.Store
	root         string
	page         int
	lists, stats atomic.Int64
}

func (s *listingStore) Stat(ctx context.Context, p string) (store.ObjectInfo, error) {
	s.stats.Add(1)
	return s.Store.Stat(ctx, p)
}

func (s *listingStore) ListDirRange(_ context.Context, dir, from, to string, maxRequests int, fn func(string)) (int, bool, error) {
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
	ix := openDrillIndex(t, root, prefix)
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
