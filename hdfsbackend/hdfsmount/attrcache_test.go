package hdfsmount

import (
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
)

// TestAttrCache: a listing's answer never outlives the mount's own change of the name (drop), nor
// outlives the age a caller accepts, and a full cache forgets rather than grows.
func TestAttrCache(t *testing.T) {
	fi := hdfsclient.FileInfo{Name: "f", Size: 7}
	cases := []struct {
		name string
		run  func(c *attrCache, before, after time.Time)
		key  string
		want bool
	}{
		{"listed", func(c *attrCache, b, a time.Time) { c.put("d/f", fi, b) }, "d/f", true},
		{"listing sent before the drop", func(c *attrCache, b, a time.Time) { c.drop("d/f"); c.put("d/f", fi, b) }, "d/f", false},
		{"listing sent after the drop", func(c *attrCache, b, a time.Time) { c.drop("d/f"); c.put("d/f", fi, a) }, "d/f", true},
		{"older than accepted", func(c *attrCache, b, a time.Time) { c.put("d/f", fi, b.Add(-time.Hour)) }, "d/f", false},
		{"below a dropped tree", func(c *attrCache, b, a time.Time) { c.put("d/e/f", fi, b); c.dropTree("d") }, "d/e/f", false},
		{"beside a dropped tree", func(c *attrCache, b, a time.Time) { c.put("dd/f", fi, b); c.dropTree("d") }, "dd/f", true},
		{"emptied when full", func(c *attrCache, b, a time.Time) {
			c.put("a", fi, b)
			c.put("b", fi, b)
			c.put("c", fi, b) // full: all go
			c.put("d/f", fi, b)
		}, "a", false},
		{"stale answer after emptying", func(c *attrCache, b, a time.Time) {
			c.put("a", fi, b)
			c.drop("d/f")
			c.put("c", fi, b)   // full: the drop's stamp goes with the rest
			c.put("d/f", fi, b) // a listing sent before the drop: the floor keeps it out
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
