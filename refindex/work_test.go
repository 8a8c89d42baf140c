package refindex_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// workSpy counts the WithWork hook's open works and records whether each store walk ran inside one.
type workSpy struct {
	store.Store
	mu      sync.Mutex
	open    int
	begun   int
	outside []string // store calls made while no work was open
}

func (w *workSpy) begin() func() {
	w.mu.Lock()
	w.open++
	w.begun++
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			w.open--
			w.mu.Unlock()
		})
	}
}

func (w *workSpy) check(call string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open == 0 {
		w.outside = append(w.outside, call)
	}
}

func (w *workSpy) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	w.check("ListMetadata")
	return w.Store.ListMetadata(ctx, fn)
}

func (w *workSpy) Walk(ctx context.Context, prefix string, fn func(store.ObjectInfo) error) error {
	w.check("Walk " + prefix)
	return w.Store.Walk(ctx, prefix, fn)
}

func (w *workSpy) state() (open, begun int, outside []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.open, w.begun, append([]string(nil), w.outside...)
}

// TestWorkHook: every sync, rebuild, verify and orphans walk, and the reference filter's background fill,
// runs inside the WithWork hook (a mount raises GOMAXPROCS for it), and every work it begins ends.
func TestWorkHook(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tr, err := treegen.IncidentOne(filepath.Join(dir, "store"), testNow)
	if err != nil {
		t.Fatal(err)
	}
	st, err := localstore.New(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	spy := &workSpy{Store: st}
	ix, err := refindex.Open(filepath.Join(dir, "index"), spy, testPolicy(), refindex.WithPathMap(tr.Maps, tr.EntropyKey),
		refindex.WithLogger(quiet), refindex.WithWork(spy.begin))
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ix.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Orphans(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if open, begun, outside := spy.state(); open != 0 || begun < 4 || len(outside) > 0 {
		t.Errorf("after sync, rebuild, verify, orphans: %d works open, %d begun, store walked outside a work: %v", open, begun, outside)
	}
	// Reopened, the index builds its filter in the background after the first decision, inside a work.
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	_, before, _ := spy.state()
	ix, err = refindex.Open(filepath.Join(dir, "index"), spy, testPolicy(), refindex.WithPathMap(tr.Maps, tr.EntropyKey),
		refindex.WithLogger(quiet), refindex.WithWork(spy.begin))
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	for _, c := range tr.Live {
		ix.Decide(ctx, c.Refs[0], verdict.OpUnlink)
		break
	}
	deadline := time.Now().Add(10 * time.Second)
	for !refindex.FilterReady(ix) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !refindex.FilterReady(ix) {
		t.Fatal("the filter was not built")
	}
	for time.Now().Before(deadline) {
		if open, _, _ := spy.state(); open == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if open, begun, _ := spy.state(); open != 0 || begun <= before {
		t.Errorf("filter fill: %d works open after it, %d begun (%d before it); want it inside a work that ended", open, begun, before)
	}
}
