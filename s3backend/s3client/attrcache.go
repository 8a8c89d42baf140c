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
type AttrCache struct {
	mu      sync.Mutex
	entries map[string]CacheEntry
	max     int
	sweep   *time.Timer // scheduled while entries exist
}

// maxEntryAge bounds the age of a cache entry: above the longest maxAge any caller passes to Get (the
// mount's 10-minute listing hint; stat, unlink and the index's decision use at most a minute) and the
// longest a reply can arrive late (s3client's operation timeout), so a swept entry, or a swept drop stamp,
// changes no answer.
const maxEntryAge = 15 * time.Minute

// CacheEntry is one remembered answer.
type CacheEntry struct {
	Obj    Object // IsDir for directories
	Exists bool
	At     time.Time // when the request that produced it started (Put: when it was recorded)
	// dropped: forgotten (Get misses), kept only so that answers stamped before At cannot replace it.
	dropped bool
}

// NewAttrCache returns a cache bounded to max entries.
func NewAttrCache(max int) *AttrCache {
	return &AttrCache{entries: make(map[string]CacheEntry), max: max}
}

// Put records the result of an operation the mount has just completed itself (an upload, a delete, a
// mkdir): stamped now, it wins over every request that started before.
func (c *AttrCache) Put(key string, obj Object, exists bool) {
	c.PutAt(key, obj, exists, time.Now())
}

// PutAt records what a listing or HEAD that started at `at` said about key (exists=false: it does not
// exist). It is ignored when the entry for key is stamped later: that entry came from a request sent after
// this one, or from the mount's own change, and may describe a newer version than this reply.
func (c *AttrCache) PutAt(key string, obj Object, exists bool, at time.Time) {
	c.store(key, CacheEntry{Obj: obj, Exists: exists, At: at})
}

func (c *AttrCache) store(key string, e CacheEntry) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[key]; ok {
		if e.At.Before(old.At) {
			return
		}
	} else if len(c.entries) >= c.max {
		// Bounded memory: drop everything older than a minute, and if that is not enough, everything.
		for k, e := range c.entries {
			if now.Sub(e.At) > time.Minute {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= c.max {
			clear(c.entries)
		}
	}
	c.entries[key] = e
	if c.sweep == nil {
		c.sweep = time.AfterFunc(maxEntryAge/3, c.sweepOld)
	}
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
	before := len(c.entries)
	for k, e := range c.entries {
		if now.Sub(e.At) > maxEntryAge {
			delete(c.entries, k)
		}
	}
	if len(c.entries) < before/2 {
		// Go maps do not shrink: a copy gives the memory of a big walk back.
		m := make(map[string]CacheEntry, len(c.entries))
		for k, e := range c.entries {
			m[k] = e
		}
		c.entries = m
	}
	if c.sweep != nil {
		c.sweep.Stop()
		c.sweep = nil
	}
	if len(c.entries) == 0 {
		return
	}
	c.sweep = time.AfterFunc(maxEntryAge/3, c.sweepOld)
}

// Len returns the number of entries held (tests, measurements).
func (c *AttrCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Get returns the entry for key if it is younger than maxAge.
func (c *AttrCache) Get(key string, maxAge time.Duration) (CacheEntry, bool) {
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if !ok || e.dropped || time.Since(e.At) > maxAge {
		return CacheEntry{}, false
	}
	return e, true
}

// Drop forgets key (after the mount changed it): Get misses until a request sent from now on answers.
func (c *AttrCache) Drop(key string) {
	c.store(key, CacheEntry{At: time.Now(), dropped: true})
}

// DropTree forgets key and everything below it (after a directory operation).
func (c *AttrCache) DropTree(key string) {
	c.mu.Lock()
	p := key + "/"
	for k := range c.entries {
		if strings.HasPrefix(k, p) {
			delete(c.entries, k)
		}
	}
	c.mu.Unlock()
	c.Drop(key)
}
