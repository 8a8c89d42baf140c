package hdfsmount

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/internal/attrcachetest"
	"github.com/ckguard/ckguard/refindex/store"
)

// TestAttrCache: a listing's answer never outlives the mount's own change of the name (drop), nor
// outlives the age a caller accepts, and a full cache forgets rather than grows.
func TestAttrCache(t *testing.T) {
	cases := []struct {
		name string
		run  func(c *attrCache, before, after time.Time)
		key  string
		want bool
	}{
		{"listed", func(c *attrCache, b, a time.Time) { putOne(c, "d/f", b) }, "d/f", true},
		{"listing sent before the drop", func(c *attrCache, b, a time.Time) { c.drop("d/f"); putOne(c, "d/f", b) }, "d/f", false},
		{"listing sent after the drop", func(c *attrCache, b, a time.Time) { c.drop("d/f"); putOne(c, "d/f", a) }, "d/f", true},
		{"older than accepted", func(c *attrCache, b, a time.Time) { putOne(c, "d/f", b.Add(-time.Hour)) }, "d/f", false},
		{"below a dropped tree", func(c *attrCache, b, a time.Time) { putOne(c, "d/e/f", b); c.dropTree("d") }, "d/e/f", false},
		// A listing under way below a directory the mount removes or renames (a prefetch) arrives after
		// the change: its page never answers for the old names.
		{"listing below a dropped tree sent before the drop", func(c *attrCache, b, a time.Time) { c.dropTree("d"); putOne(c, "d/e/f", b) }, "d/e/f", false},
		{"listing below a dropped tree sent after the drop", func(c *attrCache, b, a time.Time) { c.dropTree("d"); putOne(c, "d/e/f", a) }, "d/e/f", true},
		{"beside a dropped tree", func(c *attrCache, b, a time.Time) { putOne(c, "dd/f", b); c.dropTree("d") }, "dd/f", true},
		{"emptied when full", func(c *attrCache, b, a time.Time) {
			putOne(c, "a", b)
			putOne(c, "b", b)
			putOne(c, "c", b) // full: all go
			putOne(c, "d/f", b)
		}, "a", false},
		{"stale answer after emptying", func(c *attrCache, b, a time.Time) {
			putOne(c, "a", b)
			c.drop("d/f")
			putOne(c, "c", b)   // full: the drop's stamp goes with the rest
			putOne(c, "d/f", b) // a listing sent before the drop: the floor keeps it out
		}, "d/f", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newAttrCache(2)
			before := time.Now().Add(-time.Millisecond)
			tc.run(c, before, before.Add(time.Hour))
			if _, ok := c.get(tc.key, time.Minute); ok != tc.want {
				t.Errorf("get(%q) = %v, want %v", tc.key, ok, tc.want)
			}
		})
	}
}

// putOne records a listing of key alone (a page of one name).
func putOne(c *attrCache, key string, at time.Time) {
	c.put(parentKey(key), []hdfsclient.FileInfo{{Name: baseKey(key), Size: 7}}, at)
}

