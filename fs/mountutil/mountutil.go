// Package mountutil prepares and tears down FUSE mountpoints: it recognizes a stale mount left by a crashed
// daemon ("transport endpoint is not connected") and replaces it, refuses to stack on a live mount, and
// unmounts as root (umount2) or as a user (fusermount3).
package mountutil

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// MountInfo is one line of /proc/self/mountinfo that matters here.
type MountInfo struct {
	Mountpoint string
	FSType     string
	Source     string
	Dev        string // "major:minor" of the mounted filesystem (a FUSE mount's minor is its connection number)
}

// Lookup returns the mount whose mountpoint is exactly path, if any.
func Lookup(path string) (*MountInfo, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	var found *MountInfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+2 >= len(fields) {
			continue
		}
		if unescape(fields[4]) == abs {
			// The last match wins: it is the top of the stack.
			found = &MountInfo{Mountpoint: abs, FSType: fields[sep+1], Source: unescape(fields[sep+2]), Dev: fields[2]}
		}
	}
	return found, sc.Err()
}

// unescape undoes the octal escapes (\040 for space, ...) of /proc/self/mountinfo.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ErrLive is returned by Prepare when a working mount already sits on the mountpoint.
var ErrLive = errors.New("already mounted")

// Prepare makes mnt ready for a new FUSE mount. A stale FUSE mount (its daemon died: every access fails with
// ENOTCONN) is detached and reported through the returned bool; a live mount is ErrLive; a missing directory
// is an error that says so.
func Prepare(mnt string) (replacedStale bool, err error) {
	_, statErr := os.Stat(mnt)
	if statErr == nil {
		// The kernel may answer stat from the dead mount's attribute cache for a while (its timeout);
		// statfs always asks the daemon, so a dead one shows at once.
		var st syscall.Statfs_t
		if err := syscall.Statfs(mnt, &st); err != nil {
			statErr = &os.PathError{Op: "statfs", Path: mnt, Err: err}
		}
	}
	if errors.Is(statErr, syscall.ENOTCONN) || errors.Is(statErr, syscall.ECONNABORTED) {
		if err := Unmount(mnt, true); err != nil {
			return false, fmt.Errorf("mountpoint %s: stale FUSE mount (transport endpoint is not connected) could not be detached: %w", mnt, err)
		}
		if _, err := os.Stat(mnt); err != nil {
			return true, fmt.Errorf("mountpoint %s after detaching the stale mount: %w", mnt, err)
		}
		return true, nil
	}
	if statErr != nil {
		return false, fmt.Errorf("mountpoint %s: %w (create the directory first)", mnt, statErr)
	}
	mi, err := Lookup(mnt)
	if err != nil {
		return false, err
	}
	if mi != nil && strings.HasPrefix(mi.FSType, "fuse") {
		return false, fmt.Errorf("mountpoint %s: %w (%s from %s); run `ckguard umount %s` first", mnt, ErrLive, mi.FSType, mi.Source, mnt)
	}
	return false, nil
}

// Unmount unmounts mnt; lazy detaches it even if busy (for stale mounts). As root it uses umount2(2); otherwise
// fusermount3, which lets the user who mounted it unmount it.
func Unmount(mnt string, lazy bool) error {
	if os.Geteuid() == 0 {
		flags := 0
		if lazy {
			flags = syscall.MNT_DETACH
		}
		err := syscall.Unmount(mnt, flags)
		if err == nil || !errors.Is(err, syscall.EPERM) {
			if err != nil {
				return fmt.Errorf("unmount %s: %w", mnt, err)
			}
			return nil
		}
	}
	args := []string{"-u"}
	if lazy {
		args = append(args, "-z")
	}
	bin := "fusermount3"
	if _, err := exec.LookPath(bin); err != nil {
		bin = "fusermount"
	}
	out, err := exec.Command(bin, append(args, mnt)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s -u %s: %v: %s", bin, mnt, err, strings.TrimSpace(string(out)))
	}
	return nil
}
