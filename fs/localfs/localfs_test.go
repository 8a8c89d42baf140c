package localfs

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/fs/internal/fusetest"
	"github.com/ckguard/ckguard/fs/metrics"
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

func TestGuardedOperations(t *testing.T) {
	e := mountFake(t)
	e.write(t, "job/chk-1/_metadata", "meta")
	e.write(t, "job/shared/ref.sst", "referenced")
	e.write(t, "job/shared/free.sst", "garbage")
	e.checker.Protect("job/shared/ref.sst", "job/chk-1/_metadata")
	e.write(t, "job/shared/private.sst", "readable by owner and group")
	if err := os.Chmod(filepath.Join(e.store, "job/shared/private.sst"), 0o640); err != nil {
		t.Fatal(err)
	}
	e.checker.Protect("job/shared/private.sst", "job/chk-1/_metadata")
	m := func(k string) string { return filepath.Join(e.mnt, k) }

	tests := []struct {
		name string
		do   func() error
		want error // nil: allowed
		gone string
	}{
		{"unlink referenced", func() error { return os.Remove(m("job/shared/ref.sst")) }, syscall.EPERM, ""},
		{"truncate referenced", func() error { return os.Truncate(m("job/shared/ref.sst"), 0) }, syscall.EPERM, ""},
		{"open O_TRUNC referenced", func() error {
			f, err := os.OpenFile(m("job/shared/ref.sst"), os.O_WRONLY|os.O_TRUNC, 0)
			if err == nil {
				f.Close()
			}
			return err
		}, syscall.EPERM, ""},
		{"open for write referenced", func() error {
			f, err := os.OpenFile(m("job/shared/ref.sst"), os.O_WRONLY|os.O_APPEND, 0)
			if err == nil {
				f.Close()
			}
			return err
		}, syscall.EPERM, ""},
		{"rename referenced", func() error { return os.Rename(m("job/shared/ref.sst"), m("job/x.sst")) }, syscall.EPERM, ""},
		{"rename onto referenced", func() error { return os.Rename(m("job/shared/free.sst"), m("job/shared/ref.sst")) }, syscall.EPERM, ""},
		{"rename dir holding referenced", func() error { return os.Rename(m("job"), m("job2")) }, syscall.EPERM, ""},
		{"hard link to referenced", func() error { return os.Link(m("job/shared/ref.sst"), m("job/alias")) }, syscall.EPERM, ""},
		{"rmdir holding referenced", func() error { return syscall.Rmdir(m("job/shared")) }, syscall.EPERM, ""},
		{"setxattr guard namespace", func() error { return unix.Setxattr(m("job/shared/free.sst"), XattrState, []byte("deletable"), 0) }, syscall.EPERM, ""},
		{"read referenced", func() error { _, err := os.ReadFile(m("job/shared/ref.sst")); return err }, nil, ""},
		// A referenced file its Flink user can no longer read fails the restore too.
		{"chmod referenced, taking read away", func() error { return os.Chmod(m("job/shared/ref.sst"), 0o600) }, syscall.EPERM, ""},
		{"chmod referenced, readable by owner and group only, taking group read away", func() error { return os.Chmod(m("job/shared/private.sst"), 0o600) }, syscall.EPERM, ""},
		// A restore (cp -a, tar -p as root) gives files and folders their owner after creating
		// them owner-only: a change of owner is not decided.
		{"chown referenced", func() error { return os.Chown(m("job/shared/private.sst"), 65534, 65534) }, nil, ""},
		{"chmod referenced, taking write away", func() error { return os.Chmod(m("job/shared/ref.sst"), 0o444) }, nil, ""},
		{"chmod 000 of a folder holding referenced", func() error { return os.Chmod(m("job/shared"), 0) }, syscall.EPERM, ""},
		{"chmod referenced, adding permissions", func() error { return os.Chmod(m("job/shared/ref.sst"), 0o664) }, nil, ""},
		{"chown referenced to the owner it has", func() error { return os.Chown(m("job/shared/ref.sst"), os.Getuid(), -1) }, nil, ""},
		{"chmod unreferenced, taking read away", func() error { return os.Chmod(m("job/shared/free.sst"), 0o600) }, nil, ""},
		{"unlink unreferenced", func() error { return os.Remove(m("job/shared/free.sst")) }, nil, "job/shared/free.sst"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
			} else if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if b, err := os.ReadFile(filepath.Join(e.store, "job/shared/ref.sst")); err != nil || string(b) != "referenced" {
				t.Fatalf("referenced file damaged: %q %v", b, err)
			}
			if tc.gone != "" && e.exists(tc.gone) {
				t.Fatalf("%s still in the store", tc.gone)
			}
		})
	}
	if !slices.Contains(e.checker.CallLog(), "deleted job/shared/free.sst") {
		t.Errorf("index not told about the deletion: %v", e.checker.CallLog())
	}
	recs, err := audit.ReadFile(e.auditPath)
	if err != nil {
		t.Fatal(err)
	}
	var refused, allowed int
	for _, r := range recs {
		switch r.Decision {
		case "refuse":
			if r.Errno == "EINTR" {
				// An attempt interrupted by Go's preemption signal (FUSE_INTERRUPT): the caller retried, and
				// the retry is the refusal counted here.
				continue
			}
			refused++
			if r.Errno != "EPERM" || r.Reason != "referenced" || r.PID == 0 || r.Comm == "" || len(r.Referencing) == 0 {
				t.Errorf("incomplete refusal record: %+v", r)
			}
		case "allow":
			allowed++
		}
	}
	// setxattr is refused by the filesystem without a decision; every other refusal is in the log.
	// Widening a mode or changing an owner is not decided; narrowing an unreferenced file's mode is an allow.
	if refused != 12 || allowed != 2 {
		t.Errorf("audit log: %d refusals, %d allows; want 12 and 2:\n%+v", refused, allowed, recs)
	}
}

