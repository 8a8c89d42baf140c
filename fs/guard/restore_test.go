package guard_test

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"testing"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// TestRestoreMetadataPendingNotLocked: while a restored _metadata is being put back (a copy on S3, which
// can take seconds), the enforcer's lock is not held (a decision made meanwhile does not deadlock or wait
// for the put) and the update is pending (that decision is refused, not allowed on an index that does not
// know the _metadata yet); afterwards the index has been told and decisions are allowed again. A failing
// put records nothing; a failing index update runs undo and is reported.
func TestRestoreMetadataPendingNotLocked(t *testing.T) {
	ctx := context.Background()
	fake := guardtest.New()
	e := pendingEnforcer(t, fake)
	unlink := guard.Check{Op: verdict.OpUnlink, Path: "job/shared/sst-1"}
	const meta = "job/chk-3/_metadata"
	var during syscall.Errno
	err := e.RestoreMetadata(ctx, meta, func() error {
		during = e.Errno(ctx, unlink) // would deadlock if the lock were held
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if during == 0 {
		t.Errorf("an unlink decided while the _metadata was being restored was allowed")
	}
	if errno := e.Errno(ctx, unlink); errno != 0 {
		t.Errorf("after the restore an unreferenced unlink is refused: %v", errno)
	}
	if !slices.Contains(fake.CallLog(), "written "+meta) {
		t.Errorf("the index was not told of the restored _metadata: %v", fake.CallLog())
	}

	putErr := errors.New("copy failed")
	if err := e.RestoreMetadata(ctx, meta, func() error { return putErr }, func() { t.Error("undo after a failed put") }); !errors.Is(err, putErr) {
		t.Errorf("failed put: %v", err)
	}
	if errno := e.Errno(ctx, unlink); errno != 0 {
		t.Errorf("after a failed put the update is still pending: %v", errno)
	}

	fake.SetWrittenHook(func(string) error { return errors.New("index down") })
	undone := false
	if err := e.RestoreMetadata(ctx, meta, func() error { return nil }, func() { undone = true }); !errors.Is(err, guard.ErrNotRecorded) || !undone {
		t.Errorf("index failure: err %v, undo ran %v", err, undone)
	}
}
