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
	type job struct {
		meta string
		refs []ref
	}
	var jobs []job
	err = v.g.db.View(func(txn *badger.Txn) error {
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
			jobs = append(jobs, job{meta: k, refs: refs})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Each distinct object is stat'ed once, with bounded concurrency (network stores).
	var mu sync.Mutex
	exists := map[string]error{}
	var objs []string
	for _, j := range jobs {
		for _, r := range j.refs {
			if !r.Inside {
				res.OutsideSkipped++
				if ix.norm.IsExternal(r.Key) {
					res.ExternalSkipped++
				} else {
					res.UnmappedSkipped++
				}
				continue
			}
			if _, ok := exists[r.Key]; !ok {
				exists[r.Key] = nil
				objs = append(objs, r.Key)
			}
		}
	}
	res.Objects = len(objs)
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
		exists[o] = err
	})
	bar.Finish()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, j := range jobs {
		res.Checked++
		var b BrokenCheckpoint
		for _, r := range j.refs {
			if r.Inside && exists[r.Key] != nil {
				b.MissingCount++
				if len(b.Missing) < 1000 {
					b.Missing = append(b.Missing, r.Key)
				}
			}
		}
		if b.MissingCount > 0 {
			b.Metadata = j.meta
			res.Broken = append(res.Broken, b)
		}
	}
	if res.Broken, err = ix.dropRetired(ctx, res.Broken, res); err != nil {
		return nil, err
	}
	sort.Slice(res.Broken, func(a, b int) bool { return res.Broken[a].Metadata < res.Broken[b].Metadata })
	switch b := v.blocked(); {
	case b != "":
		res.Untrusted = b
	case unknownHides(v.unknown) != "":
		res.Untrusted = unknownHides(v.unknown)
	case res.UnmappedSkipped > 0:
		res.Untrusted = fmt.Sprintf("%d reference(s) could not be checked: %s", res.UnmappedSkipped, ix.unmappedBlock(v))
	case len(res.Unparseable) > 0:
		res.Untrusted = unparseableUntrusted(v.st)
	}
	res.OK = len(res.Broken) == 0 && res.Untrusted == ""
	return res, nil
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
