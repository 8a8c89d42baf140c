package refindex

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/store"
)

// cancelingStore cancels a context after its first Stat, and answers every Stat as if it had not:
// the walk that stats is stopped half-way, with the keys it reached answered.
type cancelingStore struct {
	store.Store
	cancel context.CancelFunc
}

func (s *cancelingStore) Stat(ctx context.Context, p string) (store.ObjectInfo, error) {
	oi, err := s.Store.Stat(context.WithoutCancel(ctx), p)
	s.cancel()
	return oi, err
}

// An indexed _metadata whose stat was never made is not known to be gone or unchanged: when the
// context ends before every key is stat'ed, confirmGone fails instead of classifying the rest.
func TestConfirmGoneFailsOnKeysNotStated(t *testing.T) {
	tr := incidentTree(t)
	st, err := localstore.New(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	pol := DefaultPolicy()
	pol.MaxStaleness = 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := &cancelingStore{Store: st, cancel: func() {}}
	ix, err := Open(t.TempDir(), cs, pol, WithPathMap(tr.Maps, tr.EntropyKey), WithParseWorkers(1),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ix.mu.RLock()
	cur := ix.mu.state
	ix.mu.RUnlock()
	keys := slices.Clone(cur.sorted)
	if len(keys) < 3 {
		t.Fatalf("the scenario indexes %d _metadata, want at least 3", len(keys))
	}
	cs.cancel = cancel
	gone, restat, kept, err := ix.confirmGone(ctx, cur, keys, nil)
	if err == nil {
		t.Fatalf("confirmGone after the walk was stopped: no error; gone %v, changed %d, kept %d of %d", gone, len(restat), len(kept), len(keys))
	}
}
