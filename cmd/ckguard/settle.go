package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ckguard/ckguard/refindex"
)

// settleTries bounds the verifies whose only broken checkpoints were retired while they were checked
// (settleWait apart, doubling up to settleWaitMax): the index is behind a job that checkpoints
// faster than it syncs, and the job's newer checkpoints, not indexed yet, may need the same missing
// objects. Saying "nothing is missing" then would be a silent gap.
const (
	settleTries   = 6
	settleWait    = time.Second
	settleWaitMax = 8 * time.Second
)

// settledVerify is q's Verify, asked again (settleTries) while the only broken checkpoints it finds
// were retired during the check. Between two tries an index this command opened itself is synced
// again; a mount's index syncs on its own, so the command waits.
func settledVerify(ctx context.Context, q refindex.Querier) (*refindex.VerifyResult, error) {
	wait := settleWait
	for try := 1; ; try++ {
		v, err := q.Verify(ctx)
		if err != nil || !unsettled(v) || try == settleTries {
			return v, err
		}
		if s, ok := q.(interface{ Sync(context.Context) error }); ok {
			if err := s.Sync(ctx); err != nil {
				return nil, fmt.Errorf("sync the index again (checkpoints were retired while verifying): %w", err)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, settleWaitMax)
	}
}

// unsettled reports whether a verify found nothing broken but checkpoints with missing objects that
// were retired while it checked: their successors, not indexed yet, may need the same objects.
func unsettled(v *refindex.VerifyResult) bool {
	return len(v.Broken) == 0 && len(v.RetiredDuringCheck) > 0
}

// unsettledWhy is why such a verify is not green.
func unsettledWhy(v *refindex.VerifyResult) string {
	return fmt.Sprintf("%d checkpoint(s) with missing objects were retired while verifying, in each of %d tries (e.g. %s): the index is behind a job that checkpoints faster than it syncs, and its newer checkpoints, not indexed yet, may need the same objects; run `ckguard index sync` (or wait for the mount's next sync) and verify again",
		len(v.RetiredDuringCheck), settleTries, v.RetiredDuringCheck[0])
}
