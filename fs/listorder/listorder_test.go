package listorder

import (
	"strings"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

func TestOrder(t *testing.T) {
	tests := []struct{ in, want string }{
		{". .. shared chk-9 taskowned chk-10 _metadata chk-100 zzz", ". .. _metadata chk-100 chk-10 chk-9 shared taskowned zzz"},
		{"b a c", "b a c"}, // no checkpoint names: the directory's own order, untouched
		{"chk-x chk-2 chk- chk-1 savepoint-1 _metadata", "_metadata chk-2 chk-1 chk- chk-x savepoint-1"},
		{"", ""},
	}
	for _, tc := range tests {
		var in []fuse.DirEntry
		for _, n := range strings.Fields(tc.in) {
			in = append(in, fuse.DirEntry{Name: n})
		}
		var got []string
		for _, e := range Order(in) {
			got = append(got, e.Name)
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("Order(%q) = %q, want %q", tc.in, g, tc.want)
		}
	}
}
