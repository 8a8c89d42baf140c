package shared_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/store/shared/sharedtest"
)

// TestRestoreClaimedOnce: mounts racing to claim one entry's restore over a CAS with lost answers:
// exactly one claim is taken, every other is told who holds it; once finished, a later claim is told
// who restored the entry and when; a failed restore frees the entry for another claim.
func TestRestoreClaimedOnce(t *testing.T) {
	for seed := range 20 {
		m := sharedtest.NewMem()
		var fmu sync.Mutex
		n := 0
		m.Faults = func() sharedtest.Fault {
			fmu.Lock()
			defer fmu.Unlock()
			n++
			if (n+seed)%4 == 0 {
				return sharedtest.FailApplied
			}
			return sharedtest.OK
		}
		ctx := context.Background()
		now := time.Date(2026, 12, 7, 16, 0, 0, 0, time.UTC)
		const id = "entry-1"
		var wg sync.WaitGroup
		errs := make([]error, 5)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = shared.ClaimRestore(ctx, m, shared.Restore{Entry: id, Key: "job/f", Mount: fmt.Sprintf("host%d-m", i), Host: fmt.Sprintf("host%d", i)}, now)
			}()
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			var already *shared.AlreadyRestoredError
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("seed %d: claims %d and %d both taken", seed, winner, i)
				}
				winner = i
			case errors.As(err, &already):
				if !strings.Contains(err.Error(), "being restored by the mount on host") {
					t.Errorf("seed %d: loser %d: %v", seed, i, err)
				}
			default:
				t.Fatalf("seed %d: claim %d: %v", seed, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("seed %d: no claim taken", seed)
		}
		wm := fmt.Sprintf("host%d-m", winner)
		if err := shared.FinishRestore(ctx, m, id, wm, nil, now.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		err := shared.ClaimRestore(ctx, m, shared.Restore{Entry: id, Key: "job/f", Mount: "late-m", Host: "late"}, now.Add(time.Hour))
		want := fmt.Sprintf("already restored by the mount on host%d (%s) at 2026-12-07T16:00:01Z", winner, wm)
		if !errors.Is(err, shared.ErrAlreadyRestored) || !strings.Contains(err.Error(), want) {
			t.Fatalf("seed %d: a later claim: %v, want %q", seed, err, want)
		}
	}
	m := sharedtest.NewMem()
	ctx, now := context.Background(), time.Now()
	if err := shared.ClaimRestore(ctx, m, shared.Restore{Entry: "e", Key: "k", Mount: "a"}, now); err != nil {
		t.Fatal(err)
	}
	if err := shared.FinishRestore(ctx, m, "e", "a", errors.New("occupied"), now); err != nil {
		t.Fatal(err)
	}
	if err := shared.ClaimRestore(ctx, m, shared.Restore{Entry: "e", Key: "k", Mount: "b"}, now); err != nil {
		t.Errorf("a claim after a failed restore: %v, want it taken", err)
	}
	if err := shared.ClaimRestore(ctx, m, shared.Restore{Entry: "e", Key: "k", Mount: "c"}, now.Add(shared.RestoreClaimTTL)); err != nil {
		t.Errorf("a claim after the first claimer went silent for RestoreClaimTTL: %v, want it taken", err)
	}
}
