package refindex

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"sync"

	badger "github.com/dgraph-io/badger/v4"
)

// Verify checks, for every live checkpoint, that every object it references exists in the store.
// Unparseable _metadata count as broken.
func (ix *Index) Verify(ctx context.Context) (*VerifyResult, error) {
	defer ix.beginWork()()
	v, err := ix.acquire()
	if err != nil {
		return nil, err
	}
	defer v.release()
	res := &VerifyResult{Broken: []BrokenCheckpoint{}}
	checks, err := verifyReferences(v, res)
	if err != nil {
		return nil, err
	}
	objs := ix.verifyObjects(checks, res)
	missing, err := ix.statVerifyObjects(ctx, objs)
	if err != nil {
		return nil, err
	}
	for _, c := range checks {
		res.Checked++
		if b := c.broken(missing); b.MissingCount > 0 {
			res.Broken = append(res.Broken, b)
		}
	}
	if res.Broken, err = ix.dropRetired(ctx, res.Broken, res); err != nil {
		return nil, err
	}
	sort.Slice(res.Broken, func(a, b int) bool { return res.Broken[a].Metadata < res.Broken[b].Metadata })
	res.Untrusted = ix.verifyUntrusted(v, res)
	res.OK = len(res.Broken) == 0 && res.Untrusted == ""
	return res, nil
}

// verifyCheck is one parsed live _metadata and its references.
type verifyCheck struct {
	meta string
	refs []ref
}

// broken is the checkpoint's result: its references inside the store that missing names (at most
// 1,000 listed, all counted); MissingCount 0 when it has them all.
func (c verifyCheck) broken(missing map[string]bool) BrokenCheckpoint {
	var b BrokenCheckpoint
	for _, r := range c.refs {
		if r.Inside && missing[r.Key] {
			b.MissingCount++
			if len(b.Missing) < 1000 {
				b.Missing = append(b.Missing, r.Key)
			}
		}
	}
	if b.MissingCount > 0 {
		b.Metadata = c.meta
	}
	return b
}

// verifyReferences reads, in one view of the index, the references of every live _metadata in key
// order; an unparseable one goes to res.Unparseable instead.
func verifyReferences(v *view, res *VerifyResult) ([]verifyCheck, error) {
	var checks []verifyCheck
	err := v.g.db.View(func(txn *badger.Txn) error {
		for _, k := range v.st.sorted {
			c := v.st.ckpts[k]
			if c.Err != "" {
				res.Unparseable = append(res.Unparseable, BrokenCheckpoint{Metadata: k, Error: c.Err, Class: c.Bad, Scope: badScope(c)})
				continue
			}
			refs, err := readRefs(txn, k)
			if err != nil {
				return err
			}
			checks = append(checks, verifyCheck{meta: k, refs: refs})
		}
		return nil
	})
	return checks, err
}

// verifyObjects is every distinct object inside the store the checks reference, each once; the
// references outside it are counted in res (external or unmapped), not checked.
func (ix *Index) verifyObjects(checks []verifyCheck, res *VerifyResult) []string {
	seen := map[string]bool{}
	var objs []string
	for _, c := range checks {
		for _, r := range c.refs {
			if !r.Inside {
				res.OutsideSkipped++
				if ix.norm.IsExternal(r.Key) {
					res.ExternalSkipped++
				} else {
					res.UnmappedSkipped++
				}
				continue
			}
			if !seen[r.Key] {
				seen[r.Key] = true
				objs = append(objs, r.Key)
			}
		}
	}
	res.Objects = len(objs)
	return objs
}

// statVerifyObjects stats each object once, with bounded concurrency (network stores), and returns
// the missing ones. Any error other than not-found fails the verify: an object that could not be
// checked is not known to exist.
func (ix *Index) statVerifyObjects(ctx context.Context, objs []string) (map[string]bool, error) {
	var mu sync.Mutex
	missing := map[string]bool{}
	bar := ix.newBar(len(objs), "verifying")
	var firstErr error
	stat := ix.freshStat()
	ix.inParallel(ctx, len(objs), bar, func(i int) {
		o := objs[i]
		_, err := stat(ctx, o)
		mu.Lock()
		defer mu.Unlock()
		if err != nil && !errors.Is(err, fs.ErrNotExist) && firstErr == nil {
			firstErr = fmt.Errorf("verify: stat %s: %w", o, err)
		}
		if err != nil {
			missing[o] = true
		}
	})
	bar.Finish()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return missing, nil
}

// verifyUntrusted says why a verify without broken checkpoints still does not prove the store whole
// (the first reason of: a blocked index, unknown subtrees that hide references, unchecked unmapped
// references, unparseable _metadata), or "".
func (ix *Index) verifyUntrusted(v *view, res *VerifyResult) string {
	switch b := v.blocked(); {
	case b != "":
		return b
	case unknownHides(v.unknown) != "":
		return unknownHides(v.unknown)
	case res.UnmappedSkipped > 0:
		return fmt.Sprintf("%d reference(s) could not be checked: %s", res.UnmappedSkipped, ix.unmappedBlock(v))
	case len(res.Unparseable) > 0:
		return unparseableUntrusted(v.st)
	}
	return ""
}

// dropRetired takes out of broken the checkpoints whose `_metadata` is gone from the store by now: Flink
// deletes a subsumed checkpoint's `_metadata` first and its files after, so a verify that runs between
// two syncs (the index still listing the checkpoint) finds files missing of a checkpoint that is no longer
// live. Each is stat'ed again after its files were; those gone are counted and named in
// RetiredDuringCheck, never silently dropped. An unparseable `_metadata` (no files checked) stays.
func (ix *Index) dropRetired(ctx context.Context, broken []BrokenCheckpoint, res *VerifyResult) ([]BrokenCheckpoint, error) {
	kept := broken[:0]
	stat := ix.freshStat()
	for _, b := range broken {
		if b.Error != "" {
			kept = append(kept, b)
			continue
		}
		_, err := stat(ctx, b.Metadata)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			res.RetiredDuringCheck = append(res.RetiredDuringCheck, b.Metadata)
		case err != nil:
			return nil, fmt.Errorf("verify: stat %s again: %w", b.Metadata, err)
		default:
			kept = append(kept, b)
		}
	}
	return kept, nil
}

// unparseableUntrusted says why a verify is not green while bad `_metadata` exist.
func unparseableUntrusted(st *memState) string {
	u := st.unparseable[0]
	more := ""
	if n := len(st.unparseable); n > 1 {
		more = fmt.Sprintf(" (and %d more)", n-1)
	}
	return fmt.Sprintf("%d _metadata cannot be parsed, e.g. %s (%s)%s; nothing of them was checked: remove them (a damaged one is no checkpoint Flink can restore from) or replace them by the real checkpoint's, then run `ckguard index sync`", len(st.unparseable), u, badClassText(st.ckpts[u]), more)
}
