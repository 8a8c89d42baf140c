package localfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/internal/fusetest"
)

type env struct {
	store, mnt, auditPath string
	checker               *guardtest.Checker
	m                     *Mounted
	met                   *metrics.Metrics
}

func mountFake(t *testing.T) *env {
	t.Helper()
	fusetest.Require(t)
	dir := t.TempDir()
	e := &env{store: filepath.Join(dir, "store"), mnt: filepath.Join(dir, "mnt"), auditPath: filepath.Join(dir, "audit.jsonl")}
	for _, d := range []string{e.store, e.mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.checker = guardtest.New()
	al, err := audit.Open(e.auditPath, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.met = metrics.New()
	enf, err := guard.NewEnforcer(guard.Config{Checker: e.checker, Audit: al, Metrics: e.met})
	if err != nil {
		t.Fatal(err)
	}
	e.m, err = Mount(Options{Store: e.store, Mountpoint: e.mnt, Enforcer: enf, Metrics: e.met})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.m.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		al.Close()
	})
	return e
}

func (e *env) write(t *testing.T, key, data string) {
	t.Helper()
	p := filepath.Join(e.store, key)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *env) exists(key string) bool {
	_, err := os.Lstat(filepath.Join(e.store, key))
	return err == nil
}

// TestUserXattrsReachTheStore: extended attributes other than the guard's own pass through to the store's
// file (the mount contract suite reads them back through the mount).
func TestUserXattrsReachTheStore(t *testing.T) {
	e := mountFake(t)
	e.write(t, "j/s/free", "f")
	if err := unix.Setxattr(filepath.Join(e.mnt, "j/s/free"), "user.note", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if n, err := unix.Getxattr(filepath.Join(e.store, "j/s/free"), "user.note", buf); err != nil || string(buf[:n]) != "x" {
		t.Errorf("user.note in store: %q %v", buf[:n], err)
	}
}

// TestReaddirLargeAndSeek: a big folder lists completely, checkpoint entries first, and a seek back into the
// streamed part resumes exactly there.
func TestReaddirLargeAndSeek(t *testing.T) {
	// 1,500 short names fit the handle's first read (served from it); 3,000 long ones take several reads
	// (the folder is read a second time to stream them).
	for _, tc := range []struct {
		name   string
		n      int
		prefix string
	}{
		{"one read", 1500, "f"},
		{"several reads", 3000, "sst-0123456789abcdef0123456789abcdef-"},
	} {
		t.Run(tc.name, func(t *testing.T) { testReaddirSeek(t, tc.n, tc.prefix) })
	}
}

func testReaddirSeek(t *testing.T, n int, prefix string) {
	e := mountFake(t)
	for i := range n {
		e.write(t, "job/shared/"+prefix+itoa(uint64(i)), "")
	}
	for _, k := range []string{"job/shared/chk-3/x", "job/shared/chk-12/x", "job/shared/_metadata"} {
		e.write(t, k, "")
	}
	names := func(fd int, max int) []string {
		var out []string
		buf := make([]byte, 4096)
		for max < 0 || len(out) < max {
			nb, err := unix.Getdents(fd, buf)
			if err != nil {
				t.Fatal(err)
			}
			if nb == 0 {
				break
			}
			for b := buf[:nb]; len(b) > 0; {
				reclen := int(b[16]) | int(b[17])<<8
				name := b[19:reclen]
				if i := strings.IndexByte(string(name), 0); i >= 0 {
					name = name[:i]
				}
				out = append(out, string(name))
				b = b[reclen:]
			}
		}
		return out
	}
	fd, err := unix.Open(filepath.Join(e.mnt, "job/shared"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	all := names(fd, -1)
	if len(all) != n+5 { // + . .. _metadata chk-12 chk-3
		t.Fatalf("listed %d entries, want %d", len(all), n+5)
	}
	if got := strings.Join(all[:5], " "); got != ". .. _metadata chk-12 chk-3" {
		t.Fatalf("head %q", got)
	}
	seen := map[string]bool{}
	for _, x := range all {
		if seen[x] {
			t.Fatalf("%s listed twice", x)
		}
		seen[x] = true
	}
	// Rewind, read part of the streamed region, remember the position, read on, seek back, compare.
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		t.Fatal(err)
	}
	head := names(fd, 1000)
	off, err := unix.Seek(fd, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	rest := names(fd, -1)
	if _, err := unix.Seek(fd, off, 0); err != nil {
		t.Fatal(err)
	}
	again := names(fd, -1)
	if strings.Join(rest, "/") != strings.Join(again, "/") || len(head)+len(rest) != len(all) {
		t.Fatalf("seek back to %d: %d then %d entries (%d in all); resumed listing differs", off, len(head), len(again), len(all))
	}
}

// TestTmpfile: an O_TMPFILE opened through the mount is an unnamed file in the store folder beneath the
// root: writable, stat-able through its descriptor, and it adds no name to the folder.
func TestTmpfile(t *testing.T) {
	e := mountFake(t)
	e.write(t, "job/chk-1/x", "x")
	fd, err := unix.Open(filepath.Join(e.mnt, "job/chk-1"), unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) {
		t.Skipf("the kernel or backing filesystem has no O_TMPFILE through FUSE: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if n, err := unix.Write(fd, []byte("unnamed")); err != nil || n != 7 {
		t.Fatalf("write: %d %v", n, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != 7 {
		t.Errorf("fstat of the tmpfile: mode %o size %d, want a regular file of 7 bytes", st.Mode, st.Size)
	}
	ents, err := os.ReadDir(filepath.Join(e.store, "job/chk-1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "x" {
		t.Errorf("the folder in the store holds %v, want only x (a tmpfile has no name)", ents)
	}
}
