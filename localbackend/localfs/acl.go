package localfs

import (
	"encoding/binary"
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// Extended attributes that hold access control lists. A POSIX ACL on the file itself can take read access
// away exactly like chmod (`setfacl -m u::---,g::---,o::---` gives mode 000), so a change of it is decided
// like a chmod when it takes read access away (see aclNarrows); the default ACL of a folder only shapes
// files created later. NFSv4 ACLs are not parsed: any change of one is decided.
const xattrACLAccess = "system.posix_acl_access"

var nfs4ACLXattrs = map[string]bool{"system.nfs4_acl": true, "system.nfs4acl": true, "system.richacl": true}

// POSIX ACL entry tags and the xattr format's version (linux/posix_acl_xattr.h).
const (
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20
	aclVersion  = 2
	// aclMaxEntries bounds what is parsed: the kernel's own limit for an xattr value is 64 KiB, 8 bytes an
	// entry.
	aclMaxEntries = 64 << 10 / 8
)

// acl is a parsed POSIX access ACL, reduced to who may do what.
type acl struct {
	userObj, groupObj, other uint16
	mask                     int // -1: no mask entry
	users, groups            map[uint32]uint16
}

var errBadACL = errors.New("malformed POSIX ACL")

// parseACL parses the system.posix_acl_access xattr format: a 4-byte version, then 8-byte entries
// (tag, permissions, id; little endian).
func parseACL(b []byte) (*acl, error) {
	if len(b) < 4 || binary.LittleEndian.Uint32(b) != aclVersion || (len(b)-4)%8 != 0 || (len(b)-4)/8 > aclMaxEntries {
		return nil, errBadACL
	}
	a := &acl{mask: -1}
	seen := 0
	for e := b[4:]; len(e) >= 8; e = e[8:] {
		tag, perm, id := binary.LittleEndian.Uint16(e), binary.LittleEndian.Uint16(e[2:])&7, binary.LittleEndian.Uint32(e[4:])
		switch tag {
		case aclUserObj, aclGroupObj, aclOther, aclMask:
			if seen&int(tag) != 0 {
				return nil, errBadACL
			}
			seen |= int(tag)
		}
		switch tag {
		case aclUserObj:
			a.userObj = perm
		case aclGroupObj:
			a.groupObj = perm
		case aclOther:
			a.other = perm
		case aclMask:
			a.mask = int(perm)
		case aclUser:
			if a.users == nil {
				a.users = map[uint32]uint16{}
			}
			a.users[id] = perm
		case aclGroup:
			if a.groups == nil {
				a.groups = map[uint32]uint16{}
			}
			a.groups[id] = perm
		default:
			return nil, errBadACL
		}
	}
	if seen&(aclUserObj|aclGroupObj|aclOther) != aclUserObj|aclGroupObj|aclOther {
		return nil, errBadACL
	}
	return a, nil
}

// modeACL is the ACL a mode alone amounts to.
func modeACL(mode uint32) *acl {
	return &acl{userObj: uint16(mode >> 6 & 7), groupObj: uint16(mode >> 3 & 7), other: uint16(mode & 7), mask: -1}
}

// masked is what a group-class entry (owning group, named user or group) grants once the mask applies.
func (a *acl) masked(p uint16) uint16 {
	if a.mask >= 0 {
		return p & uint16(a.mask)
	}
	return p
}

// narrowsACL reports whether going from old to next takes read access (read and search, for a folder)
// away from anyone who had it, and leaves the file not readable by everyone: the chmod rule
// (node.narrowsAccess) for ACLs. A named user or group next no longer lists counts as losing what it had.
func narrowsACL(old, next *acl, dir bool) bool {
	read := uint16(4)
	if dir {
		read = 5
	}
	if next.other&read == read {
		return false
	}
	lost := func(had, has uint16) bool { return had&read == read && has&read != read }
	if lost(old.userObj, next.userObj) || lost(old.masked(old.groupObj), next.masked(next.groupObj)) || lost(old.other, next.other) {
		return true
	}
	for id, p := range old.users {
		if lost(old.masked(p), next.masked(next.users[id])) {
			return true
		}
	}
	for id, p := range old.groups {
		if lost(old.masked(p), next.masked(next.groups[id])) {
			return true
		}
	}
	return false
}

// aclNarrows reports whether setting (data != nil) or removing (data == nil) extended attribute attr of
// the file at n takes read access away (see narrowsACL), so the change is decided as OpChmod. What cannot
// be read or parsed is decided (fail closed); NFSv4 ACLs always are.
func (n *node) aclNarrows(attr string, data []byte, remove bool) bool {
	if nfs4ACLXattrs[attr] {
		return true
	}
	if attr != xattrACLAccess {
		return false
	}
	var st syscall.Stat_t
	if err := n.root.lstat(n.key(), &st); err != nil {
		return true
	}
	old, err := n.root.readACL(n.key(), st.Mode)
	if err != nil {
		return true
	}
	next := modeACL(st.Mode)
	if !remove {
		var err error
		if next, err = parseACL(data); err != nil {
			return true
		}
	}
	return narrowsACL(old, next, st.Mode&syscall.S_IFMT == syscall.S_IFDIR)
}

// readACL is the access ACL of the file at key whose mode is mode: its system.posix_acl_access, or what
// the mode amounts to when it has none (ENODATA). Every other error (a read that fails, an ACL that does
// not parse, a file system without ACLs: ENOTSUP) is returned, for the caller to fail closed on.
func (r *storeRoot) readACL(key string, mode uint32) (*acl, error) {
	var buf [4 + 8*32]byte
	var cur []byte
	err := r.onFile(key, func(p string) error {
		sz, err := unix.Getxattr(p, xattrACLAccess, buf[:])
		if err == unix.ERANGE {
			// Larger than 32 entries: read it whole.
			big := make([]byte, 64<<10)
			sz, err = unix.Getxattr(p, xattrACLAccess, big)
			cur = big[:max(sz, 0)]
			return err
		}
		cur = buf[:max(sz, 0)]
		return err
	})
	if errors.Is(err, unix.ENODATA) {
		return modeACL(mode), nil
	}
	if err != nil {
		return nil, err
	}
	return parseACL(cur)
}
