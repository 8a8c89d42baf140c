package main

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// guardMount is one ckguard mount from the mount table: where it is mounted and which store it guards.
type guardMount struct {
	mountpoint string
	source     string // the --store it was mounted with (a directory or an s3:// URL)
}

// readGuardMounts lists the ckguard mounts in a /proc/self/mountinfo-format table. Only mounts of type
// fuse.ckguard count, so a path under some other FUSE mount is never mistaken for a store path.
func readGuardMounts(r io.Reader) []guardMount {
	var out []guardMount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent dev root mountpoint options [optional...] - fstype source superoptions, separated by
		// single spaces. Not strings.Fields: the kernel escapes only space, tab, newline and backslash, so a
		// name may hold a carriage return or a Unicode space, which Fields would split at.
		f := strings.Split(sc.Text(), " ")
		// The separator follows the six fixed fields and the optional ones; a mountpoint named "-" is not it.
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+2 >= len(f) || f[sep+1] != "fuse.ckguard" {
			continue
		}
		out = append(out, guardMount{mountpoint: unescapeMountinfo(f[4]), source: unescapeMountinfo(f[sep+2])})
	}
	return out
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space, \011, \012, \134).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, ok := octal3(s[i+1 : i+4]); ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func octal3(s string) (byte, bool) {
	if len(s) != 3 {
		return 0, false
	}
	var v int
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, false
		}
		v = v*8 + int(c-'0')
	}
	if v > 255 {
		return 0, false
	}
	return byte(v), true
}

// sameStore reports whether a mount's source names the store given on the command line.
func sameStore(source, store string) bool {
	if source == store || strings.TrimSuffix(source, "/") == strings.TrimSuffix(store, "/") {
		return true
	}
	a, errA := filepath.Abs(store)
	if errA != nil {
		return false
	}
	return evalOr(a) == evalOr(source)
}

// mountRelative maps an absolute path under a ckguard mount of store to the store key it shows, so
// `ckguard why /mnt/ckpt/job/shared/x` asks about the object the mount exposes there.
func mountRelative(mounts []guardMount, store, abs string) (string, bool) {
	for _, m := range mounts {
		if !sameStore(m.source, store) {
			continue
		}
		rel, err := filepath.Rel(m.mountpoint, abs)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		if rel == "." {
			return "", true
		}
		return filepath.ToSlash(rel), true
	}
	return "", false
}

// localGuardMounts reads this machine's mount table; no table means no mounts to map.
func localGuardMounts() []guardMount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	return readGuardMounts(f)
}
