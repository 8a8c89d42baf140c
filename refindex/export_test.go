package refindex

import (
	"context"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// WithValueThreshold opens the index's generations with badger's ValueThreshold n (1 KiB: an index as
// written before values went inline, its forward references in the value log).
func WithValueThreshold(n int64) Option { return func(o *options) { o.valueThresh = n } }

// SetReadWholeMax lowers the size up to which a _metadata is read whole (tests of the streaming
// path); call the returned function to restore it.
func SetReadWholeMax(n int64) (restore func()) {
	old := readWholeMax
	readWholeMax = n
	return func() { readWholeMax = old }
}

// FilterReady reports whether the current generation's reference filter is built (a decision starts
// the build of an opened generation's filter in the background).
func FilterReady(ix *Index) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	f := ix.mu.cur.filt.Load()
	return f != nil && f.ready.Load()
}

// CheckFilter compares the current generation's reference filter with the reverse table: every slot
// must hold exactly the number of reverse entries hashing to it (the caller holds no view, so no
// decrement is pending). A lower count would let Decide allow a referenced file.
func CheckFilter(ix *Index) error {
	v, err := ix.acquire()
	if err != nil {
		return err
	}
	f := v.filt
	if f != nil && f.broken.Load() {
		v.release()
		return fmt.Errorf("reference filter disabled: a decrement found a zero count (under-count)")
	}
	if f == nil || !f.ready.Load() {
		v.release()
		return nil
	}
	want := map[uint64]uint32{}
	err = v.g.db.View(func(txn *badger.Txn) error {
		prefix := []byte(tblReverse)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			obj, _ := splitPair(it.Item().Key(), tblReverse)
			want[f.slot(f.hash(obj))]++
		}
		return nil
	})
	v.release() // before reading the slots: finishing snapshots applies their decrements
	if err != nil {
		return err
	}
	for i := uint64(0); i < f.n; i++ {
		got, w := f.countAt(i), want[i]
		if got == filterSaturated {
			continue // saturated: counts no more, "maybe referenced" for good
		}
		if got < w {
			return fmt.Errorf("reference filter slot %d counts %d reverse entries, the index holds %d: under-count", i, got, w)
		}
		if got != w {
			return fmt.Errorf("reference filter slot %d counts %d reverse entries, the index holds %d", i, got, w)
		}
	}
	return nil
}

// BreakFilter makes apply skip the filter increments (a test that the model test catches it).
func BreakFilter() (restore func()) {
	testSkipFilterInc = true
	return func() { testSkipFilterInc = false }
}

// DecideExact is Decide without the reference filter (the exact badger scan for every object).
func DecideExact(ix *Index, ctx context.Context, p string, op verdict.Op) verdict.Decision {
	key, err := store.CleanKey(p)
	if err != nil {
		return refuse(verdict.ReasonStoreError, err.Error())
	}
	v, err := ix.acquire()
	if err != nil {
		return refuse(verdict.ReasonStoreError, err.Error())
	}
	defer v.release()
	v.filt = nil
	return ix.decide(ctx, v, key, op, maxNamed, nil)
}

// ClockState exposes clockState to tests.
type ClockState struct{ c clockState }

// Add records a reading at now, expires readings older than hold and returns the correction.
func (s *ClockState) Add(behind time.Duration, now time.Time, hold time.Duration) time.Duration {
	s.c.add(behind, now)
	s.c.expire(now, hold)
	return s.c.behind()
}

// WithTxnWrites makes every apply commit after n writes, so a small change spans several transactions
// (tests of rolling.go).
func WithTxnWrites(n int) Option { return func(o *options) { o.txnWrites = n } }

// SetLossClock replaces a loss checker's time source (the times of its reports and chunks).
func SetLossClock(lc *LossChecker, now func() time.Time) { lc.now = now }

// SetEvidenceMaxKeys lowers the keys a ListingEvidence holds and records at most (tests of the bound).
func SetEvidenceMaxKeys(e *ListingEvidence, n int64) { e.maxKeys = n }

// EvidenceKeys is the keys a ListingEvidence counts as held or being recorded.
func EvidenceKeys(e *ListingEvidence) int64 { return e.keys.Load() }

// TakeEvidence is the loss check's hook for a unit of dir's keys (sorted): the keys the listing did not
// show, and whether a listing was taken.
func TakeEvidence(e *ListingEvidence, dir string, keys []string) ([]string, bool) {
	return e.take(lossUnit{dir: dir, keys: keys, list: len(keys) > 1})
}

// SetLossSegment sets the most keys a pass of lc plans before it checks them.
func SetLossSegment(lc *LossChecker, keys int) { lc.seg = keys }

// LossMaxHeld returns the most referenced keys the last pass of lc held at once.
func LossMaxHeld(lc *LossChecker) int { return lc.maxHeld }

// LossCounted returns the keys the last pass of lc fed to the count of its rotation.
func LossCounted(lc *LossChecker) int { return lc.counted }

// SetMaxUnknownSubtrees sets how many unknown subtrees an index keeps before collapsing them into
// their folders; restore puts the default back.
func SetMaxUnknownSubtrees(n int) (restore func()) {
	old := maxUnknownSubtrees
	maxUnknownSubtrees = n
	return func() { maxUnknownSubtrees = old }
}
