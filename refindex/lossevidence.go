package refindex

import (
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ListingEvidence holds the mount's own complete folder listings (every page of a folder, in order,
// without an error: a readdir through an S3 mount) for the loss check. A listing is evidence that the
// keys it showed existed in the folder as of the time its first page was requested: a deletion before
// that request would have kept the key out of it (S3 lists with strong consistency). While the mount's
// own traffic slows the check down (a find), the check takes a unit (a folder's referenced objects, or
// one object) from a listing instead of sending requests of its own when the listing is newer than the
// unit's last check and at most MaxAge old; a referenced object the listing did not show is stat'ed
// and reported as usual, so evidence only ever saves requests for objects seen present.
//
// Invariants:
//   - A unit taken from a listing counts as checked at the listing's time, not at the pass's: the gap
//     between two checks of a unit (Stats.MaxGap), from which the daemon's bound follows, includes the
//     listing's age, so the advertised bound never assumes a fresher check than the store answered.
//   - Memory: listings older than MaxAge are dropped (at most the listings of the last MaxAge are held,
//     8 bytes per key), and the keys held and being recorded together never exceed evidenceMaxKeys: a
//     listing that would go beyond is abandoned (no evidence, the check sends its own requests), so
//     readdirs of huge folders by any local user cannot grow the daemon. The per-unit check times are
//     one map entry per unit, dropped after evidenceForget of no check.
//   - Keys are held as 64-bit hashes with a seed of their own per listing: a collision (an absent key
//     taken for present) has odds of about keys/2^64 and does not repeat in the next listing, which is
//     at most MaxAge later or the unit is checked by a request of its own.
type ListingEvidence struct {
	maxAge time.Duration
	now    func() time.Time

	// keys counts the hashes held and being recorded (at most maxKeys: evidenceMaxKeys).
	keys    atomic.Int64
	maxKeys int64

	mu      sync.Mutex
	dirs    map[string]*folderListing // dir -> newest complete listing of it
	checked map[uint64]time.Time      // hash of a unit's id -> its last check (a request, or a listing's time)
	unitKey maphash.Seed
	pruned  time.Time // the last drop of aged listings
	// prunedChecked is the last drop of check times of long unchecked units.
	prunedChecked time.Time
	st            EvidenceStats
}

// EvidenceStats is what the loss check took from listings since the last TakeStats.
type EvidenceStats struct {
	// Units and Objects are the units, and their referenced objects, checked from a listing (no request).
	Units   int
	Objects int
	// MaxAge is the oldest listing taken, at the time it was taken.
	MaxAge time.Duration
	// MaxGap is the longest time between two checks of one unit (request or listing; a unit checked
	// for the first time is not counted): a deletion right after a check shows at most this plus the
	// time to the report of the chunk that holds the next check.
	MaxGap time.Duration
	// Listings is how many complete listings the mount handed over.
	Listings int
}

// folderListing is one complete listing of a folder: the hashes, sorted, of what it showed.
type folderListing struct {
	at   time.Time
	seed maphash.Seed
	keys []uint64
}

// evidenceForget is how long a unit's check time is kept without a check (units no live checkpoint
// references any more): far above any revisit, so a live unit never loses its time.
const evidenceForget = time.Hour

// evidenceMaxKeys bounds the keys of all listings held or being recorded: 32 MiB of hashes, far above
// what a find lists in MaxAge (an eighth of a sync interval) at 1,000,000 objects.
const evidenceMaxKeys = 4 << 20

// NewListingEvidence returns an empty evidence store: listings older than maxAge are not taken (0: no
// listing is, the store only measures the gaps between checks). now is its clock (nil: time.Now).
func NewListingEvidence(maxAge time.Duration, now func() time.Time) *ListingEvidence {
	if now == nil {
		now = time.Now
	}
	return &ListingEvidence{maxAge: maxAge, now: now, maxKeys: evidenceMaxKeys, dirs: map[string]*folderListing{},
		checked: map[uint64]time.Time{}, unitKey: maphash.MakeSeed()}
}

// SetMaxAge sets the age past which a listing is not taken (the daemon: an eighth of the sync interval).
func (e *ListingEvidence) SetMaxAge(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.maxAge = d
}

// BeginListing starts a folder's listing whose first page was requested at started: add takes every
// key and subfolder (as the store names them: "dir/name") of every page in order; end(true) hands the
// listing over once the last page was added, end(false) drops a listing that failed or stopped (its
// keys no longer count against evidenceMaxKeys). Only the first end counts.
func (e *ListingEvidence) BeginListing(dir string, started time.Time) (add func(key string), end func(complete bool)) {
	l := &folderListing{at: started, seed: maphash.MakeSeed()}
	dead := false
	add = func(key string) {
		if dead {
			return
		}
		if e.keys.Add(1) > e.maxKeys {
			dead = true
			e.keys.Add(-int64(len(l.keys)) - 1)
			l.keys = nil
			return
		}
		l.keys = append(l.keys, maphash.String(l.seed, key))
	}
	end = func(complete bool) {
		if dead {
			return
		}
		dead = true
		if !complete {
			e.keys.Add(-int64(len(l.keys)))
			l.keys = nil
			return
		}
		slices.Sort(l.keys)
		e.mu.Lock()
		defer e.mu.Unlock()
		e.st.Listings++
		if old := e.dirs[dir]; old == nil || old.at.Before(l.at) {
			if old != nil {
				e.keys.Add(-int64(len(old.keys)))
			}
			e.dirs[dir] = l
		} else {
			e.keys.Add(-int64(len(l.keys)))
		}
		e.pruneLocked(e.now())
	}
	return add, end
}

// pruneLocked drops the listings too old to be taken, at most once per half MaxAge, and the check times
// of units long unchecked, at most once per quarter of evidenceForget.
func (e *ListingEvidence) pruneLocked(now time.Time) {
	if now.Sub(e.pruned) < e.maxAge/2 {
		return
	}
	e.pruned = now
	for d, l := range e.dirs {
		if now.Sub(l.at) > e.maxAge {
			e.keys.Add(-int64(len(l.keys)))
			delete(e.dirs, d)
		}
	}
	if now.Sub(e.prunedChecked) < evidenceForget/4 {
		return // one entry per unit: a walk over them, under the lock a readdir's hand-over takes, only now and then
	}
	e.prunedChecked = now
	for u, t := range e.checked {
		if now.Sub(t) > evidenceForget {
			delete(e.checked, u)
		}
	}
}

// take is the loss check's hook before it checks u: when a listing of u's folder is newer than u's last
// check and at most MaxAge old, it returns the keys of u the listing did not show (to be stat'ed) and
// ok; u then counts as checked at the listing's time. Otherwise it records u as checked now (by the
// requests the caller sends) and returns ok false.
func (e *ListingEvidence) take(u lossUnit) (unseen []string, ok bool) {
	now := e.now()
	id := maphash.String(e.unitKey, u.id())
	e.mu.Lock()
	defer e.mu.Unlock()
	last, known := e.checked[id]
	at := now
	l := e.dirs[u.dir]
	if l != nil && now.Sub(l.at) <= e.maxAge && (!known || l.at.After(last)) {
		at, ok = l.at, true
		for _, k := range u.keys {
			if _, found := slices.BinarySearch(l.keys, maphash.String(l.seed, k)); !found {
				unseen = append(unseen, k)
			}
		}
		e.st.Units++
		e.st.Objects += len(u.keys) - len(unseen)
		e.st.MaxAge = max(e.st.MaxAge, now.Sub(l.at))
	}
	if known {
		e.st.MaxGap = max(e.st.MaxGap, at.Sub(last))
	}
	e.checked[id] = at
	return unseen, ok
}

// TakeStats returns what the loss check took from listings since the last call, and starts anew.
func (e *ListingEvidence) TakeStats() EvidenceStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.st
	e.st = EvidenceStats{}
	return st
}
