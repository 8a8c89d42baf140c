package refindex

import (
	"context"
	"errors"

	"github.com/ckguard/ckguard/refindex/store"
)

// GuardChecker adapts an *Index to fs/guard.Checker (the contract guarded filesystems code against).
// It lives here, not in fs/guard, because fs/guard imports this package.
type GuardChecker struct{ ix *Index }

// Checker returns the adapter of ix for guarded filesystems.
func Checker(ix *Index) *GuardChecker { return &GuardChecker{ix: ix} }

// Decide answers whether op may happen to path; internal errors come back as refusals.
func (c *GuardChecker) Decide(ctx context.Context, path string, op Op) Decision {
	return c.ix.Decide(ctx, path, op)
}

// Deleted records a removal done through the mount (retiring a checkpoint when it was a _metadata).
func (c *GuardChecker) Deleted(ctx context.Context, path string) error {
	return c.ix.NoteDeleted(ctx, path)
}

// Written indexes a `_metadata` written and closed through the mount before returning; other files
// need nothing (they are protected by references or by the grace period). A `_metadata` that cannot
// be parsed is recorded as such (every deletion is then refused) and is no error for the writer: a
// failing close would fail the Flink checkpoint, while the rename path accepts the same file.
func (c *GuardChecker) Written(ctx context.Context, path string) error {
	k, err := store.CleanKey(path)
	if err != nil || !store.IsMetadata(k) {
		return err
	}
	if err := c.ix.IndexMetadata(ctx, k); err != nil && !errors.Is(err, ErrUnparseable) {
		return err
	}
	return nil
}

// Renamed records a rename done through the mount.
func (c *GuardChecker) Renamed(ctx context.Context, from, to string) error {
	return c.ix.NoteRenamed(ctx, from, to)
}

// Explain reports a path's state and referencing checkpoints for the user.ckguard.* xattrs.
func (c *GuardChecker) Explain(ctx context.Context, path string) (string, []string, error) {
	return c.ix.Explain(ctx, path)
}

// NewChecker is Checker under the name the mount code uses.
func NewChecker(ix *Index) *GuardChecker { return Checker(ix) }
