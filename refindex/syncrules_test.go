package refindex_test

// Safety rules of the index that span sync and decide: partial listings, unparseable and
// unmapped _metadata, symlinked store roots, in-flight writes, globs, streaming, Close.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// partialStore lists nothing through ListMetadata (like S3 targeted discovery that has not learned a
// folder yet) unless full is set; ListAllMetadata, when offered, is complete.
type partialStore struct {
	store.Store
	mu      sync.Mutex
	full    bool
	statErr error
	fulls   int
}

func (p *partialStore) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	p.mu.Lock()
	full := p.full
	p.mu.Unlock()
	if full {
		return p.Store.ListMetadata(ctx, fn)
	}
	return nil
}

func (p *partialStore) Stat(ctx context.Context, key string) (store.ObjectInfo, error) {
	p.mu.Lock()
	err := p.statErr
	p.mu.Unlock()
	if err != nil && flinklayout.IsMetadata(key) {
		return store.ObjectInfo{}, err
	}
	return p.Store.Stat(ctx, key)
}

// fullPartialStore also offers the complete listing.
type fullPartialStore struct{ *partialStore }

func (f fullPartialStore) ListAllMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	f.mu.Lock()
	f.fulls++
	f.mu.Unlock()
	return f.Store.ListMetadata(ctx, fn)
}

// TestPartialListingKeepsIndexedCheckpoint: a checkpoint indexed through the mount must survive a
// sync whose listing does not report it.
func TestPartialListingKeepsIndexedCheckpoint(t *testing.T) {
	ctx := context.Background()
	tr, meta, ref := youngOrphan(t)
	ps := &partialStore{Store: localStore(t, tr.Root)}
	ix := openSynced(t, ps) // "empty bucket": the listing finds nothing
	if err := ix.IndexMetadata(ctx, meta); err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, ref, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonReferenced {
		t.Fatalf("after IndexMetadata: %+v", d)
	}
	for i := 0; i < 2; i++ {
		if err := ix.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if d := ix.Decide(ctx, ref, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonReferenced {
			t.Fatalf("sync %d with a partial listing retired the checkpoint: %+v", i, d)
		}
	}
	// A stat error on an unlisted key does not retire the key: it is kept as indexed and is an unknown
	// subtree (scoped, issue 29: the rest of the store is still decided), its references refused.
	ps.mu.Lock()
	ps.statErr = errors.New("503 Slow Down")
	ps.mu.Unlock()
	if err := ix.Sync(ctx); err != nil {
		t.Fatalf("a stat error on one unlisted _metadata failed the whole sync: %v", err)
	}
	if us := ix.UnknownSubtrees(); len(us) != 1 || us[0].Key != meta {
		t.Fatalf("unknown subtrees %+v, want %s", us, meta)
	}
	if d := ix.Decide(ctx, ref, verdict.OpUnlink); d.Allow {
		t.Fatalf("after failed stat: %+v", d)
	}
	ps.mu.Lock()
	ps.statErr = nil
	ps.mu.Unlock()
	// Really deleted (outside the mount): the next sync retires it.
	if err := tr.Retire(meta); err != nil {
		t.Fatal(err)
	}
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, ref, verdict.OpUnlink); !d.Allow {
		t.Fatalf("retired checkpoint still protects its file: %+v", d)
	}
}

