package refindex_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var testNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func testPolicy() refindex.Policy {
	p := refindex.DefaultPolicy()
	p.Now = func() time.Time { return testNow }
	p.MaxStaleness = 0
	return p
}

// openTree opens an index over tr's store with tr's path maps (in a temporary directory, closed at the
// end of the test) and syncs it.
func openTree(t *testing.T, tr *treegen.Tree) *refindex.Index {
	t.Helper()
	ix := openTreeIn(t, tr, t.TempDir())
	t.Cleanup(func() { ix.Close() })
	syncIndex(t, ix)
	return ix
}

// openSynced opens an index over st (in a temporary directory, closed at the end of the test) with the
// test policy and opts, and syncs it.
func openSynced(t *testing.T, st store.Store, opts ...refindex.Option) *refindex.Index {
	t.Helper()
	ix := openIndex(t, t.TempDir(), st, opts...)
	t.Cleanup(func() { ix.Close() })
	syncIndex(t, ix)
	return ix
}

// openIndex opens the index in dir over st with the test policy, a silent logger and opts, without
// syncing it; the caller closes it (tests that reopen an index, or close it early, use it).
func openIndex(t *testing.T, dir string, st store.Store, opts ...refindex.Option) *refindex.Index {
	t.Helper()
	return openIndexWith(t, dir, st, testPolicy(), opts...)
}

