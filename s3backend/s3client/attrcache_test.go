package s3client_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ckguard/ckguard/internal/attrcachetest"
	. "github.com/ckguard/ckguard/s3backend/s3client"
)

// TestAttrCacheKeepsLaterStamp: an entry is replaced only by one whose request started no earlier:
// a late listing reply does not undo a HEAD, an own write or a Drop that came after it was sent.
func TestAttrCacheKeepsLaterStamp(t *testing.T) {
	t0 := time.Now()
	old := Object{Key: "k", ETag: "old"}
	young := Object{Key: "k", ETag: "young"}
	tests := []struct {
		name    string
		setup   func(c *AttrCache)
		want    string // ETag of the entry afterwards, "" for a miss
		wantHit bool
	}{
		{"later answer replaces", func(c *AttrCache) { c.PutAt("k", old, true, t0); c.PutAt("k", young, true, t0.Add(time.Millisecond)) }, "young", true},
		{"earlier answer ignored", func(c *AttrCache) { c.PutAt("k", young, true, t0); c.PutAt("k", old, true, t0.Add(-time.Millisecond)) }, "young", true},
		{"own write wins over a listing sent before it", func(c *AttrCache) { c.Put("k", young, true); c.PutAt("k", old, true, t0) }, "young", true},
		{"listing sent before a drop cannot resurrect", func(c *AttrCache) { c.Drop("k"); c.PutAt("k", old, true, t0) }, "", false},
		{"listing sent after a drop answers", func(c *AttrCache) { c.Drop("k"); c.PutAt("k", young, true, time.Now()) }, "young", true},
		{"negative entry from a later HEAD wins", func(c *AttrCache) {
			c.PutAt("k", old, true, t0)
			c.PutAt("k", Object{Key: "k"}, false, t0.Add(time.Second))
		}, "", true},
		{"tree drop stops children and the key", func(c *AttrCache) {
			c.PutAt("k/a", old, true, t0)
			c.DropTree("k")
			c.PutAt("k", old, true, t0)
		}, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewAttrCache(100)
			tc.setup(c)
			e, ok := c.Get("k", time.Hour)
			if ok != tc.wantHit || e.Obj.ETag != tc.want {
				t.Fatalf("Get = %+v, %v; want ETag %q, hit %v", e, ok, tc.want, tc.wantHit)
			}
		})
	}
	c := NewAttrCache(100)
	c.PutAt("k/a", old, true, t0)
	c.DropTree("k")
	if _, ok := c.Get("k/a", time.Hour); ok {
		t.Fatal("DropTree kept an entry below the key")
	}
}

// TestAttrCacheSweepsOldEntries: entries older than any caller reads are dropped, so a walk over many
// objects (find, rm -rf) does not leave one entry per visited object behind for good.
func TestAttrCacheSweepsOldEntries(t *testing.T) {
	c := NewAttrCache(1000)
	now := time.Now()
	for i, age := range []time.Duration{0, time.Minute, 10 * time.Minute, 16 * time.Minute, time.Hour} {
		c.PutAt(fmt.Sprintf("k%d", i), Object{Key: fmt.Sprintf("k%d", i)}, true, now.Add(-age))
	}
	c.Sweep(now)
	if n := c.Len(); n != 3 {
		t.Errorf("after the sweep %d entries, want the 3 younger than 15 min", n)
	}
	if _, ok := c.Get("k2", 11*time.Minute); !ok {
		t.Error("a 10-minute-old entry (the listing hint's range) was swept")
	}
	c.Sweep(now.Add(time.Hour))
	if n := c.Len(); n != 0 {
		t.Errorf("an hour later %d entries remain", n)
	}
}

