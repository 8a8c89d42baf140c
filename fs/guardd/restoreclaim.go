package guardd

import (
	"context"
	"errors"
	"strings"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/shared"
)

// restoreClaims makes a --shared mount's quarantine restores exactly once across the fleet and
// names, to a mount that comes second, who restored the entry and when: a restore is claimed in the
// shared area (shared.RestoreClaims) before its object moves, and its outcome recorded after. A claim
// another mount holds or finished refuses the restore with shared.AlreadyRestoredError; an entry
// already gone from the quarantine is explained by its record when there is one.
type restoreClaims struct {
	rc       shared.RestoreClaims
	readOnly bool // an observer writes nothing: its restores are not claimed (the move itself still never replaces anything)
}

func newRestoreClaims(f *fleet) *restoreClaims {
	return &restoreClaims{rc: shared.RestoreClaims{C: f.cas, Mount: f.rec.ID, Host: f.rec.Host, Warn: f.log.Warn}, readOnly: f.readOnly}
}

// claim claims entry id (at key) for this mount and returns the function that records the outcome.
func (rc *restoreClaims) claim(ctx context.Context, id, key string) (func(error), error) {
	if rc == nil || rc.readOnly {
		return func(error) {}, nil
	}
	return rc.rc.Claim(ctx, id, key)
}

// explain replaces err, the failure of a restore of entry id that the quarantine no longer holds,
// with who restored it and when, when the shared area has the record.
func (rc *restoreClaims) explain(ctx context.Context, id string, err error) error {
	if rc == nil {
		return err
	}
	return rc.rc.Explain(ctx, id, err)
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