// openIndexWith is openIndex with the policy pol.
func openIndexWith(t *testing.T, dir string, st store.Store, pol refindex.Policy, opts ...refindex.Option) *refindex.Index {
	t.Helper()
	ix, err := refindex.Open(dir, st, pol, append([]refindex.Option{refindex.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// reopened syncs a new index over st, closes it and opens it again with opts, not synced (a restart
// with other flags); it is closed at the end of the test.
func reopened(t *testing.T, st store.Store, opts ...refindex.Option) *refindex.Index {
	t.Helper()
	dir := t.TempDir()
	ix := openIndex(t, dir, st)
	syncIndex(t, ix)
	ix.Close()
	ix = openIndex(t, dir, st, opts...)
	t.Cleanup(func() { ix.Close() })
	return ix
}

// syncIndex syncs ix and fails t if the sync fails.
func syncIndex(t *testing.T, ix *refindex.Index) {
	t.Helper()
	if err := ix.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// youngOrphan is the YoungOrphan tree (one live checkpoint, a young and an old orphan) in a temporary
// folder, with its live checkpoint's _metadata and the first file that references.
func youngOrphan(t *testing.T) (tr *treegen.Tree, meta, ref string) {
	t.Helper()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range tr.Live {
		meta, ref = c.Metadata, c.Refs[0]
	}
	return tr, meta, ref
}

// openTreeIn opens the index in dir over tr's store with tr's path maps, without syncing it; the
// caller closes it (tests that reopen an index use it).
func openTreeIn(t *testing.T, tr *treegen.Tree, dir string) *refindex.Index {
	t.Helper()
	return openIndex(t, dir, localStore(t, tr.Root), refindex.WithPathMap(tr.Maps, tr.EntropyKey), refindex.WithExternal(tr.External))
}

type scenario struct {
	name string
	gen  func(dir string, now time.Time) (*treegen.Tree, error)
}

var scenarios = []scenario{
	{"IncidentOne", func(d string, n time.Time) (*treegen.Tree, error) { return treegen.IncidentOne(d, n) }},
	{"IncidentTwo", func(d string, n time.Time) (*treegen.Tree, error) { return treegen.IncidentTwo(d, n) }},
	{"SavepointsRelative", func(d string, n time.Time) (*treegen.Tree, error) { return treegen.SavepointsRelative(d, n) }},
	{"Entropy", treegen.Entropy},
	{"SchemeAliasing", treegen.SchemeAliasing},
	{"Unparseable", func(d string, n time.Time) (*treegen.Tree, error) { return treegen.Unparseable(d, n) }},
	{"YoungOrphan", func(d string, n time.Time) (*treegen.Tree, error) { return treegen.YoungOrphan(d, n) }},
}

func union(sets ...[]string) []string {
	m := map[string]bool{}
	for _, s := range sets {
		for _, k := range s {
			m[k] = true
		}
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func diff(t *testing.T, what string, got, want []string) {
	t.Helper()
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got  %q\n want %q", what, got, want)
	}
}

// TestScenarios checks, for every generated tree, the exact set of objects `why` refuses and the exact
// set `orphans` lists, and that purging the scenario's folder through the guard leaves exactly the
// expected survivors.
func TestScenarios(t *testing.T) {
	ctx := context.Background()
	pol := treegen.DefaultPolicy
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			tr, err := sc.gen(t.TempDir(), testNow)
			if err != nil {
				t.Fatal(err)
			}
			ix := openTree(t, tr)
			var refused []string
			for _, k := range tr.AllFiles() {
				d := ix.Decide(ctx, k, verdict.OpUnlink)
				if !d.Allow {
					refused = append(refused, k)
					if d.Message == "" || !strings.Contains(d.Message, k) && d.Reason != verdict.ReasonUnparseable {
						t.Errorf("refusal of %s does not name it: %q", k, d.Message)
					}
				}
			}
			// Unparseable _metadata of the trees are damaged: they refuse nothing else.
			want := union(tr.Referenced(), tr.ProtectedMetadata(pol), tr.InGrace(pol))
			diff(t, "refused", refused, want)
			or, err := ix.Orphans(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			var orphans []string
			for _, f := range or.Files {
				orphans = append(orphans, f.Path)
			}
			diff(t, "orphans", orphans, tr.Orphans(pol, 0))
			if or.Blocked != "" {
				t.Errorf("orphans blocked: %s", or.Blocked)
			}
			vr, err := ix.Verify(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if vr.OK != (len(tr.Unparseable) == 0) || len(vr.Unparseable) != len(tr.Unparseable) || len(tr.Unparseable) > 0 && vr.Untrusted == "" {
				t.Errorf("verify ok=%v broken=%+v unparseable=%+v untrusted=%q", vr.OK, vr.Broken, vr.Unparseable, vr.Untrusted)
			}
			// Purge the scenario's folder (or everything) through the guard.
			purge := tr.Purge
			cleanup(t, ix, tr.Root, purge)
			var left []string
			for _, k := range tr.AllFiles() {
				if strings.HasPrefix(k, purge) {
					if _, err := os.Lstat(filepath.Join(tr.Root, k)); err == nil {
						left = append(left, k)
					}
				}
			}
			diff(t, "survivors of purging "+purge, left, tr.Survivors(purge, pol))
			vr, err = ix.Verify(ctx)
			if err != nil {
				t.Fatal(err)
			}
			stillBroken := false
			for _, u := range tr.Unparseable {
				if _, err := os.Stat(filepath.Join(tr.Root, u)); err == nil {
					stillBroken = true
				}
			}
			if vr.OK == stillBroken {
				t.Errorf("verify after the guarded cleanup: ok=%v broken=%+v", vr.OK, vr.Broken)
			}
		})
	}
}

// cleanup deletes everything under dir the guard allows, in the mount's order (_metadata first, then
// chk-* folders, then the rest), repeating until nothing changes, as `rm -rf` through the mount does.
func cleanup(t *testing.T, ix *refindex.Index, root, dir string) {
	t.Helper()
	ctx := context.Background()
	for pass := 0; pass < 10; pass++ {
		var files []string
		_ = ix.Store().Walk(ctx, dir, func(o store.ObjectInfo) error {
			if !o.IsDir {
				files = append(files, o.Path)
			}
			return nil
		})
		sort.SliceStable(files, func(a, b int) bool {
			return flinklayout.IsMetadata(files[a]) && !flinklayout.IsMetadata(files[b])
		})
		n := 0
		for _, k := range files {
			if d := ix.Decide(ctx, k, verdict.OpUnlink); d.Allow {
				if err := os.Remove(filepath.Join(root, k)); err != nil {
					t.Fatal(err)
				}
				if err := ix.Deleted(ctx, k); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
		if n == 0 {
			return
		}
	}
}
