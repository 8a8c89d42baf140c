package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// pendingEnforcer is an enforcer over ck with an audit log (closed when the test ends) that waits only
// 10 ms for a pending index update before it refuses as index-pending.
func pendingEnforcer(t *testing.T, ck guard.Checker) *guard.Enforcer {
	t.Helper()
	al, err := audit.Open(t.TempDir()+"/audit.jsonl", audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	e, err := guard.NewEnforcer(guard.Config{Checker: ck, Audit: al, Metrics: metrics.New(), PendingWait: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestRedecidePendingUpdate: a queued deletion decided again while a _metadata's index update is pending
// (registered, not yet in the index) is refused as index-pending, not allowed on an index that does not
// know the _metadata yet (which may reference the object: the S3 queue would then delete it while the
// update runs). Once the update is in, the same deletion is allowed again. The update is held pending
// deterministically by deciding from inside RestoreMetadata's put.
func TestRedecidePendingUpdate(t *testing.T) {
	ctx := context.Background()
	e := pendingEnforcer(t, guardtest.New())
	unlink := []guard.Check{{Op: verdict.OpUnlink, Path: "job/chk-3/sst-1"}}
	redecide := func() verdict.Decision {
		var got []verdict.Decision
		e.Redecide(ctx, unlink, func(ds []verdict.Decision) { got = ds })
		if len(got) != 1 {
			t.Fatalf("Redecide gave %d decisions for 1 check", len(got))
		}
		return got[0]
	}
	var during verdict.Decision
	if err := e.RestoreMetadata(ctx, "job/chk-3/_metadata", func() error {
		during = redecide()
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if during.Allow || during.Reason != guard.ReasonIndexPending {
		t.Errorf("a queued deletion decided again while a _metadata was pending: %+v, want a %s refusal", during, guard.ReasonIndexPending)
	}
	if d := redecide(); !d.Allow {
		t.Errorf("after the update an unreferenced deletion is refused: %+v", d)
	}
}
