package refindex

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
)

// fill reports in rep every (object, checkpoint) pair known missing now, per job, and those no earlier
// report named in rep.New; a pair whose checkpoint Flink reports it deletes itself goes to
// rep.Expected (rep.NewExpected) instead, with the reason, and counts in no job. began is the state
// the pass began with: the referencing checkpoints of each missing object are read from the reverse
// table now and count only as the same records as then.
func (lc *LossChecker) fill(ctx context.Context, rep *LossReport, began *memState) error {
	rep.Missing, rep.New = []LostReference{}, []LostReference{}
	rep.Expected, rep.NewExpected = []LostReference{}, []LostReference{}
	lost, refs, metaGone, err := lc.liveReferences(ctx, began)
	if err != nil {
		return err
	}
	flink := lc.ix.flinkFor(lc.ix.Policy())
	if flink != nil && lc.o.FlinkRefresh != nil && lc.newInJobFolder(lost, refs, metaGone, flink) {
		lc.o.FlinkRefresh(ctx)
		flink = lc.ix.flinkFor(lc.ix.Policy())
	}
	broken := map[string]bool{}
	seen := map[string]bool{}
	var fresh []int // indexes into rep.Missing of pairs no earlier report named
	for i, k := range lost {
		counted := map[string]bool{}
		for _, c := range refs[i] {
			if metaGone[c.Key] {
				continue
			}
			lr := LostReference{Path: k, Checkpoint: c.Key, Job: c.Job, Since: lc.since[k]}
			pair := k + "\x00" + c.Key
			if why := flink.expectedDeletion(c); why != "" {
				// Named apart from a loss: a pair reported lost before Flink's report came is
				// named again as expected (and as lost again if the report goes).
				seen[expectedPair+pair] = true
				lr.Expected = why
				rep.Expected = append(rep.Expected, lr)
				if !lc.reported[expectedPair+pair] {
					rep.NewExpected = append(rep.NewExpected, lr)
				}
				continue
			}
			seen[pair] = true
			rep.Missing = append(rep.Missing, lr)
			j := rep.Jobs[c.Job]
			if !broken[c.Key] {
				broken[c.Key] = true
				j.BrokenCheckpoints++
			}
			if !counted[c.Job] {
				counted[c.Job] = true
				j.MissingObjects++
			}
			rep.Jobs[c.Job] = j
			if !lc.reported[pair] {
				fresh = append(fresh, len(rep.Missing)-1)
			}
		}
	}
	if err := lc.lookQuarantine(ctx, rep, fresh); err != nil {
		return err
	}
	for _, i := range fresh {
		rep.New = append(rep.New, rep.Missing[i])
	}
	for p := range lc.reported {
		if !seen[p] {
			delete(lc.reported, p) // back, or no longer referenced: a new loss is reported again
		}
	}
	for p := range seen {
		lc.reported[p] = true
	}
	return nil
}

// expectedPair prefixes the reported entries of expected pairs.
const expectedPair = "expected\x00"

// newInJobFolder reports whether a pair no report named yet belongs to a checkpoint in a folder
// named by a job id while the REST facts were taken before the pass that found it missing.
func (lc *LossChecker) newInJobFolder(lost []string, refs [][]*checkpointRecord, metaGone map[string]bool, f *flinkFacts) bool {
	for i, k := range lost {
		if !f.at.Before(lc.since[k]) {
			continue
		}
		for _, c := range refs[i] {
			pair := k + "\x00" + c.Key
			if metaGone[c.Key] || c.Kind != "checkpoint" || !forstJobID.MatchString(path.Base(c.Job)) || lc.reported[pair] || lc.reported[expectedPair+pair] {
				continue
			}
			return true
		}
	}
	return false
}

// liveReferences reads, for every key known missing (sorted), the checkpoints that reference it and
// are still the same live records as when the pass began, and which of those have lost their
// _metadata too by now.
func (lc *LossChecker) liveReferences(ctx context.Context, began *memState) (lost []string, refs [][]*checkpointRecord, metaGone map[string]bool, err error) {
	ix := lc.ix
	// A loss counts only for a checkpoint still live as the same record after the stats.
	v, err := ix.acquire()
	if err != nil {
		return nil, nil, nil, err
	}
	defer v.release()
	lost = []string{}
	for k := range lc.missing {
		lost = append(lost, k)
	}
	sort.Strings(lost)
	refs = make([][]*checkpointRecord, len(lost))
	for i, k := range lost {
		for _, m := range referencingMetas(v.snap.txn, k) {
			c := began.ckpts[m]
			if c == nil || c.Err != "" || v.st.ckpts[m] != c {
				continue
			}
			refs[i] = append(refs[i], c)
		}
	}
	// Flink deletes a subsumed checkpoint's `_metadata` with its files (since 1.15 at once, in no
	// order): a checkpoint whose `_metadata` is gone from the store by now is being retired (the
	// next sync does it), not broken.
	metaGone = map[string]bool{}
	for _, cs := range refs {
		for _, c := range cs {
			if _, done := metaGone[c.Key]; done {
				continue
			}
			_, err := ix.st.Stat(ctx, c.Key)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, nil, nil, fmt.Errorf("loss check: stat %s: %w", c.Key, err)
			}
			metaGone[c.Key] = err != nil
		}
	}
	return lost, refs, metaGone, nil
}

// lookQuarantine asks the quarantine about the missing objects: a chunk's report only about what it
// names first (fresh: the WARN line and the audit record say how to restore it); the pass's own
// report about every missing object, once per path.
func (lc *LossChecker) lookQuarantine(ctx context.Context, rep *LossReport, fresh []int) error {
	if lc.o.Quarantine == nil {
		return nil
	}
	look := make([]int, 0, len(rep.Missing))
	if rep.Partial {
		look = append(look, fresh...)
	} else {
		for i := range rep.Missing {
			look = append(look, i)
		}
	}
	type found struct {
		q  QuarantinedObject
		ok bool
	}
	seenQ := map[string]found{}
	for _, i := range look {
		p := rep.Missing[i].Path
		f, done := seenQ[p]
		if !done {
			q, ok, err := lc.o.Quarantine.FindQuarantined(ctx, p)
			if err != nil {
				return fmt.Errorf("loss check: look %s up in quarantine: %w", p, err)
			}
			f = found{q, ok}
			seenQ[p] = f
		}
		if f.ok {
			q := f.q
			rep.Missing[i].Quarantine = &q
		}
	}
	return nil
}
