package refindex

import (
	"context"
	"errors"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
)

// Written indexes a `_metadata` written and closed through the mount before returning; other files
// need nothing (they are protected by references or by the grace period). A `_metadata` that cannot
// be parsed is recorded as such (every deletion is then refused) and is no error for the writer: a
// failing close would fail the Flink checkpoint, while the rename path accepts the same file.
// With Decide, Deleted, Renamed and Explain it makes *Index the Checker a guarded filesystem asks.
func (ix *Index) Written(ctx context.Context, path string) error {
	k, err := store.CleanKey(path)
	if err != nil || !flinklayout.IsMetadata(k) {
		return err
	}
	if err := ix.IndexMetadata(ctx, k); err != nil && !errors.Is(err, ErrUnparseable) {
		return err
	}
	return nil
}
