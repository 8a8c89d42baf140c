package refindex_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
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
// read is a live checkpoint it does not know, so every decision is refused until a sync reads it;
// only the writer hearing of the error would leave that checkpoint's files deletable.
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
			tr, ls := youngOrphanStore(t)
			st := &unreadableStore{Store: ls}
			ix := openSynced(t, st)
			garbage := tr.Orphans(treegen.DefaultPolicy, 0)[0]
			if d := ix.Decide(ctx, garbage, verdict.OpUnlink); !d.Allow {
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
				if d := ix.Decide(ctx, k, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonSyncFailed {
					t.Errorf("unlink %s after the failed indexing = %+v; want refused until a sync", k, d)
				}
			}
			st.openErr = nil
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if d := ix.Decide(ctx, "new/shared/s", verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonReferenced {
				t.Errorf("after the sync: unlink new/shared/s = %+v; want refused as referenced", d)
			}
			if d := ix.Decide(ctx, garbage, verdict.OpUnlink); !d.Allow {
				t.Errorf("after the sync: garbage refused: %+v", d)
			}
			// Really gone: not indexed, nothing refused for it.
			if err := os.Remove(filepath.Join(tr.Root, c.Metadata)); err != nil {
				t.Fatal(err)
			}
			if err := ix.IndexMetadata(ctx, c.Metadata); err != nil {
				t.Fatalf("indexing a _metadata that is gone: %v", err)
			}
			if d := ix.Decide(ctx, garbage, verdict.OpUnlink); !d.Allow {
				t.Errorf("garbage refused after a _metadata that is gone was notified: %+v", d)
			}
		})
	}
}

// extraListingStore lists one more _metadata than its store holds under a clean key (an S3 object whose
// key has "//" in it), and a folder marker named _metadata/.
type extraListingStore struct {
	store.Store
	extra []store.ObjectInfo
}