// TestAttrCachePages: a page answers for every name it lists, whatever order it came in, from the
// freshest page showing the name; names a listing never serves (symlinks, the quarantine folder) are
// never answered; a newer listing supersedes the names of an older one.
func TestAttrCachePages(t *testing.T) {
	c := newAttrCache(maxCached)
	old := time.Now().Add(-time.Second)
	now := old.Add(time.Millisecond)
	c.put("d", []hdfsclient.FileInfo{{Name: "z", Size: 1}, {Name: "a", Size: 1}, {Name: "m", Size: 1}, {Name: "l", Symlink: true}}, now)
	c.put("d", []hdfsclient.FileInfo{{Name: "a", Size: 2}, {Name: "b", Size: 2}}, old) // an older listing arriving late
	c.put("", []hdfsclient.FileInfo{{Name: store.QuarantineDir, IsDir: true}, {Name: "d", IsDir: true}}, now)
	for key, size := range map[string]int64{"d/a": 1, "d/m": 1, "d/z": 1, "d/b": 2} {
		if fi, ok := c.get(key, time.Minute); !ok || fi.Size != size {
			t.Errorf("get(%q) = %+v %v, want size %d", key, fi, ok, size)
		}
	}
	for _, key := range []string{"d/l", store.QuarantineDir, "d/c", "e/a"} {
		if fi, ok := c.get(key, time.Minute); ok {
			t.Errorf("get(%q) = %+v, want a miss", key, fi)
		}
	}
	if _, ok := c.get("d", time.Minute); !ok {
		t.Error("get(d) missed")
	}
	// Relisted: "m" is gone, "a" changed; the old pages of those names no longer answer.
	c.put("d", []hdfsclient.FileInfo{{Name: "a", Size: 3}, {Name: "z", Size: 3}}, now.Add(time.Millisecond))
	if fi, ok := c.get("d/a", time.Minute); !ok || fi.Size != 3 {
		t.Errorf("get(d/a) after the relisting = %+v %v, want size 3", fi, ok)
	}
	if fi, ok := c.get("d/m", time.Minute); ok {
		t.Errorf("get(d/m) after a relisting without it = %+v, want a miss", fi)
	}
	if c.held != 2+2 {
		t.Errorf("held %d names, want 4 (superseded pages are let go)", c.held)
	}
}

// TestListingCostsNoAllocationPerEntry: a listed page fills the attribute cache and becomes directory
// entries, and the entries reach go-fuse, without an allocation per entry (per-entry keys and copies
// were most of what find through the mount spent beyond the raw listing).
func TestListingCostsNoAllocationPerEntry(t *testing.T) {
	page := make([]hdfsclient.FileInfo, 1000)
	for i := range page {
		page[i] = hdfsclient.FileInfo{Name: fmt.Sprintf("f%07d", i), Size: 1}
	}
	f := &filesystem{attrs: newAttrCache(maxCached)}
	var ents []fuse.DirEntry
	if a := testing.AllocsPerRun(20, func() { ents = f.entries("d", page, time.Now()) }); a > 8 {
		t.Errorf("a page of %d entries cost %.0f allocations", len(page), a)
	}
	if fi, ok := f.attrs.get("d/f0000999", time.Minute); !ok || fi.Size != 1 {
		t.Errorf("the page did not fill the cache: %+v %v", fi, ok)
	}
	d := &dirHandle{fsys: f, key: "d", started: true, ordered: true}
	ctx := context.Background()
	if a := testing.AllocsPerRun(20, func() {
		d.queue = ents
		for range ents {
			if e, errno := d.Readdirent(ctx); e == nil || errno != 0 {
				t.Fatalf("Readdirent: %v %v", e, errno)
			}
		}
	}); a > 0 {
		t.Errorf("serving %d entries cost %.0f allocations", len(ents), a)
	}
}

// TestAttrCacheModel: the HDFS mount's attribute cache passes the attribute caches' one property test
// (each answer a one-name page of its folder's listing).
func TestAttrCacheModel(t *testing.T) {
	attrcachetest.Run(t, attrcachetest.Harness{
		New:    func(max int) attrcachetest.Cache { return hdfsCache{newAttrCache(max)} },
		MaxAge: statTTL, // lookups and getattr; an eviction forgets what is older
	})
}

type hdfsCache struct{ c *attrCache }

func (h hdfsCache) Listed(key string, size int64, at time.Time) {
	h.c.put(parentKey(key), []hdfsclient.FileInfo{{Name: baseKey(key), Size: size}}, at)
}
func (h hdfsCache) Changed(key string)     { h.c.drop(key) }
func (h hdfsCache) ChangedTree(key string) { h.c.dropTree(key) }
func (h hdfsCache) Get(key string, maxAge time.Duration) (int64, bool) {
	fi, ok := h.c.get(key, maxAge)
	return fi.Size, ok
}
