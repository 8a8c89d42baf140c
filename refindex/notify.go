package refindex

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
)

// ErrUnparseable is wrapped by IndexMetadata when the file was recorded as unparseable: the index
// then refuses what its class and writer call for (badmeta.go), so for the writer this is no failure.
var ErrUnparseable = errors.New("unparseable _metadata")

// IndexMetadata parses and indexes one `_metadata` synchronously (a guarded filesystem calls it when
// a `_metadata` was written and closed, or renamed into place, through the mount). A file that cannot
// be parsed is recorded as unparseable (see badmeta.go for what it refuses) and the parse error returned.
func (ix *Index) IndexMetadata(ctx context.Context, p string) error {
	key, err := store.CleanKey(p)
	if err != nil {
		return err
	}
	if !flinklayout.IsMetadata(key) {
		return fmt.Errorf("index %s: not a %s file", key, flinklayout.MetadataName)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	// A _metadata the mount just wrote that cannot be read is a live checkpoint the index does not know:
	// every decision is refused until a sync reads it, instead of only this writer hearing
	// of it.
	oi, err := ix.st.Stat(ctx, key)
	if errors.Is(err, fs.ErrNotExist) {
		// A second look before believing it: a server node that has not seen the mount's own write yet.
		oi, err = ix.st.Stat(ctx, key)
	}
	if errors.Is(err, fs.ErrNotExist) || err == nil && !store.IsCheckpointFile(oi) {
		// Gone, or no checkpoint: a folder, or a FIFO or symlink named _metadata, which is never opened
		// (a FIFO would block the read under the index's and the mount's locks).
		return ix.applyOrRebuild(ctx, change{removes: []string{key}})
	}
	if err != nil {
		return ix.failSync(fmt.Errorf("index %s, written through the mount: %w", key, err))
	}
	e, err := ix.readEntry(ctx, oi)
	if errors.Is(err, fs.ErrNotExist) {
		// Gone between the stat and the read, or a store that lists an object it then cannot find (a
		// cache, an eventually consistent read right after the mount's own write): only a second stat
		// that agrees makes it gone.
		if _, serr := ix.st.Stat(ctx, key); !errors.Is(serr, fs.ErrNotExist) {
			return ix.failSync(fmt.Errorf("index %s, written through the mount: the store reports it (%v) but cannot read it: %w", key, serr, err))
		}
		return ix.applyOrRebuild(ctx, change{removes: []string{key}})
	}
	if err != nil {
		return ix.failSync(fmt.Errorf("index %s, written through the mount: %w", key, err))
	}
	if err := ix.applyOrRebuild(ctx, change{puts: []*entry{e}}); err != nil {
		return err
	}
	if e.rec.Err != "" {
		return fmt.Errorf("index %s: %w (%s; refuses: %s) until it is fixed or removed: %s", key, ErrUnparseable, badClassText(e.rec), badScopeText(e.rec), e.rec.Err)
	}
	return nil
}

func (ix *Index) applyOrRebuild(ctx context.Context, ch change) error {
	err := ix.apply(ch)
	if errors.Is(err, errNeedRebuild) {
		return ix.rebuildLocked(ctx)
	}
	if errors.Is(err, errCommitFailed) {
		return ix.failSync(fmt.Errorf("write index: %w", err))
	}
	return err
}

// Deleted records that path (a file or a directory) was removed: deleting a `_metadata` retires
// its checkpoint at once, so the files only it referenced become deletable.
func (ix *Index) Deleted(ctx context.Context, p string) error {
	key, err := store.CleanKey(p)
	if err != nil {
		return err
	}
	// Most removals through a mount (rm -rf of old files) retire nothing: answer those without
	// waiting for a running sync's write. A _metadata indexed meanwhile from a file read before this
	// removal stays indexed until the next sync: the index then refuses more, never less.
	ix.mu.RLock()
	cur := ix.mu.state
	ix.mu.RUnlock()
	if cur.ckpts[key] == nil && len(cur.below(key)) == 0 {
		return nil
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.mu.RLock()
	cur = ix.mu.state
	ix.mu.RUnlock()
	var removes []string
	if cur.ckpts[key] != nil {
		removes = append(removes, key)
	}
	removes = append(removes, cur.below(key)...)
	if len(removes) == 0 {
		return nil
	}
	// Retire only what the store confirms gone, as a sync does. The mount's word is not enough: on S3 a
	// file a and the folder a/ can both exist, so deleting the file removes nothing below a/; a rmdir of an
	// S3 folder marker removes only the marker; and a _metadata may have been indexed below a folder after
	// its emptiness was checked. Retiring a checkpoint that still exists would make its
	// files deletable.
	gone, _, _, err := ix.confirmGone(ctx, cur, removes, nil)
	if err != nil {
		return fmt.Errorf("confirm that %s and the checkpoints below it are gone: %w", key, err)
	}
	if len(gone) == 0 {
		return nil
	}
	return ix.applyOrRebuild(ctx, change{removes: gone})
}

// Renamed records a rename done through the mount: checkpoints at or below from are retired and
// every `_metadata` at or below to is (re)indexed — e.g. Flink renaming its temporary metadata file
// to `_metadata`, or a savepoint directory moved (its relative references now resolve there).
func (ix *Index) Renamed(ctx context.Context, from, to string) error {
	fk, err := store.CleanKey(from)
	if err != nil {
		return err
	}
	tk, err := store.CleanKey(to)
	if err != nil {
		return err
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.mu.RLock()
	cur := ix.mu.state
	ix.mu.RUnlock()
	var removes []string
	for _, k := range []string{fk, tk} {
		if cur.ckpts[k] != nil {
			removes = append(removes, k)
		}
		removes = append(removes, cur.below(k)...)
	}
	// Errors leave checkpoints at the target unknown to the index: every decision is refused until a sync
	// reads them.
	fail := func(err error) error { return ix.failSync(fmt.Errorf("index rename %s → %s: %w", fk, tk, err)) }
	var infos []store.ObjectInfo
	oi, err := ix.st.Stat(ctx, tk)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fail(err)
	case oi.IsDir:
		err = ix.st.Walk(ctx, tk, func(o store.ObjectInfo) error {
			if store.IsCheckpointFile(o) {
				infos = append(infos, o)
			}
			return nil
		})
		if err != nil {
			return fail(err)
		}
	case store.IsCheckpointFile(oi):
		infos = append(infos, oi)
	}
	var puts []*entry
	var unread []string
	put := map[string]bool{}
	err = ix.readAll(ctx, infos, func(e *entry) error { puts = append(puts, e); put[e.rec.Key] = true; return nil },
		func(k string) { unread = append(unread, k) })
	if err != nil {
		return fail(err)
	}
	// Listed (stat'ed) but not found when read: gone meanwhile, or a store that cannot read what it just
	// reported (a cache, a node behind the mount's own write). Only a second stat that agrees makes it
	// gone.
	for _, k := range unread {
		if o, serr := ix.st.Stat(ctx, k); !errors.Is(serr, fs.ErrNotExist) && (serr != nil || store.IsCheckpointFile(o)) {
			return fail(fmt.Errorf("the store reports %s (%v) but cannot read it", k, serr))
		}
	}
	var rm []string
	for _, k := range removes {
		if !put[k] {
			rm = append(rm, k)
		}
	}
	// As for a deletion, only what the store confirms gone is retired (an S3 rename is a copy and a
	// delete, and a failed delete leaves the source).
	gone, _, _, err := ix.confirmGone(ctx, cur, rm, nil)
	if err != nil {
		return fail(err)
	}
	return ix.applyOrRebuild(ctx, change{puts: puts, removes: gone})
}