// TestRebuildUsesCompleteListing: a rebuild replaces the index with a complete listing
// (FullLister), and keeps indexed _metadata a partial listing misses even without one.
func TestRebuildUsesCompleteListing(t *testing.T) {
	ctx := context.Background()
	for _, withFull := range []bool{true, false} {
		tr, meta, ref := youngOrphan(t)
		ps := &partialStore{Store: localStore(t, tr.Root)}
		var st store.Store = ps
		if withFull {
			st = fullPartialStore{ps}
		}
		ix := openIndex(t, t.TempDir(), st)
		// The first sync of an empty index is a rebuild: with the complete listing it sees the checkpoint.
		syncIndex(t, ix)
		if withFull {
			if ps.fulls == 0 {
				t.Fatal("rebuild did not use ListAllMetadata")
			}
		} else {
			if err := ix.IndexMetadata(ctx, meta); err != nil {
				t.Fatal(err)
			}
			if err := ix.Rebuild(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if d := ix.Decide(ctx, ref, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonReferenced {
			t.Fatalf("full lister %v: rebuild lost the checkpoint: %+v", withFull, d)
		}
		ix.Close()
	}
}

// blockingStore holds every listing until release is closed.
type blockingStore struct {
	store.Store
	entered chan struct{}
	release chan struct{}
}

func (b *blockingStore) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.release
	return b.Store.ListMetadata(ctx, fn)
}

// TestIndexMetadataDuringSlowSync: a _metadata committed through the mount is indexed while a slow
// sync is listing, and the sync does not undo it.
func TestIndexMetadataDuringSlowSync(t *testing.T) {
	ctx := context.Background()
	tr, _, _ := youngOrphan(t)
	bs := &blockingStore{Store: localStore(t, tr.Root), entered: make(chan struct{}, 1), release: make(chan struct{})}
	close(bs.release)
	ix := openSynced(t, bs)
	<-bs.entered // the first sync's
	bs.release = make(chan struct{})
	// A new checkpoint appears; the periodic sync starts listing (slowly).
	job := "flink/fedcba9876543210fedcba9876543210"
	c, err := tr.Checkpoint(treegen.Spec{Dir: job + "/chk-78", ID: 78, Completed: testNow.Add(-time.Hour), Private: []string{"p78"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Data(c, testNow.Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ix.Sync(ctx) }()
	<-bs.entered
	indexed := make(chan error, 1)
	go func() { indexed <- ix.IndexMetadata(ctx, c.Metadata) }()
	select {
	case err := <-indexed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(bs.release)
		t.Fatal("IndexMetadata waited for the sync's listing")
	}
	if d := ix.Decide(ctx, c.Refs[0], verdict.OpUnlink); d.Allow {
		t.Errorf("file of the checkpoint indexed during the sync: %+v", d)
	}
	close(bs.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, c.Refs[0], verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonReferenced {
		t.Errorf("after the sync: %+v", d)
	}
	// Deleted through the mount while a sync lists: the sync does not bring it back.
	bs.release = make(chan struct{})
	go func() { done <- ix.Sync(ctx) }()
	<-bs.entered
	if err := tr.Retire(c.Metadata); err != nil {
		t.Fatal(err)
	}
	if err := ix.Deleted(ctx, c.Metadata); err != nil {
		t.Fatal(err)
	}
	close(bs.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, c.Refs[0], verdict.OpUnlink); !d.Allow {
		t.Errorf("file of the retired checkpoint after the sync: %+v", d)
	}
}

// countingStore records the largest single read of a _metadata and can fail reads past an offset.
type countingStore struct {
	store.Store
	mu      sync.Mutex
	maxRead int
	failAt  int64 // > 0: reads reaching this offset fail
}

type countingReader struct {
	store.Reader
	s *countingStore
}

func (c *countingStore) Open(ctx context.Context, key string) (store.Reader, error) {
	r, err := c.Store.Open(ctx, key)
	if err != nil {
		return nil, err
	}
	return &countingReader{Reader: r, s: c}, nil
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	c.s.mu.Lock()
	c.s.maxRead = max(c.s.maxRead, len(p))
	fail := c.s.failAt > 0 && off+int64(len(p)) > c.s.failAt
	c.s.mu.Unlock()
	if fail {
		return 0, errors.New("503 Slow Down")
	}
	return c.Reader.ReadAt(p, off)
}

// TestLargeMetadataStreamed: a large _metadata is parsed through the store's reader, not read whole
// into memory; a read error on the way fails the sync (retry) instead of marking the file
// unparseable.
func TestLargeMetadataStreamed(t *testing.T) {
	ctx := context.Background()
	defer refindex.SetReadWholeMax(64 << 10)()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	job := "flink/fedcba9876543210fedcba9876543210"
	var shared []string
	for i := range 4000 {
		shared = append(shared, fmt.Sprintf("%s/shared/sst-%06d-with-a-long-name-as-rocksdb-writes-them", job, i))
	}
	c, err := tr.Checkpoint(treegen.Spec{Dir: job + "/chk-78", ID: 78, Completed: testNow.Add(-time.Hour), Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(tr.Root, c.Metadata))
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: localStore(t, tr.Root), failAt: fi.Size() / 2}
	ix := openIndex(t, t.TempDir(), cs)
	defer ix.Close()
	if err := ix.Sync(ctx); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("sync with a failing read: %v", err)
	}
	if d := ix.Decide(ctx, shared[0], verdict.OpUnlink); d.Reason != verdict.ReasonSyncFailed {
		t.Fatalf("after a failing read: %+v", d)
	}
	cs.mu.Lock()
	cs.failAt, cs.maxRead = 0, 0
	cs.mu.Unlock()
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if cs.maxRead >= int(fi.Size()) {
		t.Errorf("a %d-byte _metadata was read in one %d-byte read", fi.Size(), cs.maxRead)
	}
	if d := ix.Decide(ctx, shared[3999], verdict.OpUnlink); d.Reason != verdict.ReasonReferenced {
		t.Errorf("last reference of the streamed _metadata: %+v", d)
	}
}

// etagStore reports times at the precision S3 does (milliseconds in listings, seconds in HEAD) and
// ETags (quoted in listings), and counts opens.
type etagStore struct {
	store.Store
	mu    sync.Mutex
	opens int
}

func (e *etagStore) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	return e.Store.ListMetadata(ctx, func(oi store.ObjectInfo) error {
		oi.ModTime, oi.ETag = oi.ModTime.Truncate(time.Millisecond).Add(123*time.Millisecond), `"`+oi.Path+`"`
		return fn(oi)
	})
}

func (e *etagStore) Stat(ctx context.Context, key string) (store.ObjectInfo, error) {
	oi, err := e.Store.Stat(ctx, key)
	oi.ModTime, oi.ETag = oi.ModTime.Truncate(time.Second), oi.Path
	return oi, err
}

func (e *etagStore) Open(ctx context.Context, key string) (store.Reader, error) {
	e.mu.Lock()
	e.opens++
	e.mu.Unlock()
	return e.Store.Open(ctx, key)
}

// TestNoSpuriousChange: a _metadata indexed from a HEAD (seconds, ETag) is not "changed" in a
// listing (milliseconds, quoted ETag): no re-read on every sync.
func TestNoSpuriousChange(t *testing.T) {
	ctx := context.Background()
	tr, meta, _ := youngOrphan(t)
	es := &etagStore{Store: localStore(t, tr.Root)}
	ix := openSynced(t, es)
	if err := ix.IndexMetadata(ctx, meta); err != nil {
		t.Fatal(err)
	}
	es.mu.Lock()
	es.opens = 0
	es.mu.Unlock()
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if es.opens != 0 {
		t.Errorf("unchanged _metadata re-read %d times", es.opens)
	}
}

// TestSyncAfterClose: a Sync or Rebuild after Close fails instead of opening a new generation
// behind the closed index.
func TestSyncAfterClose(t *testing.T) {
	ctx := context.Background()
	tr, _, _ := youngOrphan(t)
	ls, dir := localStore(t, tr.Root), t.TempDir()
	ix := openIndex(t, dir, ls)
	ix.Close()
	if err := ix.Sync(ctx); err == nil {
		t.Error("sync of a closed index succeeded")
	}
	if err := ix.Rebuild(ctx); err == nil {
		t.Error("rebuild of a closed index succeeded")
	}
	// The directory is free again.
	openIndex(t, dir, ls).Close()
}
