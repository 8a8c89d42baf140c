package s3client

import (
	"strings"
	"sync"
	"time"
)

// AttrCache remembers what listings and HEADs said about keys, so the kernel's LOOKUP/GETATTR after a
// readdir (find, rm -rf, ls -l) costs no request, and the index's decision about an object the mount just
// listed costs no HEAD (s3store.Options.Attrs). Entries are valid for the mount's StatTTL when they answer
// stat; the mount's own operations (create, write, unlink, rename, mkdir, rmdir) update or drop them at once,
// so only changes made beside the mount can be seen late, by at most StatTTL (plus the kernel's 1 s entry
// and attribute timeout). Unlink, and the index's decision it asks for, may use an older entry (ETagTTL),
// because the DeleteObject is conditional on that entry's ETag: if the object changed since, the delete
// fails (412) and unlink looks again (docs/SEMANTICS.md).
//
// Every entry is stamped with the START of the request that produced it (PutAt), and an entry is never
// replaced by one stamped earlier: a listing that was sent before an object was overwritten (and so may
// describe the old version) cannot replace what a later HEAD, or the mount's own write, said about the new
// one, however late its reply arrives. Drop leaves such a stamp behind too, so a listing already under way
// cannot bring back what the mount has just changed.
//
// Entries older than maxEntryAge are swept (a timer while the cache holds any): no caller reads an older
// one, and a find or rm -rf over millions of objects must not leave an entry per visited object behind for
// good (the kernel's FORGET releases the mount's inodes; this releases the cache's share).
//
// The cache is bounded without losing what its entries protect. It holds two generations: entries are
// recorded in the current one, and when that holds half the bound the older generation is evicted and the
// current one becomes the older (a Get or a newer answer moves an entry back into the current one). What
// an entry protects survives its eviction:
//   - its stamp: the cache keeps the latest stamp it ever evicted (floor), and records no answer stamped
//     before it for a key it does not hold, so no late reply replaces an evicted, newer entry;
//   - the mount's own changes (Put, Drop: an object it uploaded, deleted, a name it just changed) are
//     carried into the new generation, not evicted, while a reply sent before them may still arrive
//     (pinFor): until then they answer stat without a request.
//
// Everything evicted is what a listing or a HEAD says again when asked. The deletion state proper (an
// acknowledged deletion not applied yet) is never held here: it is the delete queue's (s3mount's hidden),
// consulted before the cache.
type AttrCache struct {
	mu       sync.Mutex
	cur, old map[string]CacheEntry
	floor    time.Time // the latest stamp of an evicted entry (or of a tree change let go: trees)
	// trees: folder the mount removed (DropTree) -> when. No answer stamped before it is recorded for a
	// key below it, held or not (a listing of the folder sent before its rmdir, arriving after it, would
	// otherwise bring back the files unlinked just before, whose own stamps DropTree removed). At most
	// max/2: beyond, they become the floor.
	trees map[string]time.Time
	max   int
	added int         // entries recorded in cur since it became current (not counting those carried over)
	sweep *time.Timer // scheduled while entries exist
}

// maxEntryAge bounds the age of a cache entry: above the longest maxAge any caller passes to Get (the
// mount's 10-minute listing hint; stat, unlink and the index's decision use at most a minute) and the
// longest a reply can arrive late (s3client's operation timeout), so a swept entry, or a swept drop stamp,
// changes no answer.
const maxEntryAge = 15 * time.Minute

// pinFor is how long the mount's own changes are kept through evictions: above s3client's default
// operation timeout (60 s), the longest a reply sent before the change can arrive late.
const pinFor = 2 * time.Minute

// CacheEntry is one remembered answer.
type CacheEntry struct {
	Obj    Object // IsDir for directories
	Exists bool
	At     time.Time // when the request that produced it started (Put: when it was recorded)
	// dropped: forgotten (Get misses), kept only so that answers stamped before At cannot replace it.
	dropped bool
	// own: the mount's own change (Put, Drop), carried through evictions for pinFor.
	own bool
}

// NewAttrCache returns a cache bounded to about max entries (the mount's own changes of the last pinFor
// are kept beyond it).
func NewAttrCache(max int) *AttrCache {
	if max < 2 {
		max = 2
	}
	return &AttrCache{cur: make(map[string]CacheEntry), old: make(map[string]CacheEntry), trees: make(map[string]time.Time), max: max}
}

// Put records the result of an operation the mount has just completed itself (an upload, a delete, a
// mkdir): stamped now, it wins over every request that started before.
func (c *AttrCache) Put(key string, obj Object, exists bool) {
	c.store(key, CacheEntry{Obj: obj, Exists: exists, At: time.Now(), own: true})
}

// PutAt records what a listing or HEAD that started at `at` said about key (exists=false: it does not
// exist). It is ignored when the entry for key is stamped later: that entry came from a request sent after
// this one, or from the mount's own change, and may describe a newer version than this reply.
func (c *AttrCache) PutAt(key string, obj Object, exists bool, at time.Time) {
	c.store(key, CacheEntry{Obj: obj, Exists: exists, At: at})
}

