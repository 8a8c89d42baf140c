package localstore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mounts inside the store (issue 29, "no single entry stops the guard"): any user who may create a
// folder in the store (a 1777 scratch folder) can fusermount a file system there whose getattr and
// readdir never answer. Every lookup that crosses into it, a stat of the mount point itself included,
// goes to that file system, so a walk that touched it would block forever in the kernel: the sync
// would never end (every deletion refused store-wide) and a decision walking there would hold the
// enforcer's lock. So the store never crosses a mount point below its root:
//   - a walk reads the daemon's mount table first (mountsBelow, once per walk) and reports each mount
//     point below the root as an unknown subtree without opening, stating or listing it (the owner
//     given is its parent folder's, read from the parent);
//   - every resolution beneath the root is made with RESOLVE_NO_XDEV (openat2), so a mount made after
//     the table was read, and a Stat or Open of a key below a mount point, fail at once with EXDEV in
//     the kernel's path walk, which sends nothing to the mounted file system.

// ErrMounted is the cause of an unknown subtree that is a mount point inside the store, and what Stat
// and Open return (wrapped) for a key at or below one.
var ErrMounted = errors.New("another filesystem is mounted here; ckguard does not walk into mounts inside the store (unmount it, or mount the store there as its own ckguard store)")

// mountError names the mount point mp (an OS path) for ErrMounted.
type mountError struct {
	mp    string
	above bool // mp is the key asked for: the mount point is it or a folder above it
}

func (e *mountError) Error() string {
	at := e.mp
	if e.above {
		at += " or a folder above it in the store"
	}
	return fmt.Sprintf("another filesystem is mounted at %s; ckguard does not walk into mounts inside the store (unmount it, or mount the store there as its own ckguard store)", at)
}

func (e *mountError) Unwrap() error { return ErrMounted }

// mountInfoPath is the mount table read; a variable for tests.
var mountInfoPath = "/proc/self/mountinfo"

// fdPath returns the path the kernel holds for the open descriptor fd (the store root's real path,
// whatever symlink it was opened through).
func fdPath(fd int) (string, error) {
	return os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
}

// mountPoint is a mount below the store root, as the mount table describes it.
type mountPoint struct {
	// uid is who mounted it when an unprivileged user did (a FUSE mount's user_id, which fusermount
	// sets to its caller; hasUID): the owner of what it holds. A mount made by root (user_id=0, or no
	// FUSE) is owned as the folder it is mounted on.
	uid    uint32
	hasUID bool
}

// mountsBelow returns the mount points strictly below the folder open at rootFd, as store keys (clean,
// relative). It reads the mount table only: nothing on a mounted file system is touched.
func mountsBelow(rootFd int) (map[string]mountPoint, error) {
	root, err := fdPath(rootFd)
	if err != nil {
		return nil, fmt.Errorf("the store root's real path: %w", err)
	}
	b, err := os.ReadFile(mountInfoPath)
	if err != nil {
		return nil, fmt.Errorf("the mount table: %w", err)
	}
	return parseMountsBelow(b, root), nil
}

// parseMountsBelow returns the mount points of mountinfo b (proc(5): the fifth field, octal escapes
// such as \040 for a space; after the " - " separator the type, the source and the super options)
// strictly below the absolute path root, relative to it.
func parseMountsBelow(b []byte, root string) map[string]mountPoint {
	prefix := strings.TrimSuffix(root, "/") + "/"
	out := map[string]mountPoint{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountPath(f[4])
		if !strings.HasPrefix(mp, prefix) || len(mp) == len(prefix) {
			continue
		}
		var m mountPoint
		for i := 5; i+3 < len(f); i++ {
			if f[i] != "-" {
				continue
			}
			if strings.HasPrefix(f[i+1], "fuse") {
				for _, o := range strings.Split(f[i+3], ",") {
					if v, ok := strings.CutPrefix(o, "user_id="); ok {
						if n, err := strconv.ParseUint(v, 10, 32); err == nil && n != 0 {
							m.uid, m.hasUID = uint32(n), true
						}
					}
				}
			}
			break
		}
		out[strings.TrimSuffix(mp[len(prefix):], "/")] = m
	}
	return out
}

// unescapeMountPath undoes the kernel's octal escapes (\ooo) of space, tab, newline and backslash.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// mountAt returns the mount point among mounts at or above key k (a key), "" when none.
func mountAt(mounts map[string]mountPoint, k string) string {
	for p := k; p != ""; {
		if _, ok := mounts[p]; ok {
			return p
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return ""
}

// mountedErr explains EXDEV from a resolution of key k beneath the root: with RESOLVE_BENEATH and
// RESOLVE_NO_SYMLINKS on a clean key (no "..", no symlink followed), only RESOLVE_NO_XDEV answers it,
// so k lies at or below a mount point; the mount table names it when it can.
func (s *Store) mountedErr(k string) error {
	if rfd, err := s.rootFd(unix.O_PATH); err == nil {
		mounts, err := mountsBelow(rfd)
		unix.Close(rfd)
		if mp := mountAt(mounts, k); err == nil && mp != "" {
			return &mountError{mp: s.osPath(mp)}
		}
	}
	return &mountError{mp: s.osPath(k), above: true}
}
