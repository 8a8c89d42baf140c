package mounttest

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The guard's own extended attributes: computed from the index, never stored.
const (
	xattrState = "user.ckguard.state"
	xattrRefs  = "user.ckguard.refs"
)

// guardXattrs: user.ckguard.state and user.ckguard.refs explain a file's state; they are not listed by
// listxattr, so cp -a, rsync -X and mv do not copy them to where they would be a lie, and setting or
// removing them is refused. Where the store keeps extended attributes, others pass through.
func guardXattrs(t *testing.T, h Harness) {
	e := start(t, h, syscall.EPERM)
	e.st.Put(t, "j/s/ref", "r")
	e.st.Put(t, "j/s/free", "f")
	e.st.Put(t, "j/s/young", "y")
	e.st.Put(t, "j/chk-1/_metadata", "m") // the referencing checkpoints exist: the caller could list them
	e.st.Put(t, "k/chk-2/_metadata", "m")
	e.ck.Protect("j/s/ref", "j/chk-1/_metadata", "k/chk-2/_metadata")
	e.ck.Young("j/s/young")
	get := func(key, attr string) string {
		t.Helper()
		buf := make([]byte, 1024)
		n, err := unix.Getxattr(e.path(key), attr, buf)
		if err != nil {
			t.Errorf("getxattr %s %s: %v", key, attr, err)
			return ""
		}
		return string(buf[:n])
	}
	for _, tc := range []struct{ key, attr, want string }{
		{"j/s/ref", xattrState, "referenced"},
		{"j/s/ref", xattrRefs, "j/chk-1/_metadata\nk/chk-2/_metadata"},
		{"j/s/free", xattrState, "deletable"},
		{"j/s/free", xattrRefs, ""},
		{"j/s/young", xattrState, "in-grace"},
	} {
		if got := get(tc.key, tc.attr); got != tc.want {
			t.Errorf("%s of %s = %q, want %q", tc.attr, tc.key, got, tc.want)
		}
	}
	// A size query (an empty buffer) answers the length, as getfattr asks first.
	if n, err := unix.Getxattr(e.path("j/s/ref"), xattrState, nil); err != nil || n != len("referenced") {
		t.Errorf("getxattr size query: %d %v, want %d", n, err, len("referenced"))
	}
	want(t, "setxattr of "+xattrState, retryEINTR(func() error { return unix.Setxattr(e.path("j/s/free"), xattrState, []byte("deletable"), 0) }), syscall.EPERM)
	want(t, "removexattr of "+xattrState, retryEINTR(func() error { return unix.Removexattr(e.path("j/s/ref"), xattrState) }), syscall.EPERM)
	e.intact(t, "after setxattr", "j/s/ref", "r")

	if h.UserXattrs {
		want(t, "setxattr user.note", retryEINTR(func() error { return unix.Setxattr(e.path("j/s/free"), "user.note", []byte("x"), 0) }), 0)
		if got := get("j/s/free", "user.note"); got != "x" {
			t.Errorf("user.note read back %q, want x", got)
		}
	}
	for _, key := range []string{"j/s/ref", "j/s/free"} {
		names := list(t, e.path(key))
		for _, n := range names {
			if strings.HasPrefix(n, "user.ckguard.") {
				t.Errorf("listxattr of %s lists %s (cp -a and rsync -X would copy it): %q", key, n, names)
			}
		}
		if h.UserXattrs && key == "j/s/free" && !strings.Contains(strings.Join(names, ","), "user.note") {
			t.Errorf("listxattr of %s = %q, want user.note listed", key, names)
		}
	}
	// The tools users run: getfattr reads the attribute by name; getfattr -d and cp -a, which go by
	// the list, neither show nor copy it.
	if _, err := exec.LookPath("getfattr"); err == nil {
		out, err := exec.Command("getfattr", "--only-values", "-n", xattrState, e.path("j/s/ref")).Output()
		if err != nil || string(out) != "referenced" {
			t.Errorf("getfattr -n %s: %q %v", xattrState, out, err)
		}
		out, _ = exec.Command("getfattr", "-d", "-m", "-", e.path("j/s/ref")).CombinedOutput()
		if bytes.Contains(out, []byte("ckguard")) {
			t.Errorf("getfattr -d shows the guard's attributes: %s", out)
		}
	} else {
		t.Logf("getfattr not installed (package attr): the getfattr checks did not run")
	}
	cp := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", e.path("j/s/ref"), cp).CombinedOutput(); err != nil {
		t.Errorf("cp -a of a referenced file: %v %s", err, out)
	}
	for _, n := range list(t, cp) {
		if strings.HasPrefix(n, "user.ckguard.") {
			t.Errorf("cp -a copied %s off the mount", n)
		}
	}
}

// list returns the names listxattr gives for p.
func list(t *testing.T, p string) []string {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := unix.Listxattr(p, buf)
	if err != nil {
		t.Errorf("listxattr %s: %v", p, err)
		return nil
	}
	var names []string
	for _, s := range strings.Split(string(buf[:n]), "\x00") {
		if s != "" {
			names = append(names, s)
		}
	}
	return names
}
