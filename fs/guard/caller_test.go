package guard

import (
	"reflect"
	"testing"
)

// TestRefsValueCountsHidden: refs the caller may not see are counted, never named; nil visible hides all.
func TestRefsValueCountsHidden(t *testing.T) {
	refs := []string{"a/chk-1/_metadata", "b/chk-2/_metadata", "b/chk-3/_metadata"}
	onlyA := func(r string) bool { return r[0] == 'a' }
	for _, c := range []struct {
		visible VisibleFunc
		want    string
	}{
		{func(string) bool { return true }, "a/chk-1/_metadata\nb/chk-2/_metadata\nb/chk-3/_metadata"},
		{onlyA, "a/chk-1/_metadata\n2 more checkpoints you cannot see"},
		{func(r string) bool { return r[0] == 'b' }, "b/chk-2/_metadata\nb/chk-3/_metadata\n1 more checkpoint you cannot see"},
		{nil, "3 more checkpoints you cannot see"},
	} {
		if got := refsValue(refs, c.visible); got != c.want {
			t.Errorf("refsValue = %q, want %q", got, c.want)
		}
	}
	if got := refsValue(nil, nil); got != "" {
		t.Errorf("no refs: %q", got)
	}
}

func TestRefFolders(t *testing.T) {
	got := RefFolders("j/chk-1/_metadata")
	if want := []string{"", "j", "j/chk-1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("RefFolders = %q, want %q", got, want)
	}
}

// TestModePermits: the class is picked first (owner, group, other), as the kernel does: an owner without
// the bits is refused even if other has them; an unknown caller is refused everything.
func TestModePermits(t *testing.T) {
	for _, c := range []struct {
		c              Caller
		perm, uid, gid uint32
		want           bool
	}{
		{Caller{UID: 5, GID: 5, Known: true}, 0o755, 1, 1, true},
		{Caller{UID: 5, GID: 5, Known: true}, 0o711, 1, 1, false},
		{Caller{UID: 1, GID: 5, Known: true}, 0o077, 1, 1, false},
		{Caller{UID: 5, GID: 5, Groups: []uint32{7}, Known: true}, 0o750, 1, 7, true},
		{Caller{UID: 5, GID: 7, Known: true}, 0o705, 1, 7, false},
		{Caller{UID: 0, GID: 0, Known: true}, 0o000, 1, 1, true},
		{Caller{}, 0o777, 0, 0, false},
	} {
		if got := c.c.ModePermits(c.perm, c.uid, c.gid, 5); got != c.want {
			t.Errorf("%+v on %o %d:%d = %v, want %v", c.c, c.perm, c.uid, c.gid, got, c.want)
		}
	}
}
