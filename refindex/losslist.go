package refindex

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
)

// DirLister is implemented by stores where one listing request answers for many objects of a folder
// (S3: up to 1,000 keys per ListObjectsV2 page, against one HEAD request per object). The loss check
// then lists the folders that hold several referenced objects instead of stating each.
type DirLister interface {
	// ListDirRange calls fn, in key order, with the key of files and subfolders directly in folder
	// dir ("" = the root), from at most `from` on, until the listing has passed `to` or the folder ends. It stops
	// after maxRequests requests with more set (the rest of the range is not listed). It calls wait (when
	// not nil) before each request and stops with its error, and the release wait returned once that
	// request has ended. It returns the requests it made.
	ListDirRange(ctx context.Context, dir, from, to string, maxRequests int, wait func(context.Context) (release func(), err error), fn func(key string)) (requests int, more bool, err error)
}

// listPage is the keys one listing request answers for (S3's ListObjectsV2 page), for cost estimates.
const listPage = 1000

// DefaultLossParallel is the loss check's default bound on requests in flight: at 20 ms per request
// (S3) 16 give about 800 requests a second, a small share of what one S3 prefix serves (5,500 GET/HEAD
// a second).
const DefaultLossParallel = 16

// minListKeys is the fewest referenced objects in one folder for which the check lists the folder:
// one request for up to listPage keys against one request per object.
const minListKeys = 2

// lossUnit is what one worker checks: a folder's referenced objects by a listing (list), or one
// object by a stat.
type lossUnit struct {
	dir  string
	keys []string // sorted
	list bool
}

// cost is the requests the unit is expected to take (a listing may take more when the folder holds
// many unreferenced files between the referenced ones; it is cut off at one stat per object).
func (u lossUnit) cost() int {
	if u.list {
		return (len(u.keys) + listPage - 1) / listPage
	}
	return len(u.keys)
}

// planUnits groups keys by folder into listings (canList, and enough keys in the folder) or stats. A
// folder's listing is split into units of at most listPage referenced keys, each listed from its own
// first key: the pages of one large folder (a job's shared/ of a million SSTs) are listed in parallel,
// not one after the other behind continuation tokens, so a pass's duration is its requests over the
// parallelism (or the pacer's rate), whatever the folders' sizes.
func planUnits(keys []string, canList bool) []lossUnit {
	byDir := map[string][]string{}
	for _, k := range keys {
		d := path.Dir(k)
		if d == "." {
			d = ""
		}
		byDir[d] = append(byDir[d], k)
	}
	units := make([]lossUnit, 0, len(byDir))
	for d, ks := range byDir {
		for canList && len(ks) >= minListKeys {
			n := min(len(ks), listPage)
			if len(ks)-n < minListKeys {
				n = len(ks) // a short tail rides with the last chunk rather than costing stats
			}
			units = append(units, lossUnit{dir: d, keys: ks[:n:n], list: true})
			ks = ks[n:]
		}
		for _, k := range ks {
			units = append(units, lossUnit{dir: d, keys: []string{k}})
		}
	}
	sort.Slice(units, func(i, j int) bool { return units[i].id() < units[j].id() })
	return units
}

// id orders units and names the rotation's cursor: the folder, then its first key.
func (u lossUnit) id() string { return u.dir + "\x00" + u.keys[0] }

// roundCost is the requests a full pass over units takes.
func roundCost(units []lossUnit) int {
	n := 0
	for _, u := range units {
		n += u.cost()
	}
	return n
}

// requestTimes adds up how long a pass's requests were under way, each from its pacer slot to its
// answer: their mean is the store's latency as the pass saw it (LossReport.Latency).
type requestTimes struct{ n, total atomic.Int64 }

func (r *requestTimes) add(d time.Duration) {
	if r != nil {
		r.n.Add(1)
		r.total.Add(int64(d))
	}
}

// mean is the mean time of the requests added (0: none).
func (r *requestTimes) mean() time.Duration {
	n := r.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(r.total.Load() / n)
}

// checkUnits checks every unit, and every key of single as a stat of its own, at most cap(sem)
// requests in flight (sem is shared by the segments of a pass that are checked at once). It returns the keys the store does not have and the requests made. A key a listing did
// not show is stat'ed before it counts as gone (a listing is the cheap look, a stat the proof). Any
// error other than not-found fails the pass: an object that could not be checked is not known there.
// With ev, a unit of units the mount listed lately is taken from that listing (ListingEvidence.take:
// no request, only the objects the listing did not show are stat'ed); the known losses of single are
// stat'ed (they are no folder's unit).
func (ix *Index) checkUnits(ctx context.Context, units []lossUnit, single []string, sem chan struct{}, pacer Pacer, ev *ListingEvidence, rt *requestTimes) (map[string]bool, int, error) {
	lister, _ := ix.st.(DirLister)
	uc := &unitChecker{lister: lister, stat: ix.freshStat(), pacer: pacer, ev: ev, rt: rt, gone: map[string]bool{}}
	planned := len(units)
	for _, k := range single {
		units = append(units, lossUnit{keys: []string{k}})
	}
	var wg sync.WaitGroup
	for i, u := range units {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			uc.check(ctx, u, i < planned)
		}()
	}
	wg.Wait()
	if uc.firstErr != nil {
		return nil, uc.requests, uc.firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, uc.requests, err
	}
	return uc.gone, uc.requests, nil
}

