package guard

import (
	"context"
	"os"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Caller is who asks, as the FUSE request names them: the filesystem uid and gid the kernel checks
// permissions with, and the supplementary groups of the calling thread. Visibility answers (which
// referencing checkpoints a caller may be told about) are decided with these, never with the daemon's
// own rights.
type Caller struct {
	UID, GID uint32
	// Groups are the caller's supplementary groups, read from /proc/<tid>/status; empty when that could
	// not be read or no longer names the request's uid and gid (the thread is gone, or in another pid
	// namespace): the caller is then judged by uid and gid alone, which can only hide more.
	Groups []uint32
	// Known is false when the request names no caller (not served through FUSE): nothing is visible.
	Known bool
}

// CallerOf returns the caller of the FUSE request in ctx.
func CallerOf(ctx context.Context) Caller {
	c, ok := fuse.FromContext(ctx)
	if !ok || c == nil {
		return Caller{}
	}
	cl := Caller{UID: c.Uid, GID: c.Gid, Known: true}
	if c.Pid != 0 {
		cl.Groups = threadGroups(c.Pid, c.Uid, c.Gid)
	}
	return cl
}

// threadGroups reads the supplementary groups of thread tid from /proc, only if its filesystem uid and gid
// there are the request's (so a reused thread id cannot lend another process's groups); nil otherwise.
func threadGroups(tid, uid, gid uint32) []uint32 {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return nil
	}
	var groups []uint32
	uidOK, gidOK := false, false
	for _, line := range strings.Split(string(b), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		switch key {
		case "Uid", "Gid":
			// real, effective, saved, filesystem: the kernel checks permissions with the last.
			if len(f) != 4 {
				return nil
			}
			want := uid
			if key == "Gid" {
				want = gid
			}
			if f[3] != strconv.FormatUint(uint64(want), 10) {
				return nil
			}
			if key == "Uid" {
				uidOK = true
			} else {
				gidOK = true
			}
		case "Groups":
			for _, s := range f {
				g, err := strconv.ParseUint(s, 10, 32)
				if err != nil {
					return nil
				}
				groups = append(groups, uint32(g))
			}
		}
	}
	if !uidOK || !gidOK {
		return nil
	}
	return groups
}

// InGroup reports whether g is the caller's gid or one of its supplementary groups.
func (c Caller) InGroup(g uint32) bool {
	if c.GID == g {
		return true
	}
	for _, x := range c.Groups {
		if x == g {
			return true
		}
	}
	return false
}

// ModePermits reports whether the permission bits perm of a file owned by uid:gid grant the caller every
// bit of want (4 read, 2 write, 1 search), by the owner / group / other classes as the kernel picks them
// without an ACL. Uid 0 is granted read and search (CAP_DAC_READ_SEARCH), never on an unknown caller.
func (c Caller) ModePermits(perm, uid, gid, want uint32) bool {
	if !c.Known {
		return false
	}
	if c.UID == 0 && want&^5 == 0 {
		return true
	}
	var bits uint32
	switch {
	case c.UID == uid:
		bits = perm >> 6
	case c.InGroup(gid):
		bits = perm >> 3
	default:
		bits = perm
	}
	return bits&7&want == want
}

// RefFolders returns the folders a caller must be able to list to find the _metadata key ref
// themselves: the root (""), then every folder down to the one holding it.
func RefFolders(ref string) []string {
	dirs := []string{""}
	for i := 0; i < len(ref); i++ {
		if ref[i] == '/' {
			dirs = append(dirs, ref[:i])
		}
	}
	return dirs
}

// VisibleFunc reports whether the caller of a getxattr could find referencing checkpoint ref (a
// _metadata key) themselves. Backends decide it by their own permission model.
type VisibleFunc func(ref string) bool

// refsValue is the user.ckguard.refs answer: the referencing checkpoints visible reports true for, one a
// line, then a count of the others, so a caller who may not see them still learns the file is
// referenced without learning by what.
func refsValue(refs []string, visible VisibleFunc) string {
	var b strings.Builder
	hidden := 0
	for _, r := range refs {
		if visible == nil || !visible(r) {
			hidden++
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(r)
	}
	if hidden > 0 {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(strconv.Itoa(hidden))
		if hidden == 1 {
			b.WriteString(" more checkpoint you cannot see")
		} else {
			b.WriteString(" more checkpoints you cannot see")
		}
	}
	return b.String()
}
