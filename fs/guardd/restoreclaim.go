package guardd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/shared"
)

// restoreClaims makes a --shared mount's quarantine restores exactly once across the fleet and
// names, to a mount that comes second, who restored the entry and when: a restore is claimed in the
// shared area (shared.ClaimRestore) before its object moves, and its outcome recorded after. A claim
// another mount holds or finished refuses the restore with shared.AlreadyRestoredError; an entry
// already gone from the quarantine is explained by its record when there is one.
type restoreClaims struct{ f *fleet }

// claim claims entry id (at key) for this mount and returns the function that records the outcome.
// An observer (--shared-read-only) writes nothing: its restores are not claimed (the move itself still
// never replaces anything).
func (rc *restoreClaims) claim(ctx context.Context, id, key string) (func(error), error) {
	if rc == nil || rc.f.readOnly {
		return func(error) {}, nil
	}
	f := rc.f
	want := shared.Restore{Entry: id, Key: key, Mount: f.rec.ID, Host: f.rec.Host}
	err := shared.ClaimRestore(ctx, f.cas, want, time.Now())
	var already *shared.AlreadyRestoredError
	if errors.As(err, &already) && already.Rec.State == shared.Restoring {
		// Another mount is moving it now (a move takes milliseconds to a large S3 copy's minutes):
		// wait a little for its outcome, so the answer is what happened rather than that it is under
		// way; a failed one frees the entry for this claim.
		if r := rc.await(ctx, id); r.State == shared.RestoreFailed {
			err = shared.ClaimRestore(ctx, f.cas, want, time.Now())
		} else if r.State == shared.Restored {
			err = &shared.AlreadyRestoredError{Rec: r}
		}
	}
	if err != nil {
		if errors.As(err, &already) {
			return nil, err
		}
		return nil, fmt.Errorf("restore /%s: %w: the store's shared state cannot say whether another mount restores it too, so nothing was moved; retry once `ckguard fleet` answers", key, err)
	}
	return func(rerr error) {
		// The outcome's own context: the caller's may have ended with the move done.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := shared.FinishRestore(ctx, f.cas, id, f.rec.ID, rerr, time.Now()); err != nil {
			f.log.Warn("quarantine: the outcome of a restore could not be recorded in the shared state; other mounts see it as being restored until the claim expires", "entry", id, "path", key, "err", err, "claim_ttl", shared.RestoreClaimTTL)
		}
	}, nil
}

// awaitFor bounds how long a restore waits for another mount's claim of the same entry to finish.
const awaitFor = 5 * time.Second

// await reads entry id's restore record until its claim is no longer Restoring, for at most awaitFor,
// and returns the last record read.
func (rc *restoreClaims) await(ctx context.Context, id string) shared.Restore {
	ctx, cancel := context.WithTimeout(ctx, awaitFor)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var last shared.Restore
	for {
		if r, ok, err := shared.RestoreOf(ctx, rc.f.cas, id); err == nil && ok {
			last = r
			if r.State != shared.Restoring {
				return r
			}
		}
		select {
		case <-ctx.Done():
			return last
		case <-t.C:
		}
	}
}

// explain replaces err, the failure of a restore of entry id that the quarantine no longer holds,
// with who restored it and when, when the shared area has the record.
func (rc *restoreClaims) explain(ctx context.Context, id string, err error) error {
	if rc == nil || err == nil {
		return err
	}
	r, ok, rerr := shared.RestoreOf(ctx, rc.f.cas, id)
	if rerr != nil || !ok || r.State == shared.RestoreFailed {
		return err
	}
	return &shared.AlreadyRestoredError{Rec: r}
}

// restoreService is the quarantine service a --shared mount serves: Restore's failures for entries
// gone from the quarantine (restored by another mount between the caller's listing and this restore)
// say who restored them and when.
type restoreService struct {
	*quarantine.Direct
	rc *restoreClaims
}

func (s restoreService) Restore(ctx context.Context, ids []string) (*quarantine.RestoreResult, error) {
	r, err := s.Direct.Restore(ctx, ids)
	if r == nil {
		return r, err
	}
	for i, fl := range r.Failed {
		if strings.HasPrefix(fl.Error, quarantine.ErrNoEntry.Error()) {
			if e := s.rc.explain(ctx, fl.Entry.ID, quarantine.ErrNoEntry); !errors.Is(e, quarantine.ErrNoEntry) {
				r.Failed[i].Error = e.Error()
			}
		}
	}
	return r, err
}
