package s3store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// Discovery of `_metadata` objects.
//
// S3 cannot search by suffix, and a checkpoint store holds millions of SSTs in `shared/` folders, so
// listing the whole bucket on every sync costs time in proportion to the objects (about 70 µs per object
// on a local server, 1,000 objects per sequential request at real latency). Flink writes `_metadata` in
// two layouts:
//
//	<root>/<job>/chk-<n>/_metadata            checkpoints
//	<root>/savepoint-<job6>-<rand>/_metadata   savepoints  (<root> = the savepoint directory)
//
// ListMetadata (the default discovery, every sync) is a descent of delimiter listings from the store
// root: every folder is listed one level deep (ListObjectsV2 with "/"), except
//
//   - the chk-<n> folders of a folder: one flat listing of "<folder>/chk-" for all of them, which
//     reports each chk-<n>/_metadata with its ETag (flatlist.go), or, where the checkpoint folders hold
//     many files or there is only one, a HEAD of each chk-<n>/_metadata; never a listing per folder;
//   - a savepoint-* folder: one HEAD of its _metadata; only a savepoint folder without one (in progress,
//     or a folder of that name holding other folders) is listed further;
//   - shared/ and taskowned/ beside a chk-<n> folder (the parent is a job folder): never listed, they hold
//     the SSTs.
//
// Every `_metadata` that is a direct child of a listed folder is reported from the listing, wherever it is
// (a `_metadata` in an unexpected place at a level the descent lists). A folder whose listing prefix is no
// clean key ("//", "." or ".." segments, a leading "/") is walked flat and its `_metadata` reported under
// their raw keys, which the index keeps as unparseable (fail closed): a HEAD through the SDK would name
// another object. A new job, a new root at any depth, a new savepoint directory is therefore seen by the
// next sync. Cost: one listing per folder above the checkpoint folders (per 1,000 children), one flat
// listing per job folder (per 1,000 files in its checkpoint folders) or one HEAD per checkpoint, and one
// HEAD per savepoint folder, independent of the number of SSTs.
//
// What the descent cannot see: a `_metadata` below a folder it does not list, i.e. inside chk-<n>/ (deeper
// than chk-<n>/_metadata; the flat listing sees those of the jobs it lists), inside a savepoint folder that has a `_metadata`, or inside shared/ or
// taskowned/ of a job folder. Flink never writes there; a copy or a tool might. A reconciliation walk
// (the full flat listing) finds those: it runs in the background, never inside a sync, first when the
// store is opened and then every max(ReconcileEvery, 10 × its last duration), so it costs at most a tenth
// of the listing capacity, and each `_metadata` it finds that the descent does not see is HEADed by every
// sync from then on (and logged). Until that walk has found it, such a checkpoint's own new files are
// protected by --grace, but what it references is not. Decisions that must be complete do not depend on
// the descent: a rebuild lists with ListAllMetadata (a full walk), and `ckguard orphans` walks the whole
// store and refuses to list anything while a `_metadata` the index does not hold exists anywhere. If the
// reconciliation walk keeps failing, ListMetadata fails too once no walk has succeeded for three
// intervals, so the index refuses every deletion instead of carrying a gap that nobody sees.
//
// Options.FullWalk keeps the old behaviour: every ListMetadata is a full walk (complete for any layout at
// every sync, at the cost above).
//
// An S3 error on one folder's listing or one HEAD (after the client's retries) is an unknown subtree of
// that prefix when the caller takes them (store.WithUnknown: the index's syncs): the rest of the descent
// goes on, and the index refuses only what that prefix may hold. Without the callback, and for a full
// walk (ListAllMetadata, reconciliation), every S3 error aborts the listing with that error: the index
// then treats the sync as failed and refuses deletions (fail closed). A missing `_metadata` (404 on
// HEAD) just means "not a live checkpoint".

// Stats counts discoveries (for logs, metrics and tests).
type Stats struct {
	// FullWalks counts full flat listings (ListAllMetadata, FullWalk mode, reconciliation walks).
	FullWalks int
	// TargetedListings counts descents (the default ListMetadata).
	TargetedListings int
	// Reconciliations counts completed background reconciliation walks; ReconcileFound the `_metadata`
	// they found where the descent does not look.
	Reconciliations, ReconcileFound int
	// Requests of the last descent: delimiter listings, HEADs, and the pages of flat listings of
	// checkpoint folders (flatlist.go); LastFlatFallbacks counts the job folders whose flat listing
	// was given up for HEADs (checkpoint folders of many files).
	LastListings, LastHeads, LastFlatListings, LastFlatFallbacks int
}