func TestHardLinkRule(t *testing.T) {
	e := mountFake(t)
	e.write(t, "a/free", "data")
	m := func(k string) string { return filepath.Join(e.mnt, k) }
	if err := os.Link(m("a/free"), m("a/alias")); err != nil {
		t.Fatalf("link to an unreferenced file: %v", err)
	}
	// Now a checkpoint references the data by its first name: the second name must not reach it.
	e.checker.Protect("a/free", "job/chk-9/_metadata")
	if err := os.Truncate(m("a/alias"), 0); !errors.Is(err, syscall.EPERM) {
		t.Errorf("truncate through second name: %v, want EPERM", err)
	}
	if _, err := os.OpenFile(m("a/alias"), os.O_WRONLY, 0); !errors.Is(err, syscall.EPERM) {
		t.Errorf("open for write through second name: %v, want EPERM", err)
	}
	if err := os.Remove(m("a/alias")); err != nil {
		t.Errorf("unlink of the unreferenced second name: %v (the data survives under the first)", err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.store, "a/free")); string(b) != "data" {
		t.Errorf("data damaged: %q", b)
	}
}

func TestReaddirOrder(t *testing.T) {
	e := mountFake(t)
	for _, k := range []string{"job/shared/x", "job/chk-9/f", "job/taskowned/y", "job/chk-10/f", "job/chk-100/f", "job/_metadata", "job/zzz", "job/chk-x/f"} {
		e.write(t, k, "d")
	}
	ents, err := os.ReadDir(filepath.Join(e.mnt, "job"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range ents {
		names = append(names, d.Name())
	}
	// os.ReadDir sorts; read the raw order instead.
	f, err := os.Open(filepath.Join(e.mnt, "job"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	raw, err := f.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(raw[:5], " ")
	if want := "_metadata chk-100 chk-10 chk-9 chk-x"; got != want {
		t.Errorf("raw order starts %q, want %q (all: %v)", got, want, raw)
	}
	if len(raw) != len(names) {
		t.Errorf("raw listing %v vs %v", raw, names)
	}
}

func TestMetadataIndexedBeforeCloseReturns(t *testing.T) {
	e := mountFake(t)
	if err := os.MkdirAll(filepath.Join(e.mnt, "job/chk-5"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Set from the FUSE server goroutine; the kernel orders it before close returns, which the race
	// detector cannot see, hence the atomic.
	var sawContent atomic.Value
	sawContent.Store("")
	e.checker.WrittenHook = func(key string) error {
		b, _ := os.ReadFile(filepath.Join(e.store, key))
		sawContent.Store(string(b))
		e.checker.Protect("job/chk-5/state", key)
		return nil
	}
	if err := os.WriteFile(filepath.Join(e.mnt, "job/chk-5/state"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.mnt, "job/chk-5/_metadata"), []byte("meta-bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	// WriteFile returned after close: the index must already protect what the _metadata references.
	if got := sawContent.Load().(string); got != "meta-bytes" {
		t.Fatalf("index saw %q at close, want the complete file", got)
	}
	if err := os.Remove(filepath.Join(e.mnt, "job/chk-5/state")); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("delete right after the _metadata close: %v, want EPERM", err)
	}
	// Flink's recoverable writer: temp file renamed onto _metadata.
	if err := os.WriteFile(filepath.Join(e.mnt, "job/chk-5/.tmp"), []byte("m2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(e.mnt, "job/chk-5/.tmp"), filepath.Join(e.mnt, "job/chk-6-meta")); err != nil {
		t.Fatal(err)
	}
	calls := e.checker.CallLog()
	if !slices.Contains(calls, "written job/chk-5/_metadata") || !slices.Contains(calls, "renamed job/chk-5/.tmp job/chk-6-meta") {
		t.Errorf("notifications: %v", calls)
	}
	for _, c := range calls {
		if strings.HasPrefix(c, "written ") && !strings.HasSuffix(c, "_metadata") {
			t.Errorf("non-_metadata write notified: %s", c)
		}
	}
}

func TestXattrs(t *testing.T) {
	e := mountFake(t)
	e.write(t, "j/s/ref", "r")
	e.write(t, "j/s/free", "f")
	e.checker.Protect("j/s/ref", "j/chk-1/_metadata", "k/chk-2/_metadata")
	get := func(p, attr string) string {
		buf := make([]byte, 1024)
		n, err := unix.Getxattr(filepath.Join(e.mnt, p), attr, buf)
		if err != nil {
			t.Fatalf("getxattr %s %s: %v", p, attr, err)
		}
		return string(buf[:n])
	}
	if got := get("j/s/ref", XattrState); got != "referenced" {
		t.Errorf("state %q", got)
	}
	if got := get("j/s/ref", XattrRefs); got != "j/chk-1/_metadata\nk/chk-2/_metadata" {
		t.Errorf("refs %q", got)
	}
	if got := get("j/s/free", XattrState); got != "deletable" {
		t.Errorf("state %q", got)
	}
	// Ordinary user xattrs pass through to the store.
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

// TestLinkedMetadataIndexed: a hard link named _metadata (cp -al of a checkpoint folder) makes a live
// checkpoint, so it is indexed before link returns; when indexing fails the new name is removed again
// and the caller gets EIO (were it left to the next sync, deleting the
// original _metadata in the meantime would make the checkpoint's files deletable).
func TestLinkedMetadataIndexed(t *testing.T) {
	e := mountFake(t)
	m := func(k string) string { return filepath.Join(e.mnt, k) }
	e.write(t, "job/chk-5/_metadata", "meta")
	e.write(t, "job/chk-5/state", "s")
	for _, d := range []string{"archive", "broken"} {
		if err := os.Mkdir(m(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.checker.WrittenHook = func(key string) error {
		if key == "broken/_metadata" {
			return errors.New("index unavailable")
		}
		e.checker.Protect("job/chk-5/state", key)
		return nil
	}
	if err := os.Link(m("job/chk-5/_metadata"), m("archive/_metadata")); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(e.checker.CallLog(), "written archive/_metadata") {
		t.Fatalf("link onto _metadata not indexed: %v", e.checker.CallLog())
	}
	if err := os.Remove(m("job/chk-5/state")); !errors.Is(err, syscall.EPERM) {
		t.Errorf("delete of a file the linked _metadata references, right after link: %v, want EPERM", err)
	}
	if err := os.Link(m("job/chk-5/_metadata"), m("broken/_metadata")); !errors.Is(err, syscall.EIO) {
		t.Errorf("link whose indexing failed: %v, want EIO", err)
	}
	if e.exists("broken/_metadata") {
		t.Error("the link whose indexing failed was left in the store")
	}
	// Any other new name is no checkpoint: not indexed.
	if err := os.Link(m("job/chk-5/_metadata"), m("archive/meta.bak")); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(e.checker.CallLog(), "written archive/meta.bak") {
		t.Error("a link not named _metadata was indexed")
	}
}
