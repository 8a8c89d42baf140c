package refindex

import (
	"context"
	"sort"
)

// ProtectedKind says what a key ProtectedKeys hands out is.
type ProtectedKind int

const (
	// ProtectedObject is an object a parseable live checkpoint or savepoint references.
	ProtectedObject ProtectedKind = iota + 1
	// ProtectedMetadata is a live checkpoint's or savepoint's `_metadata` itself (parseable or not: it
	// is live while it exists).
	ProtectedMetadata
	// ProtectedDirectory is a file-merging directory handle: everything below the key is referenced.
	ProtectedDirectory
)

// ProtectedKeys calls fn with every store key the index, as of its last committed sync, counts as
// protected by a live checkpoint: each distinct object a parseable live checkpoint references, each
// file-merging directory one names, and every live `_metadata`. Objects and directories come in key
// order, then the `_metadata` keys in key order. It reads one consistent view (a snapshot of one
// generation) and holds nothing in memory per key; it stops when fn returns false or ctx ends.
//
// It is what a second line of defence outside the mount (server-side holds) is built from: the set is
// exactly what Decide refuses to delete because of a reference, so what lies outside it is judged by
// Decide itself before a hold on it is released.
func (ix *Index) ProtectedKeys(ctx context.Context, fn func(key string, kind ProtectedKind) bool) error {
	v, err := ix.acquire()
	if err != nil {
		return err
	}
	defer v.release()
	stopped := false
	if _, err := scanReferenced(ctx, v.snap.txn, v.st, "", func(k []byte) bool {
		kind := ProtectedObject
		if v.st.dirRefs[string(k)] > 0 {
			kind = ProtectedDirectory
		}
		if !fn(string(k), kind) {
			stopped = true
			return false
		}
		return true
	}); err != nil || stopped {
		return err
	}
	metas := v.st.sorted
	if !sort.StringsAreSorted(metas) {
		metas = append([]string(nil), metas...)
		sort.Strings(metas)
	}
	for _, m := range metas {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !fn(m, ProtectedMetadata) {
			return nil
		}
	}
	return nil
}

// ProtectedVersion names the state of the protected set: it moves after every commit that changed
// which checkpoints are live (a put or a retirement), every pin change and every generation switch, so
// while it stays the same ProtectedKeys hands out the same keys. Take it before ProtectedKeys: it moves
// after the state it counts is installed, so the version taken is never newer than the keys read after
// it (at worst older: one reconciliation more). A second line of defence (s3hold) skips a
// reconciliation whose input has not changed.
func (ix *Index) ProtectedVersion() uint64 { return ix.protChanges.Load() }
