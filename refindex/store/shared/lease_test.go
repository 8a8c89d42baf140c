package shared_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/store/shared/sharedtest"
)

// TestLeaseTakeoverAfterExpiry: one holder at a time; a holder that stops renewing (crashed) is
// taken over once another side has seen its record unrenewed for a TTL, with the next generation,
// and the old holder is no longer valid before that (TTL/2 after its last renewal started).
func TestLeaseTakeoverAfterExpiry(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []string{"mem", "local"} {
		t.Run(kind, func(t *testing.T) {
			var c shared.CAS = sharedtest.NewMem()
			if kind == "local" {
				l, err := shared.NewLocal(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				c = l
			}
			const ttl = 400 * time.Millisecond
			a := shared.NewLease(c, "sweeper", "a", ttl)
			b := shared.NewLease(c, "sweeper", "b", ttl)
			if ok, err := a.Hold(ctx); !ok || err != nil {
				t.Fatalf("a takes the free lease: %v %v", ok, err)
			}
			_, genA := a.Valid()
			if ok, err := b.Hold(ctx); ok || err != nil {
				t.Fatalf("b takes a held lease: %v %v", ok, err)
			}
			if h, _ := b.Holder(); h != "a" {
				t.Errorf("b sees holder %q, want a", h)
			}
			// a renews for a while: b never takes it.
			for range 6 {
				time.Sleep(ttl / 4)
				if ok, err := a.Hold(ctx); !ok || err != nil {
					t.Fatalf("a's renewal: %v %v", ok, err)
				}
				if ok, _ := b.Hold(ctx); ok {
					t.Fatal("b took a lease a renews")
				}
			}
			// a crashes (no more renewals): invalid after TTL/2, b takes it after a TTL.
			crashed := time.Now()
			for {
				ok, _ := b.Hold(ctx)
				if ok {
					break
				}
				if v, _ := a.Valid(); v && time.Since(crashed) > ttl/2+50*time.Millisecond {
					t.Fatal("a still valid past TTL/2 without renewing")
				}
				if time.Since(crashed) > 3*ttl {
					t.Fatal("b did not take the expired lease")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if d := time.Since(crashed); d < ttl/2 {
				t.Errorf("b took the lease %s after a's last renewal, under TTL/2", d)
			}
			if v, _ := a.Valid(); v {
				t.Error("a and b both valid")
			}
			_, genB := b.Valid()
			if genB != genA+1 {
				t.Errorf("generation %d after takeover, want %d", genB, genA+1)
			}
			// a comes back: its renewal finds another generation, it has lost.
			if ok, _ := a.Hold(ctx); ok {
				t.Error("a's renewal after the takeover succeeded")
			}
			// b releases: a takes it at once.
			if err := b.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if ok, err := a.Hold(ctx); !ok || err != nil {
				t.Fatalf("a after b's release: %v %v", ok, err)
			}
		})
	}
}

// TestLeaseOneHolderAtATime: sides racing for the lease, each acting only while Valid: never two at
// once.
func TestLeaseOneHolderAtATime(t *testing.T) {
	ctx := context.Background()
	c := sharedtest.NewMem()
	const ttl = 200 * time.Millisecond
	var inside, max, turns atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(1500 * time.Millisecond)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := shared.NewLease(c, "sweeper", fmt.Sprint("side", i), ttl)
			for time.Now().Before(stop) {
				if ok, _ := l.Hold(ctx); ok {
					if v, _ := l.Valid(); v {
						n := inside.Add(1)
						for m := max.Load(); n > m && !max.CompareAndSwap(m, n); m = max.Load() {
						}
						turns.Add(1)
						time.Sleep(5 * time.Millisecond) // well within TTL/2
						inside.Add(-1)
					}
					if i%2 == 0 && turns.Load()%7 == 0 {
						time.Sleep(ttl) // a holder that stalls: loses it
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if max.Load() > 1 {
		t.Fatalf("%d sides acted at once", max.Load())
	}
	if turns.Load() == 0 {
		t.Fatal("nobody held the lease")
	}
}
