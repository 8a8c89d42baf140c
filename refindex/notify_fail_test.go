package refindex_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/localstore"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// unreadableStore fails Open of one key with openErr (Stat still answers), as an S3 server does with a
// 503 burst, or a cache that lists an object its next read cannot find.
type unreadableStore struct {
	store.Store
	key     string
	openErr error
}

func (u *unreadableStore) Open(ctx context.Context, key string) (store.Reader, error) {
	if key == u.key && u.openErr != nil {
		return nil, u.openErr
	}
	return u.Store.Open(ctx, key)
}

// TestNotifiedMetadataUnreadableFailsClosed: a _metadata written through the mount that the index cannot
// read is a live checkpoint it does not know, so every decision is refused until a sync reads it (review 5
// M1: only the writer heard of the error, and deletions of that checkpoint's files went on being allowed).
// A _metadata that really is gone is simply not indexed.
func TestNotifiedMetadataUnreadableFailsClosed(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		openErr error
	}{
		{"read error", errors.New("503 Slow Down")},
		{"listed but not found", fs.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
			if err != nil {
				t.Fatal(err)
			}
			ls, err := localstore.New(tr.Root)
			if err != nil {
				t.Fatal(err)
			}
			st := &unreadableStore{Store: ls}
			ix, err := refindex.Open(t.TempDir(), st, testPolicy(), refindex.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			defer ix.Close()
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			garbage := tr.Orphans(treegen.DefaultPolicy, 0)[0]
			if d := ix.Decide(ctx, garbage, refindex.OpUnlink); !d.Allow {
				t.Fatalf("garbage refused before: %+v", d)
			}
			c, err := tr.Checkpoint(treegen.Spec{Dir: "new/chk-3", Job: "new", ID: 3, Completed: testNow.Add(-time.Hour), Shared: []string{"new/shared/s"}})
			if err != nil {
				t.Fatal(err)
			}
			st.key, st.openErr = c.Metadata, tc.openErr
			if err := ix.IndexMetadata(ctx, c.Metadata); err == nil {
				t.Fatal("indexing an unreadable _metadata reported success")
			}
			for _, k := range []string{garbage, "new/shared/s"} {
				if d := ix.Decide(ctx, k, refindex.OpUnlink); d.Allow || d.Reason != refindex.ReasonSyncFailed {
					t.Errorf("unlink %s after the failed indexing = %+v; want refused until a sync", k, d)
				}
			}
			st.openErr = nil
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if d := ix.Decide(ctx, "new/shared/s", refindex.OpUnlink); d.Allow || d.Reason != refindex.ReasonReferenced {
				t.Errorf("after the sync: unlink new/shared/s = %+v; want refused as referenced", d)
			}
			if d := ix.Decide(ctx, garbage, refindex.OpUnlink); !d.Allow {
				t.Errorf("after the sync: garbage refused: %+v", d)
			}
			// Really gone: not indexed, nothing refused for it.
			if err := os.Remove(filepath.Join(tr.Root, c.Metadata)); err != nil {
				t.Fatal(err)
			}
			if err := ix.IndexMetadata(ctx, c.Metadata); err != nil {
				t.Fatalf("indexing a _metadata that is gone: %v", err)
			}
			if d := ix.Decide(ctx, garbage, refindex.OpUnlink); !d.Allow {
				t.Errorf("garbage refused after a _metadata that is gone was notified: %+v", d)
			}
		})
	}
}
