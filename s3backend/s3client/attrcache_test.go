package s3client_test

import (
	"fmt"
	"testing"
	"time"

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
