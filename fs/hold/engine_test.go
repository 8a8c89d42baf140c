package hold

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sort"
	"sync"
	"testing"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// flagPrim is a Primitive of keys without versions that records which are held.
type flagPrim struct {
	mu   sync.Mutex
	held map[string]bool
}

func (p *flagPrim) Stat(context.Context, string) (string, int64, error) { return "", 1, nil }
func (p *flagPrim) Hold(_ context.Context, k, _ string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held[k] = true
	return nil
}
func (p *flagPrim) Release(_ context.Context, k, _ string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.held, k)
	return nil
}

func (p *flagPrim) on(k string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[k]
}

// setIndex protects a set of keys that the test changes between passes.
type setIndex struct {
	mu   sync.Mutex
	prot map[string]bool
}

func (ix *setIndex) ProtectedKeys(_ context.Context, fn func(string, refindex.ProtectedKind) bool) error {
	ix.mu.Lock()
	var ks []string
	for k, on := range ix.prot {
		if on {
			ks = append(ks, k)
		}
	}
	ix.mu.Unlock()
	sort.Strings(ks)
	for _, k := range ks {
		if !fn(k, refindex.ProtectedObject) {
			break
		}
	}
	return nil
}

func (ix *setIndex) Decide(_ context.Context, p string, _ verdict.Op, _ ...store.ObjectInfo) verdict.Decision {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return verdict.Decision{Allow: !ix.prot[p]}
}

// TestLiftedLedgerReplaysToMemory: passes and the mount's BeforeChange racing on the same keys leave
// a ledger file that replays to exactly what the engine holds in memory (the queue keeps the order of
// the changes, whoever made them), what the ledger says held is held by the primitive, and after a
// last settling pass every protected key is held and nothing else is.
func TestLiftedLedgerReplaysToMemory(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLedger(dir)
	if err != nil {
		t.Fatal(err)
	}
	prim := &flagPrim{held: map[string]bool{}}
	ix := &setIndex{prot: map[string]bool{}}
	e := New(Options{Primitive: prim, Index: ix, Ledger: l, Lifted: true, Batch: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprintf("j/f%02d", i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for round := range 30 {
		ix.mu.Lock()
		for _, k := range keys {
			ix.prot[k] = rng.IntN(3) > 0
		}
		ix.mu.Unlock()
		touch := make([]string, 20)
		for i := range touch {
			touch[i] = keys[rng.IntN(len(keys))]
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, k := range touch {
				e.BeforeChange(verdict.OpUnlink, k)
			}
		}()
		if err := e.Pass(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		wg.Wait()
		if err := l.flush(true); err != nil {
			t.Fatal(err)
		}
		got, err := ReadLedger(dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := l.Entries(); !sameEntries(got, want) {
			t.Fatalf("round %d: the file replays to %v, memory holds %v", round, keysOf(got), keysOf(want))
		}
		for _, en := range got {
			if en.State == Held && !prim.on(en.Key) {
				t.Fatalf("round %d: the ledger says %s is held, the primitive does not hold it", round, en.Key)
			}
		}
		for _, k := range keys {
			if _, ok := l.Get(k); prim.on(k) && !ok {
				t.Fatalf("round %d: %s is held but the ledger forgot it (it would stay held for good)", round, k)
			}
		}
	}
	if err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if on := prim.on(k); on != ix.prot[k] {
			t.Errorf("%s: held %v, protected %v after a settling pass", k, on, ix.prot[k])
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

func sameEntries(a, b []*Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := *a[i], *b[i]
		x.seen, y.seen = 0, 0
		x.Failures, y.Failures, x.LastErr, y.LastErr = 0, 0, "", ""
		x.Since, y.Since = x.Since.UTC(), y.Since.UTC()
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func keysOf(es []*Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Key+":"+string(e.State))
	}
	return out
}
