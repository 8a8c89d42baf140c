package s3mount

import (
	"strings"
	"sync"
	"time"

	"github.com/ckguard/ckguard/s3backend/s3client"
)

// statCache remembers what listings and HEADs said about keys, so the kernel's LOOKUP/GETATTR after a
// readdir (find, rm -rf, ls -l) costs no request. Entries are valid for the mount's StatTTL when they answer
// stat; the mount's own operations (create, write, unlink, rename, mkdir, rmdir) update or drop them at once,
// so only changes made beside the mount can be seen late, by at most StatTTL (plus the kernel's 1 s entry
// and attribute timeout). Unlink may use an older entry's ETag, because its DeleteObject is conditional on
// that ETag: a stale one fails (412) and unlink looks again (docs/SEMANTICS.md).
type statCache struct {
	mu      sync.Mutex
	entries map[string]cacheEntry
	max     int
}

type cacheEntry struct {
	obj    s3client.Object // IsDir for directories
	exists bool
	at     time.Time
}

func newStatCache(max int) *statCache {
	return &statCache{entries: make(map[string]cacheEntry), max: max}
}

func (c *statCache) put(key string, obj s3client.Object, exists bool) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		// Bounded memory: drop everything older than a minute, and if that is not enough, everything.
		for k, e := range c.entries {
			if now.Sub(e.at) > time.Minute {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= c.max {
			clear(c.entries)
		}
	}
	c.entries[key] = cacheEntry{obj: obj, exists: exists, at: now}
}

// get returns the entry for key if it is younger than maxAge.
func (c *statCache) get(key string, maxAge time.Duration) (cacheEntry, bool) {
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if !ok || time.Since(e.at) > maxAge {
		return cacheEntry{}, false
	}
	return e, true
}

func (c *statCache) drop(key string) {
	c.mu.Lock()
	delete(c.entries, key)
	c.mu.Unlock()
}

// dropTree drops key and everything below it (after a directory operation).
func (c *statCache) dropTree(key string) {
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
