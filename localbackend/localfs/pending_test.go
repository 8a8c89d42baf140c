package localfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// gatedStore holds the index's first open of one key until released: the index is then provably in the
// middle of reading that _metadata.
type gatedStore struct {
	store.Store
	key     string
	once    sync.Once
	started chan struct{}
	release chan struct{}
}

func (g *gatedStore) Open(ctx context.Context, key string) (store.Reader, error) {
	if key == g.key {
		g.once.Do(func() {
			close(g.started)
			<-g.release
		})
	}
	return g.Store.Open(ctx, key)
}

// A large _metadata (200,000 references) closed or renamed into place through the mount is read and
// indexed without stalling the mount: while the index is held in the middle of reading it, an rm of an
// unrelated file returns at once, refused as pending (what the new checkpoint references is not known yet),
// and so does an rm of a file it references; the writer's close or rename returns once the checkpoint is
// indexed, and from then on its files are protected and the unrelated file can go. Asserted by ordering:
// the read is held until both rm have returned.
func TestLargeMetadataDoesNotStallTheMount(t *testing.T) {
	for _, via := range []string{"close", "rename"} {
		t.Run(via, func(t *testing.T) {
			gate := &gatedStore{started: make(chan struct{}), release: make(chan struct{})}
			x := mountIndexedOver(t, func(st store.Store) store.Store { gate.Store = st; return gate })
			chk := x.job + "/chk-90"
			meta := chk + "/_metadata"
			gate.key = meta
			old := time.Now().Add(-72 * time.Hour)
			victim, other := x.job+"/shared/victim", x.job+"/shared/other"
			for _, k := range []string{victim, other} {
				if err := x.tree.Write(k, 100, old); err != nil {
					t.Fatal(err)
				}
			}
			shared := []string{victim}
			for i := range 200_000 {
				shared = append(shared, fmt.Sprintf("%s/shared/sst-%07d", x.job, i))
			}
			// The job manager's bytes (generated in the store, then taken out: only the bytes are needed).
			c, err := x.tree.Checkpoint(treegen.Spec{Dir: chk, ID: 90, Completed: time.Now(), Shared: shared})
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(x.store(c.Metadata))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(x.store(c.Metadata)); err != nil {
				t.Fatal(err)
			}
			t.Logf("_metadata: %d references, %d bytes", len(shared), len(b))
			done := make(chan error, 1)
			switch via {
			case "close":
				go func() { done <- os.WriteFile(x.m(meta), b, 0o644) }()
			case "rename":
				tmp := chk + "/._metadata.inprogress.6f1c2a9e-0b1d-4c3e-9a7f-1d2e3f4a5b6c"
				if err := os.WriteFile(x.m(tmp), b, 0o644); err != nil {
					t.Fatal(err)
				}
				go func() { done <- os.Rename(x.m(tmp), x.m(meta)) }()
			}
			<-gate.started
			for _, k := range []string{other, victim} {
				if err := os.Remove(x.m(k)); !errors.Is(err, syscall.EPERM) {
					t.Errorf("rm %s while the index reads the new _metadata: %v, want EPERM (pending)", k, err)
				}
			}
			select {
			case err := <-done:
				t.Fatalf("the %s returned (%v) before the index read the _metadata", via, err)
			default:
			}
			close(gate.release)
			if err := <-done; err != nil {
				t.Fatalf("%s of the new _metadata: %v", via, err)
			}
			if err := os.Remove(x.m(victim)); !errors.Is(err, syscall.EPERM) {
				t.Errorf("rm %s, referenced by the new checkpoint: %v, want EPERM", victim, err)
			}
			if err := os.Remove(x.m(other)); err != nil {
				t.Errorf("rm %s once the new checkpoint is indexed: %v", other, err)
			}
			for k, want := range map[string]bool{victim: true, other: false} {
				if _, err := os.Lstat(x.store(k)); (err == nil) != want {
					t.Errorf("%s in the store: %v, want present=%v", k, err, want)
				}
			}
		})
	}
}
