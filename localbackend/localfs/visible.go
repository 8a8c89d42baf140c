package localfs

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/guard"
)

// refsVisible decides, for one user.ckguard.refs answer, which referencing checkpoints the caller could
// find by listing from the mount's root: read and search permission on every folder of the _metadata
// key's path (guard.RefFolders), judged on those folders' owner, mode and POSIX ACL against the caller's
// uid, gid and groups, never by the daemon's own (often root's) rights. A folder that cannot be
// examined, is not a folder, or holds an ACL that cannot be parsed hides the checkpoint (fail closed).
// Folders shared by several checkpoints are examined once per answer.
func (r *storeRoot) refsVisible(c guard.Caller) guard.VisibleFunc {
	seen := map[string]bool{}
	return func(ref string) bool {
		for _, dir := range guard.RefFolders(ref) {
			ok, done := seen[dir]
			if !done {
				ok = r.canList(dir, c)
				seen[dir] = ok
			}
			if !ok {
				return false
			}
		}
		return true
	}
}

// canList reports whether the caller may read and search folder key ("" = the root), as the kernel's
// generic permission check would decide it (owner, then named user, then the groups, then other, an
// ACL's mask limiting the group class).
func (r *storeRoot) canList(key string, c guard.Caller) bool {
	if !c.Known {
		return false
	}
	if c.UID == 0 {
		return true // CAP_DAC_READ_SEARCH: root reads and searches every folder (and may be told of a lost one)
	}
	var st syscall.Stat_t
	if err := r.lstat(key, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return false
	}
	a, err := r.readACL(key, st.Mode)
	if errors.Is(err, unix.ENOTSUP) {
		a, err = modeACL(st.Mode), nil // no ACLs on this file system: the mode alone decides
	}
	if err != nil {
		return false
	}
	return a.permits(c, st.Uid, st.Gid, 5)
}

// permits reports whether the ACL of a file owned by uid:gid grants the caller every bit of want, in the
// kernel's order (posix_acl_permission): the owner entry, a named user entry, then the owning group and
// named groups (any matching one granting it suffices, the mask applied), then other.
func (a *acl) permits(c guard.Caller, uid, gid uint32, want uint16) bool {
	if c.UID == uid {
		return a.userObj&want == want
	}
	if p, ok := a.users[c.UID]; ok {
		return a.masked(p)&want == want
	}
	matched := false
	if c.InGroup(gid) {
		matched = true
		if a.masked(a.groupObj)&want == want {
			return true
		}
	}
	for g, p := range a.groups {
		if c.InGroup(g) {
			matched = true
			if a.masked(p)&want == want {
				return true
			}
		}
	}
	if matched {
		return false
	}
	return a.other&want == want
}
