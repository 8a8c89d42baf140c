package s3store

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// Discovery of `_metadata` objects.
//
// S3 cannot search by suffix, and a checkpoint root holds 100,000+ SSTs in `shared/` folders, so walking
// the bucket on every sync is slow and costly. Flink writes `_metadata` in two layouts:
//
//	<root>/<job>/chk-<n>/_metadata            checkpoints
//	<root>/savepoint-<job6>-<rand>/_metadata   savepoints  (<root> = the savepoint directory)
//
// ListMetadata therefore works in one of two modes (Options.FullWalkEvery):
//
//   - Full walk (the default, on every call; with FullWalkEvery > 0 the first call, then every
//     FullWalkEvery): a flat ListObjectsV2 of the whole prefix, keeping keys whose last segment is
//     `_metadata`. Complete for any layout. From its result it learns the layout: every "parent" folder P
//     that holds chk-*/savepoint-* folders with a `_metadata` (P = <root>/<job> for checkpoints,
//     P = <root> for savepoints), every "root" folder above such a P, and every `_metadata` in any other
//     place (kept as an exact key).
//   - Targeted listing (only with FullWalkEvery > 0, between full walks): for each known root, one
//     delimiter listing of its child folders finds new jobs; for each known or new parent P, delimiter
//     listings of P+"chk-" and P+"savepoint-" give the checkpoint folders; for each such folder one HEAD of
//     folder/_metadata. Exact keys are HEADed. Cost: a few requests per job and one per retained
//     checkpoint, independent of the number of SSTs.
//
// Why the full walk is the default: the targeted mode cannot see a `_metadata` in a root that held none at
// the last full walk, or in an odd place. New files of such a checkpoint are still protected by --grace,
// but what it references is not: job B restored from job A, checkpointing into a new root, references A's
// month-old SSTs, and until the next full walk the guard would let `rm -rf A` delete them. A guard must not
// trade that for listing cost, so the targeted mode is an explicit choice for buckets whose checkpoint
// roots are fixed (docs/SEMANTICS.md).
//
// Every S3 error aborts ListMetadata with that error: the index then treats the sync as failed and
// refuses deletions (fail closed). A missing `_metadata` (404 on HEAD) just means "not a live checkpoint".
type layout struct {
	roots   map[string]bool // folders whose children are job folders (or savepoint folders)
	parents map[string]bool // folders holding chk-*/savepoint-* folders
	exact   map[string]bool // `_metadata` keys found elsewhere
}

func isCheckpointFolder(name string) bool {
	return strings.HasPrefix(name, "chk-") || strings.HasPrefix(name, "savepoint-")
}

func learn(keys []string) layout {
	l := layout{roots: map[string]bool{}, parents: map[string]bool{}, exact: map[string]bool{}}
	for _, k := range keys {
		l.add(k)
	}
	return l
}

// add records where the `_metadata` key k lives.
func (l *layout) add(k string) {
	folder := dirOf(k)
	if folder == "" || !isCheckpointFolder(path.Base(folder)) {
		l.exact[k] = true
		return
	}
	parent := dirOf(folder)
	l.parents[parent] = true
	if strings.HasPrefix(path.Base(folder), "chk-") && parent != "" {
		l.roots[dirOf(parent)] = true
	} else {
		l.roots[parent] = true
	}
}

// empty reports whether the layout knows no place a checkpoint lives: nothing learned yet, or the last
// full walk found no `_metadata` at all. A targeted listing of an empty layout looks nowhere and would
// report an empty store whatever has been written since, so an empty layout always means a full walk.
func (l layout) empty() bool { return len(l.parents) == 0 && len(l.exact) == 0 }

// Learn adds the place of a `_metadata` key to the layout the targeted listing looks in, so a checkpoint
// the index read (indexed through the mount the moment it was written) is listed again by the next
// targeted listing even in a folder that held no checkpoint at the last full walk. Open calls it for
// every `_metadata` it opens.
func (s *Store) Learn(key string) {
	if !store.IsMetadata(key) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.layout.empty() {
		return // the next listing is a full walk anyway
	}
	s.layout.add(key)
}

