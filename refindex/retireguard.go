package refindex

import (
	"context"
	"sync/atomic"
)

// RetireGuard is asked by a sync about the `_metadata` it found gone from the store, before they are
// retired: gone are their keys, incoming the `_metadata` this sync found that the index did not hold (a newer
// checkpoint of the same job arriving with the retirement is Flink subsuming the old one). It may
// bring some back (a server-side hold's delete marker removed: s3hold); the sync then lists them
// again and keeps what it finds (relistAfterRetire), so a guard that did nothing changes nothing. It
// runs in the sync, outside every lock of the index and of the enforcer; it must not call Sync.
type RetireGuard func(ctx context.Context, gone, incoming []string)

// retireGuard holds the guard set by SetRetireGuard.
type retireGuard struct{ p atomic.Pointer[RetireGuard] }

// SetRetireGuard sets (nil: clears) the guard asked before retirements by later syncs.
func (ix *Index) SetRetireGuard(g RetireGuard) {
	if g == nil {
		ix.retire.p.Store(nil)
		return
	}
	ix.retire.p.Store(&g)
}

// guardRetire asks the guard, if any, about the keys to retire.
func (ix *Index) guardRetire(ctx context.Context, gone []string, incoming []string) {
	if g := ix.retire.p.Load(); g != nil && len(gone) > 0 {
		(*g)(ctx, gone, incoming)
	}
}