// TestAttrCacheBoundedKeepsWhatEntriesProtect: a cache filled far past its bound holds about the bound;
// the mount's own changes survive the evictions while a reply sent before them can still arrive; and no
// late reply replaces an evicted entry stamped after it (the stamp outlives the entry).
func TestAttrCacheBoundedKeepsWhatEntriesProtect(t *testing.T) {
	const max = 100
	c := NewAttrCache(max)
	t0 := time.Now().Add(-time.Second)
	c.Put("deleted", Object{Key: "deleted"}, false) // an unlink through the mount
	c.Drop("rewritten")                             // an upload through the mount
	c.PutAt("listed", Object{Key: "listed", ETag: "v2"}, true, time.Now())
	for i := range 10 * max {
		k := fmt.Sprintf("walk/%04d", i)
		c.PutAt(k, Object{Key: k}, true, time.Now())
	}
	if n := c.Len(); n > max+2 {
		t.Errorf("after 10x the bound the cache holds %d entries, want about %d", n, max)
	}
	if e, ok := c.Get("deleted", time.Minute); !ok || e.Exists {
		t.Errorf("the mount's own deletion was evicted: %+v %v", e, ok)
	}
	// Replies sent before the mount's changes, arriving late, change nothing.
	c.PutAt("deleted", Object{Key: "deleted", ETag: "old"}, true, t0)
	c.PutAt("rewritten", Object{Key: "rewritten", ETag: "old"}, true, t0)
	if e, ok := c.Get("deleted", time.Minute); !ok || e.Exists {
		t.Errorf("a late listing brought the deleted key back: %+v", e)
	}
	if e, ok := c.Get("rewritten", time.Minute); ok {
		t.Errorf("a late listing replaced the drop of an own upload: %+v", e)
	}
	// "listed" was evicted; a reply older than it must not come back in its place.
	if _, ok := c.Get("listed", time.Minute); ok {
		t.Fatal("the listed entry was not evicted; the test does not test the floor")
	}
	c.PutAt("listed", Object{Key: "listed", ETag: "v1"}, true, t0)
	if e, ok := c.Get("listed", time.Minute); ok {
		t.Errorf("a late reply replaced an evicted, newer entry: %+v", e)
	}
	c.PutAt("listed", Object{Key: "listed", ETag: "v3"}, true, time.Now())
	if e, ok := c.Get("listed", time.Minute); !ok || e.Obj.ETag != "v3" {
		t.Errorf("a reply sent after the eviction is not recorded: %+v %v", e, ok)
	}
	// Own changes are carried only while a reply sent before them can arrive.
	c.RotateAt(time.Now().Add(PinFor + time.Second))
	c.RotateAt(time.Now().Add(PinFor + time.Second))
	if _, ok := c.Get("deleted", time.Hour); ok {
		t.Error("an own change older than pinFor survived two evictions")
	}
}

// TestAttrCacheKeepsEntriesInUse: an entry read between evictions moves to the current generation and
// survives the next one.
func TestAttrCacheKeepsEntriesInUse(t *testing.T) {
	c := NewAttrCache(100)
	c.PutAt("hot", Object{Key: "hot"}, true, time.Now())
	for i := range 1000 {
		k := fmt.Sprintf("k%04d", i)
		c.PutAt(k, Object{Key: k}, true, time.Now())
		if i%20 == 0 {
			if _, ok := c.Get("hot", time.Minute); !ok {
				t.Fatalf("the entry in use was evicted after %d others", i)
			}
		}
	}
}

// TestAttrCacheModel: the S3 mount's attribute cache passes the attribute caches' one property test.
func TestAttrCacheModel(t *testing.T) {
	attrcachetest.Run(t, attrcachetest.Harness{
		New:    func(max int) attrcachetest.Cache { return s3Cache{NewAttrCache(max)} },
		MaxAge: 10 * time.Minute, // the mount's listing hint, the longest age a caller accepts
	})
}

// s3Cache drives an AttrCache as the mount does: listings by PutAt, its own changes by Drop/DropTree.
type s3Cache struct{ c *AttrCache }

func (s s3Cache) Listed(key string, size int64, at time.Time) {
	s.c.PutAt(key, Object{Key: key, Size: size}, true, at)
}
func (s s3Cache) Changed(key string)     { s.c.Drop(key) }
func (s s3Cache) ChangedTree(key string) { s.c.DropTree(key) }
func (s s3Cache) Get(key string, maxAge time.Duration) (int64, bool) {
	e, ok := s.c.Get(key, maxAge)
	return e.Obj.Size, ok && e.Exists
}

// TestAttrCacheLateListingAfterRmdir: a listing of a folder sent before rm -rf unlinked a file in it
// and removed the folder, answering after both, brings the file back neither while the cache holds the
// unlink's stamp nor after DropTree removed it (the property test found this: DropTree forgot the
// stamps below the folder, so the late reply was recorded and stat answered a deleted file).
func TestAttrCacheLateListingAfterRmdir(t *testing.T) {
	c := NewAttrCache(1000)
	sent := time.Now()
	time.Sleep(time.Millisecond)
	c.Drop("a/x")   // unlink a/x
	c.DropTree("a") // rmdir a
	c.PutAt("a/x", Object{Key: "a/x", ETag: "gone"}, true, sent)
	c.PutAt("a/b/y", Object{Key: "a/b/y", ETag: "gone"}, true, sent)
	for _, k := range []string{"a/x", "a/b/y"} {
		if e, ok := c.Get(k, time.Hour); ok {
			t.Errorf("%s answered from a listing sent before the folder was removed: %+v", k, e)
		}
	}
	c.PutAt("a/x", Object{Key: "a/x", ETag: "new"}, true, time.Now()) // a listing sent since
	if e, ok := c.Get("a/x", time.Hour); !ok || e.Obj.ETag != "new" {
		t.Errorf("a listing sent after the removal is not answered: %+v %v", e, ok)
	}
}
