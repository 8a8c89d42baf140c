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
type AttrCache struct {
	mu      sync.Mutex
	entries map[string]CacheEntry
	max     int
}

// CacheEntry is one remembered answer.
type CacheEntry struct {
	Obj    Object // IsDir for directories
	Exists bool
	At     time.Time
}

// NewAttrCache returns a cache bounded to max entries.
func NewAttrCache(max int) *AttrCache {
	return &AttrCache{entries: make(map[string]CacheEntry), max: max}
}

// Put records what a listing or HEAD said about key (exists=false: it does not exist).
func (c *AttrCache) Put(key string, obj Object, exists bool) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
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
	c.entries[key] = CacheEntry{Obj: obj, Exists: exists, At: now}
}

// Get returns the entry for key if it is younger than maxAge.
func (c *AttrCache) Get(key string, maxAge time.Duration) (CacheEntry, bool) {
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if !ok || time.Since(e.At) > maxAge {
		return CacheEntry{}, false
	}
	return e, true
}

// Drop forgets key.
func (c *AttrCache) Drop(key string) {
	c.mu.Lock()
	delete(c.entries, key)
	c.mu.Unlock()
}

// DropTree forgets key and everything below it (after a directory operation).
func (c *AttrCache) DropTree(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
	p := key + "/"
	for k := range c.entries {
		if strings.HasPrefix(k, p) {
			delete(c.entries, k)
		}
	}
}
