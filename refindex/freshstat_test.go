package refindex_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
)

// cachedStore answers Stat from a "cache" that still holds every object it was told of, as the S3
// store's shared attribute cache may for an object deleted beside the mount; StatFresh asks the
// storage.
type cachedStore struct {
	store.Store
	cached map[string]store.ObjectInfo
}

func (c *cachedStore) Stat(ctx context.Context, p string) (store.ObjectInfo, error) {
	if oi, ok := c.cached[p]; ok {
		return oi, nil
	}
	return c.Store.Stat(ctx, p)
}

func (c *cachedStore) StatFresh(ctx context.Context, p string) (store.ObjectInfo, error) {
	return c.Store.Stat(ctx, p)
}

// TestVerifyAsksTheStorageNotACache: verify and verify --deep judge existence by the storage itself
// (store.FreshStater), so a referenced object deleted beside the mount is missing even while the
// mount's attribute cache still remembers it.
func TestVerifyAsksTheStorageNotACache(t *testing.T) {
	ctx := context.Background()
	tr, meta, ref := youngOrphan(t)
	ls := localStore(t, tr.Root)
	oi, err := ls.Stat(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	cs := &cachedStore{Store: ls, cached: map[string]store.ObjectInfo{ref: oi}}
	ix := openSynced(t, cs)
	if err := os.Remove(filepath.Join(tr.Root, ref)); err != nil {
		t.Fatal(err)
	}
	v, err := ix.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.OK || len(v.Broken) != 1 || v.Broken[0].Metadata != meta {
		t.Errorf("verify of %s with %s deleted beside the mount (still cached): %+v", meta, ref, v)
	}
	d, err := ix.Drill(ctx, refindex.DrillOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range d.Broken {
		for _, m := range b.Missing {
			found = found || m == ref
		}
	}
	if d.OK || !found {
		t.Errorf("drill with %s deleted beside the mount (still cached): %+v", ref, d)
	}
}