// discovery is the state of the default discovery, under Store.mu.
type discovery struct {
	exact       map[string]bool // `_metadata` keys where the descent does not look: HEADed every sync
	running     chan struct{}   // a reconciliation walk is under way: closed when it ends
	lastStart   time.Time       // start of the last reconciliation walk that succeeded
	lastAttempt time.Time       // start of the last reconciliation walk
	lastTook    time.Duration   // its duration
	failingFrom time.Time       // first failure since the last success (zero: none)
	lastErr     error
	opened      time.Time // first ListMetadata: the failure window of a walk that never succeeded
	// The cheaper discovery wins (both see every checkpoint Flink writes): walkCost is what the last
	// full walk cost, in small requests (its listing requests plus one per 100 objects listed: decoding
	// a page of 1,000 keys costs the client about as much as ten HEADs or delimiter listings),
	// descentCost the requests of the last descent. A bucket whose layout makes the descent dearer
	// than a walk (Flink's entropy injection puts data files under thousands of random top-level
	// folders, each with a job tree the descent would visit) is walked instead, and the descent is
	// tried again every descentRetry syncs.
	walkCost, descentCost int64
	walksInstead          int
	// headJobs names the job folders whose checkpoints are HEADed rather than listed flat, with the
	// number of descents that remain before the flat listing is tried again (flatlist.go).
	headJobs map[string]int
	// descendOnly keeps the descent whatever the walk costs (benchmarks of the descent on buckets
	// generated without their SSTs, where a walk is cheap).
	descendOnly bool
	// headsOnly HEADs every checkpoint, never lists checkpoint folders flat (benchmarks: the
	// descent before flatlist.go, side by side).
	headsOnly bool
}

// descentRetry is how many syncs use the full walk, once it proved cheaper, before the descent is
// measured again.
const descentRetry = 20

// Learn records a `_metadata` key the index opened (indexed through the mount the moment it was
// written): when the descent does not look where it is, every later listing HEADs it, so it is not missed
// until the next reconciliation walk. Open calls it for every `_metadata` it opens.
func (s *Store) Learn(key string) {
	if !flinklayout.IsMetadata(key) || s.descentSees(key) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disc.exact == nil {
		s.disc.exact = map[string]bool{}
	}
	s.disc.exact[key] = true
}

// descentSees reports whether the descent reports the `_metadata` at key as the store stands: its folder
// is a chk-<n> or savepoint folder reached through listed folders only, or a listed folder itself. It is
// conservative (a "no" only costs one HEAD per sync).
func (s *Store) descentSees(key string) bool {
	if k, err := store.CleanKey(key); err != nil || k != key {
		return false
	}
	segs := strings.Split(key, "/")
	folders := segs[:len(segs)-1]
	for i, seg := range folders {
		last := i == len(folders)-1
		switch {
		case flinklayout.IsCheckpointDir(seg), flinklayout.IsSavepointDir(seg):
			// HEADed: only its own _metadata is seen (a savepoint folder without one is listed, but
			// that is not guaranteed).
			return last
		case seg == flinklayout.SharedDir || seg == flinklayout.TaskOwnedDir:
			return false // skipped when beside a chk-<n> folder
		}
	}
	return true // a direct child of a listed folder
}

// ListAllMetadata is a full walk whatever the discovery mode (store.FullLister): the index rebuilds from it.
func (s *Store) ListAllMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	_, err := s.fullWalk(ctx, fn)
	return err
}

// ListMetadata reports every `_metadata` object the discovery sees (see the notes above).
func (s *Store) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	if s.opts.FullWalk {
		_, err := s.fullWalk(ctx, fn)
		return err
	}
	s.maybeReconcile()
	if err := s.reconcileState(); err != nil {
		return err
	}
	if s.walkCheaper() {
		_, err := s.fullWalk(ctx, fn)
		return err
	}
	return s.descend(ctx, nil, fn)
}

// walkCheaper reports whether this sync lists the bucket instead of descending (see discovery.walkCost).
func (s *Store) walkCheaper() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := &s.disc
	if d.descendOnly || d.walkCost == 0 || d.descentCost <= 2*d.walkCost {
		return false
	}
	d.walksInstead++
	if d.walksInstead > descentRetry {
		d.walksInstead = 0
		return false
	}
	if d.walksInstead == 1 {
		s.opts.Logger.Info("the descent costs more requests than a walk of the whole bucket here; walking instead", "store", s.Root(),
			"descent_requests", d.descentCost, "walk_cost", d.walkCost)
	}
	return true
}

