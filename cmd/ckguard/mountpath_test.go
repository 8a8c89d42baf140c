package main

import (
	"strings"
	"testing"
)

func TestReadGuardMounts(t *testing.T) {
	table := strings.Join([]string{
		`22 1 0:21 / /proc rw,nosuid - proc proc rw`,
		`42 27 0:39 / /tmp/pt/mnt rw,nosuid,nodev,relatime - fuse.ckguard /tmp/pt/store rw,user_id=0`,
		`43 27 0:40 / /mnt/with\040space rw shared:7 - fuse.ckguard /srv/ck\040store rw`,
		`44 27 0:41 / /mnt/s3 rw - fuse.ckguard s3://bucket/ckpt rw`,
		`45 27 0:42 / /mnt/other rw - fuse.sshfs host:/x rw`,
		`garbage line`,
	}, "\n")
	got := readGuardMounts(strings.NewReader(table))
	want := []guardMount{{"/tmp/pt/mnt", "/tmp/pt/store"}, {"/mnt/with space", "/srv/ck store"}, {"/mnt/s3", "s3://bucket/ckpt"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mount %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestMountRelative(t *testing.T) {
	mounts := []guardMount{{"/mnt/ck", "/srv/ck"}, {"/mnt/s3", "s3://bucket/ckpt"}}
	tests := []struct {
		store, abs, key string
		ok              bool
	}{
		{"/srv/ck", "/mnt/ck/job/shared/x", "job/shared/x", true},
		{"/srv/ck/", "/mnt/ck", "", true},
		{"/srv/ck", "/mnt/ckx/job", "", false},            // a sibling folder, not below the mount
		{"/srv/other", "/mnt/ck/job/shared/x", "", false}, // a mount of another store
		{"s3://bucket/ckpt", "/mnt/s3/job/chk-1/_metadata", "job/chk-1/_metadata", true},
		{"/srv/ck", "/elsewhere/x", "", false},
	}
	for _, tt := range tests {
		key, ok := mountRelative(mounts, tt.store, tt.abs)
		if key != tt.key || ok != tt.ok {
			t.Errorf("mountRelative(%q, %q) = %q, %v; want %q, %v", tt.store, tt.abs, key, ok, tt.key, tt.ok)
		}
	}
}

// escapeMountinfo escapes s the way the kernel writes paths and sources into /proc/self/mountinfo: space,
// tab, newline and backslash as three octal digits.
func escapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\\':
			b.WriteByte('\\')
			b.WriteByte('0' + c>>6)
			b.WriteByte('0' + c>>3&7)
			b.WriteByte('0' + c&7)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// FuzzReadGuardMounts: whatever bytes a mountpoint and a store name hold (the kernel forbids only NUL),
// the mount table line the kernel writes for them parses back to exactly them; and any table, however
// mangled, parses without a panic.
func FuzzReadGuardMounts(f *testing.F) {
	f.Add("/mnt/with space", "/srv/ck\\store", "garbage - fuse.ckguard")
	f.Add("/m\tn\nt", "s3://bucket/ckpt", "1 2 3 4 5 - fuse.ckguard")
	f.Add("/mnt/\\040", "/srv/x\\", "")
	f.Fuzz(func(t *testing.T, mountpoint, source, table string) {
		_ = readGuardMounts(strings.NewReader(table))
		if mountpoint == "" || source == "" || strings.ContainsRune(mountpoint+source, 0) {
			return
		}
		line := "43 27 0:40 / " + escapeMountinfo(mountpoint) + " rw shared:7 - fuse.ckguard " + escapeMountinfo(source) + " rw,user_id=0"
		got := readGuardMounts(strings.NewReader(line))
		if len(got) != 1 || got[0] != (guardMount{mountpoint, source}) {
			t.Fatalf("line %q parsed as %+v, want mountpoint %q source %q", line, got, mountpoint, source)
		}
	})
}
