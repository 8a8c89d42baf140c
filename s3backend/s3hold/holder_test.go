package s3hold

import (
	"context"
	"io"
	"io/fs"
	"log/slog"
	"sort"
	"sync"
	"testing"

	"github.com/ckguard/ckguard/fs/hold"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// fakeServer is a bucket of one version per key that records the legal holds set on it.
type fakeServer struct {
	mu   sync.Mutex
	vers map[string]string // key → current version id
	held map[string]bool   // key@version → on
	ons  map[string]int    // key → hold ON requests
	offs map[string]int    // key → hold OFF requests
}

func newFakeServer(keys ...string) *fakeServer {
	s := &fakeServer{vers: map[string]string{}, held: map[string]bool{}, ons: map[string]int{}, offs: map[string]int{}}
	for _, k := range keys {
		s.vers[k] = "v-" + k
	}
	return s
}

func (s *fakeServer) Head(_ context.Context, rel string) (s3client.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vers[rel]
	if !ok {
		return s3client.Object{}, fs.ErrNotExist
	}
	return s3client.Object{Key: rel, Size: 1, VersionID: v}, nil
}

func (s *fakeServer) SetLegalHold(_ context.Context, rel, versionID string, on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.ons[rel]++
	} else {
		s.offs[rel]++
	}
	s.held[rel+"@"+versionID] = on
	return nil
}

func (s *fakeServer) Versions(context.Context, string) ([]s3client.Version, error) { return nil, nil }
func (s *fakeServer) DeleteVersion(context.Context, string, string) error          { return nil }

// fakeIndex protects the given keys; like the real index, Decide refuses an unlink of a referenced
// object and allows one of a live `_metadata` (retiring a checkpoint is the guard's own rule) and of
// anything unreferenced.
type fakeIndex struct {
	protected map[string]refindex.ProtectedKind
}

func (ix *fakeIndex) ProtectedKeys(ctx context.Context, fn func(string, refindex.ProtectedKind) bool) error {
	keys := make([]string, 0, len(ix.protected))
	for k := range ix.protected {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !fn(k, ix.protected[k]) {
			return nil
		}
	}
	return ctx.Err()
}

func (ix *fakeIndex) Decide(_ context.Context, p string, _ verdict.Op, _ ...store.ObjectInfo) verdict.Decision {
	if ix.protected[p] == refindex.ProtectedObject {
		return verdict.Decision{Allow: false, Message: p + " is referenced"}
	}
	return verdict.Decision{Allow: true}
}

