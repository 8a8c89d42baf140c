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
	stat := ix.freshStat()
	planned := len(units)
	for _, k := range single {
		units = append(units, lossUnit{keys: []string{k}})
	}
	// Every request waits on the pacer (when set) and is timed from its slot to its answer.
	wait := func(ctx context.Context) (func(), error) {
		release := func() {}
		if pacer != nil {
			r, err := pacer.Wait(ctx)
			if err != nil {
				return nil, err
			}
			release = r
		}
		t0 := time.Now()
		var once sync.Once
		return func() {
			once.Do(func() { rt.add(time.Since(t0)) })
			release()
		}, nil
	}
	var mu sync.Mutex
	gone := map[string]bool{}
	requests := 0
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	var wg sync.WaitGroup
	check := func(u lossUnit, planned bool) {
		toStat := u.keys
		n := 0
		fromListing := false
		if ev != nil && planned {
			toStat, fromListing = ev.take(u)
			if !fromListing {
				toStat = u.keys
			}
		}
		if u.list && lister != nil && !fromListing {
			seen := make(map[string]bool, len(u.keys))
			// Cut off at one request per object: never dearer than stating each.
			r, _, err := lister.ListDirRange(ctx, u.dir, u.keys[0], u.keys[len(u.keys)-1], len(u.keys), wait, func(k string) { seen[k] = true })
			n += r
			if err != nil {
				fail(fmt.Errorf("loss check: list %s/: %w", u.dir, err))
				return
			}
			toStat = toStat[:0:0]
			for _, k := range u.keys {
				if !seen[k] {
					toStat = append(toStat, k) // missing, or past a listing that was cut off
				}
			}
		}
		var lost []string
		for _, k := range toStat {
			if ctx.Err() != nil {
				return
			}
			release, err := wait(ctx)
			if err != nil {
				fail(fmt.Errorf("loss check: stat %s: %w", k, err))
				return
			}
			_, err = stat(ctx, k)
			release()
			n++
			switch {
			case err == nil:
			case errors.Is(err, fs.ErrNotExist):
				lost = append(lost, k)
			default:
				fail(fmt.Errorf("loss check: stat %s: %w", k, err))
				return
			}
		}
		mu.Lock()
		defer mu.Unlock()
		requests += n
		for _, k := range lost {
			gone[k] = true
		}
	}
	for i, u := range units {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			check(u, i < planned)
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, requests, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, requests, err
	}
	return gone, requests, nil
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
