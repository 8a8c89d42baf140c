package localfs

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestACLDecidedLikeChmod: an ACL change through the mount that takes read access away from a referenced
// file (or a folder holding one) is refused like the chmod it amounts to; adding access, and any ACL change
// of an unreferenced file, pass. As the files' owner, an unprivileged user, with setfacl and with the raw
// extended attribute.
func TestACLDecidedLikeChmod(t *testing.T) {
	if _, err := exec.LookPath("setfacl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("setfacl (acl) is required")
		}
		t.Skip("setfacl not installed")
	}
	store := t.TempDir()
	if err := os.Chmod(store, 0o755); err != nil {
		t.Fatal(err)
	}
	e := mountShared(t, store)
	type file struct {
		key  string
		mode os.FileMode
		acl  string // setfacl -m spec applied in the store first ("": none)
		ref  bool
	}
	files := []file{
		{"job/shared/ref.sst", 0o644, "", true},
		{"job/shared/ref2.sst", 0o644, "", true},
		{"job/shared/ref3.sst", 0o644, "", true},
		{"job/shared/named.sst", 0o640, "u:1234:r", true},
		{"job/shared/nfs4.sst", 0o644, "", true},
		{"job/shared/free.sst", 0o644, "", false},
		{"job/chk-1/held/state", 0o644, "", true},
	}
	for _, f := range files {
		e.write(t, f.key, "data")
		p := filepath.Join(store, f.key)
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
		if f.acl != "" {
			if out, err := exec.Command("setfacl", "-m", f.acl, p).CombinedOutput(); err != nil {
				t.Fatalf("setfacl %s: %v %s", f.acl, err, out)
			}
		}
		if f.ref {
			e.checker.Protect(f.key, "job/chk-1/_metadata")
		}
	}
	if out, err := exec.Command("chown", "-R", nobody+":"+nobody, filepath.Join(store, "job")).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	m := func(k string) string { return filepath.Join(e.mnt, k) }
	// A minimal ACL u::---,g::---,o::--- in the xattr format, set with os.setxattr.
	minimal := make([]byte, 4+3*8)
	binary.LittleEndian.PutUint32(minimal, aclVersion)
	for i, tag := range []uint16{aclUserObj, aclGroupObj, aclOther} {
		binary.LittleEndian.PutUint16(minimal[4+8*i:], tag)
		binary.LittleEndian.PutUint32(minimal[4+8*i+4:], 0xffffffff)
	}
	rawSet := func(p, name string, v []byte) []string {
		return []string{"/usr/bin/python3", "-c", "import os, sys; os.setxattr(sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3]))", p, name, hexOf(v)}
	}
	tests := []struct {
		name    string
		argv    []string
		refused bool
		key     string // whose mode must not change when refused
	}{
		{"setfacl u::---,g::---,o::--- on a referenced file", []string{"setfacl", "-m", "u::---,g::---,o::---", m("job/shared/ref.sst")}, true, "job/shared/ref.sst"},
		{"raw minimal system.posix_acl_access on a referenced file", rawSet(m("job/shared/ref2.sst"), xattrACLAccess, minimal), true, "job/shared/ref2.sst"},
		{"setfacl -b dropping the named reader of a referenced file", []string{"setfacl", "-b", m("job/shared/named.sst")}, true, "job/shared/named.sst"},
		{"setfacl -x of the named reader of a referenced file", []string{"setfacl", "-x", "u:1234", m("job/shared/named.sst")}, true, "job/shared/named.sst"},
		{"setfacl g::---,o::--- on a folder holding a referenced file", []string{"setfacl", "-m", "g::---,o::---", m("job/chk-1/held")}, true, "job/chk-1/held"},
		{"an NFSv4 ACL on a referenced file", rawSet(m("job/shared/nfs4.sst"), "system.nfs4_acl", []byte{0, 0, 0, 0}), true, "job/shared/nfs4.sst"},
		{"setfacl adding a reader to a referenced file", []string{"setfacl", "-m", "u:4321:r", m("job/shared/ref3.sst")}, false, ""},
		{"setfacl taking write away from a referenced file", []string{"setfacl", "-m", "g::r,o::r", m("job/shared/ref3.sst")}, false, ""},
		{"setfacl u::---,g::---,o::--- on an unreferenced file", []string{"setfacl", "-m", "u::---,g::---,o::---", m("job/shared/free.sst")}, false, ""},
	}
	for _, tc := range tests {
		var before os.FileMode
		if tc.key != "" {
			st, err := os.Stat(filepath.Join(store, tc.key))
			if err != nil {
				t.Fatal(err)
			}
			before = st.Mode()
		}
		out, err := asNobody(t, tc.argv...)
		if refused := err != nil; refused != tc.refused {
			t.Errorf("%s as uid %s: refused=%v (%v %s), want refused=%v", tc.name, nobody, refused, err, out, tc.refused)
			continue
		}
		if tc.refused && !strings.Contains(strings.ToLower(out), "not permitted") {
			t.Errorf("%s: %s, want EPERM", tc.name, out)
		}
		if tc.key != "" {
			st, err := os.Stat(filepath.Join(store, tc.key))
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode() != before {
				t.Errorf("%s: mode %v -> %v although refused", tc.name, before, st.Mode())
			}
		}
	}
	if st, _ := os.Stat(filepath.Join(store, "job/shared/free.sst")); st == nil || st.Mode().Perm() != 0 {
		t.Errorf("the unreferenced file's ACL change did not take effect: %v", st)
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// FuzzParseACL: any xattr value is parsed or refused without a panic, and what parses has its three
// mandatory entries.
func FuzzParseACL(f *testing.F) {
	ok := make([]byte, 4+3*8)
	binary.LittleEndian.PutUint32(ok, aclVersion)
	for i, tag := range []uint16{aclUserObj, aclGroupObj, aclOther} {
		binary.LittleEndian.PutUint16(ok[4+8*i:], tag)
	}
	f.Add(ok)
	f.Add([]byte{2, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := parseACL(b)
		if err != nil {
			return
		}
		if a.mask < -1 || a.mask > 7 || a.userObj > 7 || a.groupObj > 7 || a.other > 7 {
			t.Fatalf("parsed out of range: %+v", a)
		}
		_ = narrowsACL(a, modeACL(0), false)
	})
}