func (e *extraListingStore) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	if err := e.Store.ListMetadata(ctx, fn); err != nil {
		return err
	}
	for _, oi := range e.extra {
		if flinklayout.IsMetadata(oi.Path) {
			if err := fn(oi); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestUnaddressableMetadataFailsClosed: a listed _metadata at a key ckguard cannot address
// ("a//chk-1/_metadata") used to count as gone at every sync, leaving what it references unprotected. It
// is kept as unparseable (every deletion refused, the message says how to fix it); a folder marker named
// _metadata/ is no checkpoint at all.
func TestUnaddressableMetadataFailsClosed(t *testing.T) {
	ctx := context.Background()
	tr, ls := youngOrphanStore(t)
	old := testNow.Add(-48 * time.Hour)
	for _, tc := range []struct {
		name  string
		extra store.ObjectInfo
		allow bool
	}{
		{"folder marker", store.ObjectInfo{Path: "a/chk-1/_metadata/", ModTime: old}, true},
		{"doubled slash", store.ObjectInfo{Path: "a//chk-1/_metadata", Size: 900, ModTime: old}, false},
		{"dot segment", store.ObjectInfo{Path: "a/./chk-1/_metadata", Size: 900, ModTime: old}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := openSynced(t, &extraListingStore{Store: ls, extra: []store.ObjectInfo{tc.extra}})
			garbage := tr.Orphans(treegen.DefaultPolicy, 0)[0]
			d := ix.Decide(ctx, garbage, verdict.OpUnlink)
			if d.Allow != tc.allow {
				t.Fatalf("unlink %s with %q listed = %+v; want allowed %v", garbage, tc.extra.Path, d, tc.allow)
			}
			if !tc.allow && (d.Reason != verdict.ReasonUnparseable || !strings.Contains(d.Message, "cannot address")) {
				t.Errorf("refusal %+v; want it to name the unaddressable key", d)
			}
			// Still there at the next sync (it is listed again): still refused.
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if d := ix.Decide(ctx, garbage, verdict.OpUnlink); d.Allow != tc.allow {
				t.Errorf("after a second sync: %+v; want allowed %v", d, tc.allow)
			}
		})
	}
}

// TestSpecialMetadataNeverOpened: a FIFO or a symlink named _metadata (linked or
// renamed into place through the mount) is no checkpoint: indexing it neither blocks (a FIFO's open would
// wait for a writer forever, under the index's and the mount's locks) nor fails the index, and it does not
// block `orphans` for good.
func TestSpecialMetadataNeverOpened(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, tr)
	for _, d := range []string{"f/chk-1", "s/chk-1", "r/chk-1"} {
		if err := os.MkdirAll(filepath.Join(tr.Root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(tr.Root, "f/chk-1/_metadata"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(tr.Root, "s/chk-1/_metadata")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(tr.Root, "r/chk-1/tmp"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(tr.Root, "r/chk-1/tmp"), filepath.Join(tr.Root, "r/chk-1/_metadata")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for _, k := range []string{"f/chk-1/_metadata", "s/chk-1/_metadata"} {
			if err := ix.IndexMetadata(ctx, k); err != nil {
				done <- err
				return
			}
		}
		done <- ix.Renamed(ctx, "r/chk-1/tmp", "r/chk-1/_metadata")
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("indexing a FIFO or symlink named _metadata: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("indexing a FIFO named _metadata blocked")
	}
	garbage := tr.Orphans(treegen.DefaultPolicy, 0)[0]
	if d := ix.Decide(ctx, garbage, verdict.OpUnlink); !d.Allow {
		t.Errorf("garbage refused after a FIFO named _metadata was notified: %+v", d)
	}
	if res, err := ix.Orphans(ctx, 0); err != nil || res.Blocked != "" {
		t.Errorf("orphans with a FIFO and a symlink named _metadata: %+v %v; want not blocked", res, err)
	}
}

// TestRenamedMetadataUnreadableFailsClosed: a _metadata renamed into place through the mount
// that the store reports but cannot read fails the index closed, as one written through it does.
func TestRenamedMetadataUnreadableFailsClosed(t *testing.T) {
	ctx := context.Background()
	tr, ls := youngOrphanStore(t)
	st := &unreadableStore{Store: ls}
	ix := openSynced(t, st)
	c, err := tr.Checkpoint(treegen.Spec{Dir: "new/chk-3", Job: "new", ID: 3, Completed: testNow.Add(-time.Hour), Shared: []string{"new/shared/s"}})
	if err != nil {
		t.Fatal(err)
	}
	st.key, st.openErr = c.Metadata, fs.ErrNotExist
	if err := ix.Renamed(ctx, "new/chk-3/._metadata.inprogress", c.Metadata); err == nil {
		t.Fatal("a rename onto an unreadable _metadata was recorded as if nothing were there")
	}
	if d := ix.Decide(ctx, "new/shared/s", verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonSyncFailed {
		t.Errorf("unlink new/shared/s after the failed rename record = %+v; want refused until a sync", d)
	}
}

// notifyDuringListing runs hook once, after its store's listing, while a sync has not applied it yet.
type notifyDuringListing struct {
	store.Store
	hook func()
}

func (n *notifyDuringListing) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	err := n.Store.ListMetadata(ctx, fn)
	if h := n.hook; h != nil {
		n.hook = nil
		h()
	}
	return err
}

// TestFailureDuringSyncOutlivesIt: a notification that fails the index closed while a sync
// is under way (after its listing, which may not have seen the object) is not cleared by that sync; the
// next one, whose listing starts later, clears it.
func TestFailureDuringSyncOutlivesIt(t *testing.T) {
	ctx := context.Background()
	tr, ls := youngOrphanStore(t)
	un := &unreadableStore{Store: ls}
	st := &notifyDuringListing{Store: un}
	ix := openSynced(t, st)
	// Written through the mount after the sync's listing: the sync does not see it.
	st.hook = func() {
		c, err := tr.Checkpoint(treegen.Spec{Dir: "new/chk-3", Job: "new", ID: 3, Completed: testNow.Add(-time.Hour), Shared: []string{"new/shared/s"}})
		if err != nil {
			t.Error(err)
			return
		}
		un.key, un.openErr = c.Metadata, errors.New("503 Slow Down")
		if err := ix.IndexMetadata(ctx, c.Metadata); err == nil {
			t.Error("indexing an unreadable _metadata succeeded")
		}
		un.openErr = nil
	}
	time.Sleep(2 * time.Millisecond) // the failure's time must differ from the listing's start
	_ = ix.Sync(ctx)
	if d := ix.Decide(ctx, "new/shared/s", verdict.OpUnlink); d.Allow || d.Reason == verdict.ReasonAllowed {
		t.Errorf("after a sync whose listing began before the failure: %+v; want still refused", d)
	}
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	garbage := tr.Orphans(treegen.DefaultPolicy, 0)[0]
	if d := ix.Decide(ctx, garbage, verdict.OpUnlink); !d.Allow {
		t.Errorf("after the next sync: garbage refused: %+v", d)
	}
}

// youngOrphanStore writes the young-orphan scenario and opens it as a local store, for tests that wrap the
// store before the index sees it.
func youngOrphanStore(t *testing.T) (*treegen.Tree, store.Store) {
	t.Helper()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := localstore.New(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	return tr, ls
}