// unitChecker is one checkUnits call's shared state: its units are checked concurrently, and what
// they find (gone, requests, the first error) is added under mu.
type unitChecker struct {
	lister DirLister // nil: the store lists no folder ranges, every key is stat'ed
	stat   func(context.Context, string) (store.ObjectInfo, error)
	pacer  Pacer
	ev     *ListingEvidence
	rt     *requestTimes

	mu       sync.Mutex
	gone     map[string]bool
	requests int
	firstErr error
}

// wait waits for the pacer's slot (when there is a pacer); the release it returns ends the slot and
// times the request from the slot to its answer, once however often it is called.
func (uc *unitChecker) wait(ctx context.Context) (func(), error) {
	release := func() {}
	if uc.pacer != nil {
		r, err := uc.pacer.Wait(ctx)
		if err != nil {
			return nil, err
		}
		release = r
	}
	t0 := time.Now()
	var once sync.Once
	return func() {
		once.Do(func() { uc.rt.add(time.Since(t0)) })
		release()
	}, nil
}

// fail keeps the first error of the checks.
func (uc *unitChecker) fail(err error) {
	uc.mu.Lock()
	defer uc.mu.Unlock()
	if uc.firstErr == nil {
		uc.firstErr = err
	}
}

// check checks one unit (planned: one of the units, not of single): the keys a recent listing of the
// mount (ev) or a listing of the unit's folder did not show are stat'ed, and those the store does not
// have are added to gone. On an error, or when ctx ends, nothing of the unit is added.
func (uc *unitChecker) check(ctx context.Context, u lossUnit, planned bool) {
	toStat := u.keys
	n := 0
	fromListing := false
	if uc.ev != nil && planned {
		toStat, fromListing = uc.ev.take(u)
		if !fromListing {
			toStat = u.keys
		}
	}
	if u.list && uc.lister != nil && !fromListing {
		var r int
		var ok bool
		toStat, r, ok = uc.notListed(ctx, u)
		n += r
		if !ok {
			return
		}
	}
	lost, r, ok := uc.statKeys(ctx, toStat)
	n += r
	if !ok {
		return
	}
	uc.mu.Lock()
	defer uc.mu.Unlock()
	uc.requests += n
	for _, k := range lost {
		uc.gone[k] = true
	}
}

// notListed lists the unit's folder over its key range and returns the unit's keys the listing did
// not show (missing, or past a listing that was cut off) and the requests made; ok false after an
// error (recorded by fail).
func (uc *unitChecker) notListed(ctx context.Context, u lossUnit) (toStat []string, requests int, ok bool) {
	seen := make(map[string]bool, len(u.keys))
	// Cut off at one request per object: never dearer than stating each.
	r, _, err := uc.lister.ListDirRange(ctx, u.dir, u.keys[0], u.keys[len(u.keys)-1], len(u.keys), uc.wait, func(k string) { seen[k] = true })
	if err != nil {
		uc.fail(fmt.Errorf("loss check: list %s/: %w", u.dir, err))
		return nil, r, false
	}
	toStat = []string{}
	for _, k := range u.keys {
		if !seen[k] {
			toStat = append(toStat, k)
		}
	}
	return toStat, r, true
}

// statKeys stats each key, paced, and returns those not found and the requests made; ok false after
// an error other than not-found (recorded by fail) or when ctx ends.
func (uc *unitChecker) statKeys(ctx context.Context, keys []string) (lost []string, requests int, ok bool) {
	for _, k := range keys {
		if ctx.Err() != nil {
			return nil, requests, false
		}
		release, err := uc.wait(ctx)
		if err != nil {
			uc.fail(fmt.Errorf("loss check: stat %s: %w", k, err))
			return nil, requests, false
		}
		_, err = uc.stat(ctx, k)
		release()
		requests++
		switch {
		case err == nil:
		case errors.Is(err, fs.ErrNotExist):
			lost = append(lost, k)
		default:
			uc.fail(fmt.Errorf("loss check: stat %s: %w", k, err))
			return nil, requests, false
		}
	}
	return lost, requests, true
}

// freshStat is the store's stat that never answers from a cache (store.FreshStater): verify, the
// drill and the loss check judge whether an object exists, and a cached "exists" would hide a
// deletion made beside the mount.
func (ix *Index) freshStat() func(context.Context, string) (store.ObjectInfo, error) {
	if f, ok := ix.st.(store.FreshStater); ok {
		return f.StatFresh
	}
	return ix.st.Stat
}