// ForceFullWalk starts a reconciliation walk now (in the background) unless one is running.
func (s *Store) ForceFullWalk() {
	s.mu.Lock()
	s.disc.lastStart, s.disc.lastAttempt, s.disc.lastTook = time.Time{}, time.Time{}, 0
	s.mu.Unlock()
	s.maybeReconcile()
}

// reconcileInterval is how long after the start of the last successful reconciliation walk the next one
// starts: at least ReconcileEvery, and ten times the walk's own duration, so a big bucket is walked less
// often rather than listed all the time.
func (s *Store) reconcileInterval() time.Duration {
	return max(s.opts.ReconcileEvery, 10*s.disc.lastTook)
}

// reconcileState fails when no reconciliation walk has succeeded for three intervals while walks were
// attempted: the descent's blind spots are then unchecked for longer than the documented window.
func (s *Store) reconcileState() error {
	if s.opts.ReconcileEvery < 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Now()
	if s.disc.opened.IsZero() {
		s.disc.opened = now
	}
	since := s.disc.lastStart
	if since.IsZero() {
		since = s.disc.opened
	}
	if s.disc.lastErr != nil && now.Sub(since) > 3*s.reconcileInterval() {
		return fmt.Errorf("the reconciliation walk of %s (which finds _metadata where the per-sync discovery does not look) has not succeeded since %s: %w",
			s.Root(), since.Format(time.RFC3339), s.disc.lastErr)
	}
	return nil
}

// maybeReconcile starts a background reconciliation walk when one is due. It never blocks the caller.
func (s *Store) maybeReconcile() {
	if s.opts.ReconcileEvery < 0 {
		return
	}
	s.mu.Lock()
	now := s.opts.Now()
	// Due when the interval has passed since the last walk that succeeded; a failed walk is retried a
	// minute later, not at every sync.
	due := s.disc.running == nil && (s.disc.lastStart.IsZero() || now.Sub(s.disc.lastStart) >= s.reconcileInterval()) &&
		(s.disc.lastAttempt.IsZero() || s.disc.lastAttempt.Equal(s.disc.lastStart) || now.Sub(s.disc.lastAttempt) >= time.Minute)
	if due {
		s.disc.running = make(chan struct{})
		s.disc.lastAttempt = now
	}
	s.mu.Unlock()
	if !due {
		return
	}
	go s.reconcile(now)
}

// reconcile runs one full walk and records every `_metadata` the descent would not report.
func (s *Store) reconcile(start time.Time) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.mu.Lock()
	s.cancelReconcile = cancel
	s.mu.Unlock()
	var missed []string
	took, err := s.fullWalk(ctx, func(o store.ObjectInfo) error {
		if !s.descentSees(o.Path) {
			missed = append(missed, o.Path)
		}
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.disc.running)
	s.disc.running = nil
	s.cancelReconcile = nil
	if err != nil {
		if s.disc.failingFrom.IsZero() {
			s.disc.failingFrom = start
		}
		s.disc.lastErr = err
		s.opts.Logger.Warn("reconciliation walk failed; retried later", "store", s.Root(), "err", err)
		return
	}
	if s.disc.exact == nil {
		s.disc.exact = map[string]bool{}
	}
	for _, k := range missed {
		if !s.disc.exact[k] {
			s.opts.Logger.Warn("a _metadata where Flink does not write checkpoints; it is indexed from now on", "key", k, "store", s.Root())
			s.stats.ReconcileFound++
		}
		s.disc.exact[k] = true
	}
	s.disc.lastStart, s.disc.lastTook, s.disc.failingFrom, s.disc.lastErr = start, took, time.Time{}, nil
	s.stats.Reconciliations++
}

