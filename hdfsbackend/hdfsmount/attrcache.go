package hdfsmount

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
)

// attrCache remembers what directory listings said about their entries, so the kernel's LOOKUP of
// every entry after a READDIRPLUS (find, rm -rf, ls -l) and the unlink that follows cost no NameNode
// stat each.
//
// Invariants:
//   - An entry is stamped with the START of the listing that produced it, and is never replaced by one
//     stamped earlier; the mount's own changes (unlink, rmdir, rename, create, truncate, mkdir, mtime)
//     drop the name and leave a stamp behind, so a listing already under way cannot bring back what
//     the mount has just changed.
//   - Callers bound the age they accept: lookup and getattr statTTL; an unlink's decision only
//     unlinkTTL (a change beside the mount within that window is judged on the listed attributes, as the
//     kernel's own entry cache would); everything else (open, truncate, rename, rmdir) stats afresh.
//   - Memory is bounded: at most max entries; when full, entries older than statTTL go, and if that
//     is not enough, all (an empty cache only costs stats; its floor keeps older answers out).
type attrCache struct {
	mu      sync.Mutex
	entries map[string]attrEntry
	max     int
	// floor: answers stamped before it are ignored (set when the cache is emptied for memory; an
	// evicted entry older than statTTL needs none: no caller accepts an answer that old).
	floor time.Time
}

type attrEntry struct {
	fi      hdfsclient.FileInfo
	at      time.Time
	dropped bool // a stamp only: get misses
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
	return &attrCache{entries: make(map[string]attrEntry), max: max}
}

// put records what a listing that started at `at` said about key.
func (c *attrCache) put(key string, fi hdfsclient.FileInfo, at time.Time) {
	c.store(key, attrEntry{fi: fi, at: at})
}

// drop forgets key after the mount changed it; answers stamped before now cannot bring it back.
func (c *attrCache) drop(key string) {
	c.store(key, attrEntry{at: time.Now(), dropped: true})
}

// dropTree forgets key and everything below it (a renamed or removed directory).
func (c *attrCache) dropTree(key string) {
	now := time.Now()
	prefix := key + "/"
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.entries {
		if strings.HasPrefix(k, prefix) {
			c.entries[k] = attrEntry{at: now, dropped: true}
		}
	}
	c.storeLocked(key, attrEntry{at: now, dropped: true}, now)
}

func (c *attrCache) store(key string, e attrEntry) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.storeLocked(key, e, now)
}

func (c *attrCache) storeLocked(key string, e attrEntry, now time.Time) {
	if old, ok := c.entries[key]; ok {
		if e.at.Before(old.at) {
			return
		}
	} else if len(c.entries) >= c.max {
		for k, o := range c.entries {
			if now.Sub(o.at) > statTTL {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= c.max {
			// Drop stamps go too: the floor keeps every listing started before now out instead.
			clear(c.entries)
			c.floor = now
		}
	}
	if e.at.Before(c.floor) {
		return
	}
	c.entries[key] = e
}

// get answers key from a listing at most maxAge old.
func (c *attrCache) get(key string, maxAge time.Duration) (hdfsclient.FileInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || e.dropped || time.Since(e.at) > maxAge {
		return hdfsclient.FileInfo{}, false
	}
	return e.fi, true
}

// listed reports whether a listing within relistWindow showed key (its attributes may be older than
// a caller accepts).
func (c *attrCache) listed(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	return ok && !e.dropped && time.Since(e.at) <= relistWindow
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

func parentKey(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return ""
}
