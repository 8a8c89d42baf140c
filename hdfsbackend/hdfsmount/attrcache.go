package hdfsmount

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
)

// attrCache remembers what directory listings said about their entries, so the kernel's LOOKUP of
// the directories a walk descends into, and the unlinks of rm -rf, cost no NameNode stat each. It holds
// the listing pages themselves (one map entry per page of up to 1,000 names, searched by name), not an
// entry per name: filling it costs one insertion per getListing RPC instead of one map insertion and
// one key allocation per name, which was most of what a find through the mount spent beyond the raw
// listing.
//
// Invariants:
//   - A page is stamped with the START of the RPC that listed it, and a name is answered from the
//     freshest page showing it; the mount's own changes (unlink, rmdir, rename, create, truncate,
//     mkdir, mtime) leave a stamp on the name (a removed or renamed directory also on its tree), and a
//     page stamped no later than the name's (or a tree's) stamp never answers for it, so a listing
//     already under way cannot bring back what the mount has just changed.
//   - Only names a listing would serve are answered: symlinks, invalid names and the hidden
//     quarantine folder miss (the caller stats, as without the cache).
//   - Callers bound the age they accept: lookup and getattr statTTL; an unlink's decision only
//     unlinkTTL (a change beside the mount within that window is judged on the listed attributes, as the
//     kernel's own entry cache would); everything else (open, truncate, rename, rmdir) stats afresh.
//   - Memory is bounded: at most max names in pages and max stamps; when full, pages and stamps older
//     than statTTL go (no caller accepts an answer that old), and if that is not enough, all, with a
//     floor that keeps every page listed before out (an empty cache only costs stats).
//   - A page that is not in name order (the NameNode lists in byte order) is sorted before it is held:
//     the search by name never misses a name for the order alone, and never answers for another name.
type attrCache struct {
	mu    sync.Mutex
	dirs  map[string][]attrPage // directory key -> pages listed from it
	drops map[string]time.Time  // key the mount changed -> when
	trees map[string]time.Time  // directory the mount removed or renamed -> when (covers the tree below)
	held  int                   // names held in pages
	max   int
	// floor: pages stamped before it are ignored (set when the cache is emptied for memory).
	floor time.Time
}

// attrPage is one getListing answer: its entries in name order, and when the RPC started.
type attrPage struct {
	at   time.Time
	ents []hdfsclient.FileInfo
}

func (p attrPage) first() string { return p.ents[0].Name }
func (p attrPage) last() string  { return p.ents[len(p.ents)-1].Name }

// find returns the entry named name, if the page holds it.
func (p attrPage) find(name string) (hdfsclient.FileInfo, bool) {
	i, ok := slices.BinarySearchFunc(p.ents, name, func(fi hdfsclient.FileInfo, n string) int { return strings.Compare(fi.Name, n) })
	if !ok {
		return hdfsclient.FileInfo{}, false
	}
	return p.ents[i], true
}

const (
	// statTTL bounds how late a change made beside the mount shows in stat (plus the kernel's 1 s).
	statTTL = 5 * time.Second
	// unlinkTTL bounds the age of listed attributes an unlink's decision may use.
	unlinkTTL = 2 * time.Second
	// maxCached bounds the cache (about 200 bytes an entry).
	maxCached = 1 << 17
)

func newAttrCache(max int) *attrCache {
	return &attrCache{dirs: make(map[string][]attrPage), drops: make(map[string]time.Time), trees: make(map[string]time.Time), max: max}
}