func (c *AttrCache) store(key string, e CacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !e.own && c.underTreeDroppedAfter(key, e.At) {
		return
	}
	if old, ok := c.cur[key]; ok {
		if e.At.Before(old.At) {
			return
		}
	} else if old, ok := c.old[key]; ok {
		if e.At.Before(old.At) {
			return
		}
		delete(c.old, key)
	} else if e.At.Before(c.floor) {
		// An evicted entry for key may have been stamped later: this reply may describe an older version.
		return
	}
	if _, ok := c.cur[key]; !ok {
		c.added++
	}
	c.cur[key] = e
	if c.added >= c.max/2 {
		c.rotate(time.Now())
	}
	if c.sweep == nil {
		c.sweep = time.AfterFunc(maxEntryAge/3, c.sweepOld)
	}
}

// underTreeDroppedAfter reports whether a folder above key was removed through the mount at or after
// at. c.mu held.
func (c *AttrCache) underTreeDroppedAfter(key string, at time.Time) bool {
	if len(c.trees) == 0 {
		return false
	}
	for i := strings.LastIndexByte(key, '/'); i > 0; i = strings.LastIndexByte(key[:i], '/') {
		if t, ok := c.trees[key[:i]]; ok && !at.After(t) {
			return true
		}
	}
	return false
}

// rotate evicts the older generation, except the mount's own changes younger than pinFor, and makes the
// current generation the older one. c.mu held.
func (c *AttrCache) rotate(now time.Time) {
	next := make(map[string]CacheEntry)
	for k, e := range c.old {
		if e.own && now.Sub(e.At) < pinFor {
			next[k] = e
			continue
		}
		if e.At.After(c.floor) {
			c.floor = e.At
		}
	}
	c.old, c.cur = c.cur, next
	c.added = 0
}

// sweepOld drops the entries older than maxEntryAge and runs again while entries remain.
func (c *AttrCache) sweepOld() {
	c.Sweep(time.Now())
}

// Sweep drops the entries recorded more than maxEntryAge before now (the timer calls it; tests call it
// with a later now).
func (c *AttrCache) Sweep(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = c.sweepGen(c.cur, now)
	c.old = c.sweepGen(c.old, now)
	for k, t := range c.trees {
		if now.Sub(t) > maxEntryAge {
			delete(c.trees, k) // no reply sent before it can arrive any more
		}
	}
	if c.sweep != nil {
		c.sweep.Stop()
		c.sweep = nil
	}
	if len(c.cur)+len(c.old)+len(c.trees) == 0 {
		return
	}
	c.sweep = time.AfterFunc(maxEntryAge/3, c.sweepOld)
}

// sweepGen drops the entries of one generation older than maxEntryAge. c.mu held.
func (c *AttrCache) sweepGen(m map[string]CacheEntry, now time.Time) map[string]CacheEntry {
	before := len(m)
	for k, e := range m {
		if now.Sub(e.At) > maxEntryAge {
			if e.At.After(c.floor) {
				c.floor = e.At
			}
			delete(m, k)
		}
	}
	if len(m) < before/2 {
		// Go maps do not shrink: a copy gives the memory of a big walk back.
		n := make(map[string]CacheEntry, len(m))
		for k, e := range m {
			n[k] = e
		}
		return n
	}
	return m
}

// Len returns the number of entries held (tests, measurements).
func (c *AttrCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.old)
}

// Get returns the entry for key if it is younger than maxAge.
func (c *AttrCache) Get(key string, maxAge time.Duration) (CacheEntry, bool) {
	c.mu.Lock()
	e, ok := c.cur[key]
	if !ok {
		if e, ok = c.old[key]; ok && !e.dropped {
			c.cur[key] = e // in use: kept through the next eviction
			delete(c.old, key)
			if c.added++; c.added >= c.max/2 {
				c.rotate(time.Now())
			}
		}
	}
	c.mu.Unlock()
	if !ok || e.dropped || time.Since(e.At) > maxAge {
		return CacheEntry{}, false
	}
	return e, true
}

// Drop forgets key (after the mount changed it): Get misses until a request sent from now on answers.
func (c *AttrCache) Drop(key string) {
	c.store(key, CacheEntry{At: time.Now(), dropped: true, own: true})
}

// DropTree forgets key and everything below it (after a directory operation): Get misses for any of
// them until a request sent from now on answers.
func (c *AttrCache) DropTree(key string) {
	now := time.Now()
	c.mu.Lock()
	if len(c.trees) >= c.max/2 {
		for _, t := range c.trees {
			if t.After(c.floor) {
				c.floor = t
			}
		}
		clear(c.trees)
	}
	c.trees[key] = now
	if c.sweep == nil {
		c.sweep = time.AfterFunc(maxEntryAge/3, c.sweepOld)
	}
	p := key + "/"
	for _, m := range []map[string]CacheEntry{c.cur, c.old} {
		for k := range m {
			if strings.HasPrefix(k, p) {
				delete(m, k)
			}
		}
	}
	c.mu.Unlock()
	c.Drop(key)
}