// ListAllMetadata is a full walk whatever the discovery mode (store.FullLister): the index rebuilds from it.
func (s *Store) ListAllMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	return s.fullWalk(ctx, fn)
}

// ListMetadata reports every `_metadata` object (see the discovery notes above for the two modes).
func (s *Store) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	s.mu.Lock()
	full := s.opts.FullWalkEvery <= 0 || s.layout.empty() || s.opts.Now().Sub(s.lastFull) >= s.opts.FullWalkEvery
	l := s.layout
	s.mu.Unlock()
	if full {
		return s.fullWalk(ctx, fn)
	}
	return s.targeted(ctx, l, fn)
}

// ForceFullWalk makes the next ListMetadata a full walk (e.g. `ckguard index rebuild`).
func (s *Store) ForceFullWalk() {
	s.mu.Lock()
	s.layout = layout{}
	s.mu.Unlock()
}

func (s *Store) fullWalk(ctx context.Context, fn func(store.ObjectInfo) error) error {
	start := s.opts.Now()
	var found []string
	err := s.c.Walk(ctx, "", func(o s3client.Object) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !store.IsMetadata(o.Key) {
			return nil
		}
		found = append(found, o.Key)
		return fn(info(o))
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.layout, s.lastFull = learn(found), start
	s.stats.FullWalks++
	s.mu.Unlock()
	return nil
}

// targeted runs the cheap discovery. Results are reported in key order, deduplicated.
func (s *Store) targeted(ctx context.Context, l layout, fn func(store.ObjectInfo) error) error {
	g := newGroup(ctx, s.opts.Parallel)
	var (
		mu      sync.Mutex
		parents = map[string]bool{}
		folders = map[string]bool{}
		found   = map[string]s3client.Object{}
	)
	for p := range l.parents {
		parents[p] = true
	}
	// New jobs under known roots.
	for r := range l.roots {
		g.Go(func(ctx context.Context) error {
			return s.eachChild(ctx, r, "", func(child string) {
				mu.Lock()
				defer mu.Unlock()
				if isCheckpointFolder(path.Base(child)) {
					parents[r] = true
				} else {
					parents[child] = true
				}
			})
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	// Checkpoint folders under each parent.
	g = newGroup(ctx, s.opts.Parallel)
	for p := range parents {
		for _, kind := range []string{"chk-", "savepoint-"} {
			g.Go(func(ctx context.Context) error {
				return s.eachChild(ctx, p, kind, func(child string) {
					mu.Lock()
					folders[child] = true
					mu.Unlock()
				})
			})
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	// One HEAD per candidate `_metadata`.
	g = newGroup(ctx, s.opts.Parallel)
	head := func(key string) {
		g.Go(func(ctx context.Context) error {
			o, err := s.c.Head(ctx, key)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			mu.Lock()
			found[key] = o
			mu.Unlock()
			return nil
		})
	}
	for f := range folders {
		head(join(f, store.MetadataName))
	}
	for k := range l.exact {
		head(k)
	}
	if err := g.Wait(); err != nil {
		return err
	}
	keys := make([]string, 0, len(found))
	for k := range found {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s.mu.Lock()
	s.stats.TargetedListings++
	s.mu.Unlock()
	for _, k := range keys {
		if err := fn(info(found[k])); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// eachChild calls fn with every child folder of dir whose name starts with namePrefix (delimiter listing,
// all pages).
func (s *Store) eachChild(ctx context.Context, dir, namePrefix string, fn func(child string)) error {
	prefix := namePrefix
	if dir != "" {
		prefix = dir + "/" + namePrefix
	}
	token := ""
	for {
		pg, err := s.c.ListPage(ctx, prefix, true, token, "", 1000)
		if err != nil {
			return err
		}
		for _, p := range pg.Prefixes {
			fn(p)
		}
		for _, o := range pg.Objects { // "dir/" markers some servers report as objects
			if k, ok := strings.CutSuffix(o.Key, "/"); ok && dirOf(k) == dir && strings.HasPrefix(path.Base(k), namePrefix) {
				fn(k)
			}
		}
		if pg.Next == "" {
			return nil
		}
		token = pg.Next
	}
}

// group runs functions with bounded concurrency and returns the first error (cancelling the rest).
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