// put records one page of dir's listing, whose RPC started at `at`. The cache keeps page: the caller
// does not change it afterwards.
func (c *attrCache) put(dir string, page []hdfsclient.FileInfo, at time.Time) {
	if len(page) == 0 {
		return
	}
	if !slices.IsSortedFunc(page, func(a, b hdfsclient.FileInfo) int { return strings.Compare(a.Name, b.Name) }) {
		page = slices.Clone(page)
		slices.SortFunc(page, func(a, b hdfsclient.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := dir; ; k = parentKey(k) {
		if t, ok := c.trees[k]; ok && !at.After(t) {
			return // listed before the mount removed or renamed the directory (or one above it)
		}
		if k == "" {
			break
		}
	}
	if c.held+len(page) > c.max {
		c.evictLocked(now, len(page), 0)
	}
	if at.Before(c.floor) {
		return
	}
	np := attrPage{at: at, ents: page}
	// Older pages of the same names are superseded (a name only they showed is gone, or only misses).
	old := c.dirs[dir]
	kept := old[:0]
	for _, p := range old {
		if !p.at.After(at) && p.first() <= np.last() && np.first() <= p.last() {
			c.held -= len(p.ents)
			continue
		}
		kept = append(kept, p)
	}
	c.dirs[dir] = append(kept, np)
	c.held += len(page)
}

// evictLocked makes room for pageNames more names and stamps more stamps: pages and stamps older than
// statTTL go, then, if that is not enough, everything.
func (c *attrCache) evictLocked(now time.Time, pageNames, stamps int) {
	for d, ps := range c.dirs {
		kept := ps[:0]
		for _, p := range ps {
			if now.Sub(p.at) > statTTL {
				c.held -= len(p.ents)
				continue
			}
			kept = append(kept, p)
		}
		if len(kept) == 0 {
			delete(c.dirs, d)
		} else {
			c.dirs[d] = kept
		}
	}
	for _, m := range []map[string]time.Time{c.drops, c.trees} {
		for k, t := range m {
			if now.Sub(t) > statTTL {
				delete(m, k)
			}
		}
	}
	if c.held+pageNames > c.max || len(c.drops)+len(c.trees)+stamps > c.max {
		// Stamps go too: the floor keeps every listing started before now out instead.
		clear(c.dirs)
		clear(c.drops)
		clear(c.trees)
		c.held = 0
		c.floor = now
	}
}

// stampLocked records that the mount changed key at now (m: drops or trees).
func (c *attrCache) stampLocked(m map[string]time.Time, key string, now time.Time) {
	if _, ok := m[key]; !ok && len(c.drops)+len(c.trees) >= c.max {
		c.evictLocked(now, 0, 1)
	}
	m[key] = now
}

// drop forgets key after the mount changed it; pages listed before now cannot bring it back.
func (c *attrCache) drop(key string) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stampLocked(c.drops, key, now)
}

// dropTree forgets key and everything below it (a renamed or removed directory).
func (c *attrCache) dropTree(key string) {
	now := time.Now()
	prefix := key + "/"
	c.mu.Lock()
	defer c.mu.Unlock()
	for d, ps := range c.dirs {
		if d == key || strings.HasPrefix(d, prefix) {
			for _, p := range ps {
				c.held -= len(p.ents)
			}
			delete(c.dirs, d)
		}
	}
	c.stampLocked(c.drops, key, now)
	c.stampLocked(c.trees, key, now)
}

// lookupLocked returns key's entry from the freshest page at most maxAge old listed after the mount
// last changed key.
func (c *attrCache) lookupLocked(key string, maxAge time.Duration) (hdfsclient.FileInfo, bool) {
	dir, name := parentKey(key), baseKey(key)
	if !validName(name) || guard.ReservedName(dir, name) {
		return hdfsclient.FileInfo{}, false
	}
	dropped, isDropped := c.drops[key]
	now := time.Now()
	var best hdfsclient.FileInfo
	var bestAt time.Time
	found := false
	for _, p := range c.dirs[dir] {
		if now.Sub(p.at) > maxAge || p.at.Before(c.floor) || (isDropped && !p.at.After(dropped)) || (found && !p.at.After(bestAt)) {
			continue
		}
		if fi, ok := p.find(name); ok {
			best, bestAt, found = fi, p.at, true
		}
	}
	if !found || best.Symlink {
		return hdfsclient.FileInfo{}, false
	}
	return best, true
}

// get answers key from a listing at most maxAge old.
func (c *attrCache) get(key string, maxAge time.Duration) (hdfsclient.FileInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lookupLocked(key, maxAge)
}

// listed reports whether a listing within relistWindow showed key (its attributes may be older than
// a caller accepts).
func (c *attrCache) listed(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.lookupLocked(key, relistWindow)
	return ok
}

// stat answers key from a listing at most maxAge old, else from the NameNode. When a recent listing
// showed key but is older than maxAge (a walk slower than the bound, as rm -rf deciding file by file
// is), its directory is listed again (relister): one call per page then refreshes the attributes of
// every name left in it, instead of one getFileInfo per name.
func (f *filesystem) stat(ctx context.Context, key string, maxAge time.Duration) (hdfsclient.FileInfo, error) {
	if fi, ok := f.attrs.get(key, maxAge); ok {
		return fi, nil
	}
	if f.attrs.listed(key) && f.relist.relist(ctx, parentKey(key)) {
		if fi, ok := f.attrs.get(key, maxAge); ok {
			return fi, nil
		}
	}
	return f.fs.Stat(ctx, f.abs(key))
}

// changed records that the mount changed key: its attributes and its directory's prefetched listing
// are forgotten.
func (f *filesystem) changed(key string) {
	f.attrs.drop(key)
	f.pre.forget(parentKey(key))
}

// changedTree is changed for a directory removed or renamed, with everything below it.
func (f *filesystem) changedTree(key string) {
	f.attrs.dropTree(key)
	f.pre.forget(parentKey(key))
	f.pre.forgetTree(key)
}

func baseKey(key string) string { return key[strings.LastIndexByte(key, '/')+1:] }

func parentKey(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return ""
}
