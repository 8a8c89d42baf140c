package localfs

import (
	"testing"

	"github.com/ckguard/ckguard/fs/guard"
)

// TestACLPermitsKernelOrder: a folder's ACL decides listing as posix_acl_permission does: owner entry,
// named user, then any matching group entry under the mask, else other.
func TestACLPermitsKernelOrder(t *testing.T) {
	a := &acl{userObj: 7, groupObj: 5, other: 5, mask: 1, users: map[uint32]uint16{9: 7}, groups: map[uint32]uint16{20: 5}}
	who := func(uid, gid uint32, groups ...uint32) guard.Caller {
		return guard.Caller{UID: uid, GID: gid, Groups: groups, Known: true}
	}
	for _, c := range []struct {
		name string
		c    guard.Caller
		want bool
	}{
		{"owner", who(1, 1), true},
		{"named user under the mask", who(9, 9), false},
		{"owning group under the mask", who(3, 2), false},
		{"named group under the mask", who(3, 3, 20), false},
		{"other", who(3, 3), true},
	} {
		if got := a.permits(c.c, 1, 2, 5); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	a.mask = 7
	if !a.permits(who(3, 3, 20), 1, 2, 5) || !a.permits(who(9, 9), 1, 2, 5) {
		t.Error("a wide mask should grant the named entries")
	}
	if modeACL(0o711).permits(who(3, 3), 1, 2, 5) {
		t.Error("0711 lets others list")
	}
}