// TestPassHoldsAndReleases runs passes over a changing set of protected keys and checks the ledger
// and the server's holds after each: a fresh hold is never released by the pass that set it (the
// `_metadata` case: Decide allows its unlink), a key no longer protected is released once Decide
// allows it, and a referenced one is kept.
func TestPassHoldsAndReleases(t *testing.T) {
	const (
		meta  = "job/chk-2/_metadata"
		ref   = "job/shared/a"
		gone  = "job/chk-1/_metadata"
		stays = "job/shared/b"
	)
	type pass struct {
		protected map[string]refindex.ProtectedKind
		wantHeld  []string // the ledger's Held keys after the pass
		wantOffs  map[string]int
	}
	tests := []struct {
		name   string
		passes []pass
	}{
		{
			name: "a live _metadata stays held across passes",
			passes: []pass{
				{protected: map[string]refindex.ProtectedKind{meta: refindex.ProtectedMetadata, ref: refindex.ProtectedObject},
					wantHeld: []string{meta, ref}},
				{protected: map[string]refindex.ProtectedKind{meta: refindex.ProtectedMetadata, ref: refindex.ProtectedObject},
					wantHeld: []string{meta, ref}},
			},
		},
		{
			name: "a retired _metadata is released, a still referenced object kept",
			passes: []pass{
				{protected: map[string]refindex.ProtectedKind{gone: refindex.ProtectedMetadata, meta: refindex.ProtectedMetadata, stays: refindex.ProtectedObject},
					wantHeld: []string{gone, meta, stays}},
				{protected: map[string]refindex.ProtectedKind{meta: refindex.ProtectedMetadata, stays: refindex.ProtectedObject},
					wantHeld: []string{meta, stays}, wantOffs: map[string]int{gone: 1}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			srv := newFakeServer(meta, ref, gone, stays)
			ix := &fakeIndex{}
			l, err := hold.OpenLedger(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			h := New(Options{Server: srv, Hold: hold.Options{Index: ix, Ledger: l, Mode: hold.ModeRequired, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
			for i, p := range tt.passes {
				ix.protected = p.protected
				if err := h.Pass(ctx); err != nil {
					t.Fatalf("pass %d: %v", i, err)
				}
				var held []string
				for _, e := range l.Entries() {
					if e.State == hold.Held {
						held = append(held, e.Key)
					}
				}
				if !equal(held, p.wantHeld) {
					t.Errorf("pass %d: ledger holds %v, want %v", i, held, p.wantHeld)
				}
				for _, k := range p.wantHeld {
					if !srv.held[k+"@v-"+k] {
						t.Errorf("pass %d: %s not held on the server", i, k)
					}
				}
				for k, n := range srv.offs {
					if n != p.wantOffs[k] {
						t.Errorf("pass %d: %d hold OFF requests for %s, want %d", i, n, k, p.wantOffs[k])
					}
				}
				if s := h.Status(); s.Held != len(p.wantHeld) || s.Pending != 0 {
					t.Errorf("pass %d: status %+v, want %d held and none pending", i, s, len(p.wantHeld))
				}
			}
		})
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// versionedFake is a fakeIndex naming its state: the test moves ver when it changes the keys, and
// counts the scans.
type versionedFake struct {
	fakeIndex
	ver   uint64
	scans int
}

func (ix *versionedFake) ProtectedVersion() uint64 { return ix.ver }
func (ix *versionedFake) ProtectedKeys(ctx context.Context, fn func(string, refindex.ProtectedKind) bool) error {
	ix.scans++
	return ix.fakeIndex.ProtectedKeys(ctx, fn)
}

// TestPassSkipsUnchangedIndex: after a pass that left nothing to do, a pass on the same index version
// scans nothing and sends nothing; a key the pass could not hold (gone from the server) keeps the next
// passes scanning until it is held.
func TestPassSkipsUnchangedIndex(t *testing.T) {
	const a, b = "job/shared/a", "job/shared/b"
	srv := newFakeServer(a)
	l, err := hold.OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ix := &versionedFake{fakeIndex: fakeIndex{protected: map[string]refindex.ProtectedKind{a: refindex.ProtectedObject, b: refindex.ProtectedObject}}}
	h := New(Options{Server: srv, Hold: hold.Options{Index: ix, Ledger: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	ctx := context.Background()
	for i, want := range []int{1, 2, 3} { // b is missing on the server: every pass scans again
		if err := h.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		if ix.scans != want {
			t.Fatalf("pass %d: %d scans, want %d (a key not held yet must be retried)", i, ix.scans, want)
		}
	}
	srv.mu.Lock()
	srv.vers[b] = "v-" + b
	srv.mu.Unlock()
	if err := h.Pass(ctx); err != nil || ix.scans != 4 || h.Status().Held != 2 {
		t.Fatalf("pass holding b: %v, %d scans, %+v", err, ix.scans, h.Status())
	}
	ons := srv.ons[a] + srv.ons[b]
	for range 3 {
		if err := h.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ix.scans != 4 || srv.ons[a]+srv.ons[b] != ons {
		t.Fatalf("passes on an unchanged, settled index: %d scans (want 4), %d holds sent (want %d)", ix.scans, srv.ons[a]+srv.ons[b], ons)
	}
	delete(ix.protected, a)
	ix.ver++
	if err := h.Pass(ctx); err != nil || ix.scans != 5 || h.Status().Held != 1 {
		t.Fatalf("pass after a change: %v, %d scans, %+v; want a scan and a's hold released", err, ix.scans, h.Status())
	}
}