// WaitReconcile waits for a running reconciliation walk to end (tests, benchmarks).
func (s *Store) WaitReconcile(ctx context.Context) error {
	s.mu.Lock()
	ch := s.disc.running
	s.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops a running reconciliation walk.
func (s *Store) Close() {
	s.mu.Lock()
	c := s.cancelReconcile
	s.mu.Unlock()
	if c != nil {
		c()
	}
}

// fullWalk lists every `_metadata` below the prefix, splitting the listing by prefix and listing the parts
// in parallel (walk.go). It returns how long the walk took.
func (s *Store) fullWalk(ctx context.Context, fn func(store.ObjectInfo) error) (time.Duration, error) {
	start := time.Now()
	var mu sync.Mutex
	var objects atomic.Int64
	pages, err := s.parallelWalk(ctx, "", func(o s3client.Object) error {
		objects.Add(1)
		if !flinklayout.IsMetadata(o.Key) || store.InQuarantine(o.Key) { // a staged _metadata is no live checkpoint
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		return fn(info(o))
	})
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.stats.FullWalks++
	s.disc.walkCost = pages + objects.Load()/100
	s.mu.Unlock()
	return time.Since(start), nil
}

// descend runs the per-sync discovery. Results are reported in key order, deduplicated. known, when
// not nil, names `_metadata` keys the caller holds already (ListNewMetadata): the requests that could
// only report those are left out.
func (s *Store) descend(ctx context.Context, known func(string) bool, fn func(store.ObjectInfo) error) error {
	s.mu.Lock()
	d := &descent{s: s, g: newGroup(ctx, s.opts.DescentParallel), known: known, found: map[string]s3client.Object{},
		headJobs: s.disc.headJobs, nextHeadJobs: map[string]int{}, headsOnly: s.disc.headsOnly}
	s.mu.Unlock()
	d.visit("")
	s.mu.Lock()
	for k := range s.disc.exact {
		if known == nil || !known(k) {
			d.head(k)
		}
	}
	s.mu.Unlock()
	if err := d.g.Wait(); err != nil {
		return err
	}
	keys := make([]string, 0, len(d.found))
	for k := range d.found {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s.mu.Lock()
	if known == nil {
		// A second listing of the same sync (ListNewMetadata) neither measures the descent nor ages
		// the per-job choices: it leaves out what the first one paid for.
		s.stats.TargetedListings++
		s.stats.LastListings, s.stats.LastHeads = d.listings, d.heads
		s.stats.LastFlatListings, s.stats.LastFlatFallbacks = d.flatPages, d.flatFallbacks
		s.disc.descentCost = int64(d.listings+d.heads+d.flatPages) + d.flatKeys/100
		s.disc.headJobs = d.nextHeadJobs
	}
	s.mu.Unlock()
	for _, k := range keys {
		if err := fn(info(d.found[k])); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// descent is the state of one descend.
type descent struct {
	s     *Store
	g     *group
	known func(string) bool

	// headJobs is the store's per-job choice of HEADs over the flat listing (read-only here);
	// nextHeadJobs the one for the next descent, for the job folders this one visited.
	headJobs  map[string]int
	headsOnly bool

	mu                                        sync.Mutex
	found                                     map[string]s3client.Object
	nextHeadJobs                              map[string]int
	listings, heads, flatPages, flatFallbacks int
	flatKeys                                  int64
}

func (d *descent) report(o s3client.Object) {
	if store.InQuarantine(o.Key) {
		return // a staged _metadata is no live checkpoint
	}
	d.mu.Lock()
	d.found[o.Key] = o
	d.mu.Unlock()
}

func (d *descent) count(n *int, k int) {
	d.mu.Lock()
	*n += k
	d.mu.Unlock()
}

// head reports the object at key if it exists.
func (d *descent) head(key string) {
	d.g.Go(func(ctx context.Context) error {
		d.count(&d.heads, 1)
		o, err := d.s.c.Head(ctx, key)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return d.unknown(ctx, key, err)
		}
		d.report(o)
		return nil
	})
}

// unknown reports a prefix (or key) whose listing or HEAD failed, after the client's retries, as an
// unknown subtree (store.ReportUnknown): the rest of the descent goes on when the caller takes unknown
// subtrees (the index refuses only what it may hold); otherwise, and when ctx is done, it is the error.
func (d *descent) unknown(ctx context.Context, prefix string, err error) error {
	if ctx.Err() != nil {
		return err
	}
	return store.ReportUnknown(ctx, store.UnknownSubtree{Key: strings.TrimSuffix(prefix, "/"),
		Err: fmt.Errorf("listing %s/%s: %w", d.s.Root(), prefix, err)})
}

// visit lists the folder prefix one level deep and goes on below it (see the notes at the top).
func (d *descent) visit(prefix string) {
	d.g.Go(func(ctx context.Context) error {
		if !cleanPrefix(prefix) {
			// HEAD and the SDK would name another object: walk it flat and report raw keys.
			return d.s.c.Walk(ctx, prefix, func(o s3client.Object) error {
				if flinklayout.IsMetadata(o.Key) {
					d.report(o)
				}
				return nil
			})
		}
		var children []string
		token := ""
		for {
			pg, err := d.s.c.ListPage(ctx, prefix, true, token, "", 1000)
			if err != nil {
				return d.unknown(ctx, prefix, err)
			}
			d.count(&d.listings, 1)
			for _, p := range pg.Prefixes {
				// Prefixes come without the trailing '/', relative; the child's own listing prefix
				// is p+"/" (an empty name, from "a//b", stays distinct from its parent).
				if len(p)+1 > len(prefix) && !store.InQuarantine(p) {
					// ckguard's own folders (quarantine, shared state) hold no live checkpoint: not descended.
					children = append(children, p+"/")
				}
			}
			for _, o := range pg.Objects {
				if strings.HasSuffix(o.Key, "/") {
					// A "dir/" marker some servers report as an object; a marker of prefix itself is no child.
					if len(o.Key) > len(prefix) && !strings.Contains(o.Key[len(prefix):len(o.Key)-1], "/") && !store.InQuarantine(strings.TrimSuffix(o.Key, "/")) {
						children = append(children, o.Key)
					}
					continue
				}
				if flinklayout.IsMetadata(o.Key) {
					d.report(o) // a _metadata directly in a listed folder, wherever that is
				}
			}
			if pg.Next == "" {
				break
			}
			token = pg.Next
		}
		children = dedupe(children)
		var checkpoints []string
		for _, c := range children {
			if flinklayout.IsCheckpointDir(childName(prefix, c)) {
				checkpoints = append(checkpoints, c)
			}
		}
		for _, c := range children {
			name := childName(prefix, c)
			switch {
			case flinklayout.IsCheckpointDir(name):
				// Below, with the folder's other checkpoints.
			case flinklayout.IsSavepointDir(name):
				d.savepoint(c)
			case (name == flinklayout.SharedDir || name == flinklayout.TaskOwnedDir) && len(checkpoints) > 0:
				// The job's SSTs: never listed per sync.
			default:
				d.visit(c)
			}
		}
		d.checkpoints(prefix, checkpoints)
		return nil
	})
}

// savepoint HEADs a savepoint folder's `_metadata`; a folder without one is listed like any other.
func (d *descent) savepoint(folder string) {
	if d.known != nil && d.known(folder+flinklayout.MetadataName) {
		return // it has one: nothing below it is listed
	}
	d.g.Go(func(ctx context.Context) error {
		d.count(&d.heads, 1)
		o, err := d.s.c.Head(ctx, folder+flinklayout.MetadataName)
		switch {
		case err == nil:
			d.report(o)
		case errors.Is(err, fs.ErrNotExist):
			d.visit(folder)
		default:
			return d.unknown(ctx, folder, err)
		}
		return nil
	})
}

// childName is the name of child folder c (a listing prefix ending in '/') of prefix.
func childName(prefix, c string) string { return c[len(prefix) : len(c)-1] }

// cleanPrefix reports whether a listing prefix ("" or ending in '/') names a clean key's folder, one the
// SDK addresses as it is.
func cleanPrefix(p string) bool {
	if p == "" {
		return true
	}
	k := strings.TrimSuffix(p, "/")
	c, err := store.CleanKey(k)
	return err == nil && c == k && !strings.HasPrefix(p, "/")
}

func dedupe(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// group runs functions with bounded concurrency and returns the first error (cancelling the rest). A
// function may start more functions (Go) before it returns; Wait waits for all of them.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

func newGroup(ctx context.Context, n int) *group {
	ctx, cancel := context.WithCancel(ctx)
	return &group{ctx: ctx, cancel: cancel, sem: make(chan struct{}, n)}
}

func (g *group) Go(f func(context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		select {
		case g.sem <- struct{}{}:
		case <-g.ctx.Done():
			g.once.Do(func() { g.err = g.ctx.Err() })
			return
		}
		defer func() { <-g.sem }()
		if err := f(g.ctx); err != nil {
			g.once.Do(func() { g.err = err; g.cancel() })
		}
	}()
}

func (g *group) Wait() error {
	g.wg.Wait()
	g.cancel()
	return g.err
}
