package localfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/verdict"
)

// snapshot describes a directory tree (names, types, modes, contents, xattrs) so a test can show that
// nothing in it changed.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b bytes.Buffer
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b.WriteString(rel + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.WriteString(" " + string(data))
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err == nil {
			b.WriteString(" nlink=" + itoa(uint64(st.Nlink)) + " owner=" + itoa(uint64(st.Uid)) + ":" + itoa(uint64(st.Gid)) +
				" mtime=" + itoa(uint64(st.Mtim.Nano())))
		}
		if sz, err := unix.Llistxattr(p, nil); err == nil && sz > 0 {
			buf := make([]byte, sz)
			sz, _ = unix.Llistxattr(p, buf)
			b.WriteString(" xattrs=" + string(buf[:sz]))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// swapOp is one operation through the mount on job/chk-1, the folder that gets swapped.
type swapOp struct {
	name string
	do   func(m func(string) string) error
	// decided is the guard decision during which the swap is made in the "during the decision" variant
	// (the tightest race: the guard already said yes about the key); -1: the operation is not decided.
	decided verdict.Op
	key     string
}

func openClose(p string, flags int, write bool) error {
	f, err := os.OpenFile(p, flags, 0o644)
	if err != nil {
		return err
	}
	if write {
		if _, err := f.Write([]byte("evil")); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

var swapOps = []swapOp{
	{"create new file", func(m func(string) string) error {
		return openClose(m("job/chk-1/new"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, true)
	}, -1, ""},
	{"open O_CREAT of existing file", func(m func(string) string) error {
		// The kernel looks y up first, finds it, and opens it (decided as a truncation).
		return openClose(m("job/chk-1/y"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, true)
	}, verdict.OpTruncate, "job/chk-1/y"},
	{"open for write", func(m func(string) string) error {
		return openClose(m("job/chk-1/x"), os.O_WRONLY|os.O_APPEND, true)
	}, verdict.OpWrite, "job/chk-1/x"},
	{"open O_TRUNC", func(m func(string) string) error {
		return openClose(m("job/chk-1/x"), os.O_WRONLY|os.O_TRUNC, false)
	}, verdict.OpTruncate, "job/chk-1/x"},
	{"open for read", func(m func(string) string) error {
		return openClose(m("job/chk-1/x"), os.O_RDONLY, false)
	}, -1, ""},
	{"truncate by path", func(m func(string) string) error { return os.Truncate(m("job/chk-1/x"), 0) },
		verdict.OpTruncate, "job/chk-1/x"},
	{"chmod file", func(m func(string) string) error { return os.Chmod(m("job/chk-1/x"), 0o666) }, -1, ""},
	{"chmod folder", func(m func(string) string) error { return os.Chmod(m("job/chk-1"), 0o777) }, -1, ""},
	{"mkdir", func(m func(string) string) error { return os.Mkdir(m("job/chk-1/newdir"), 0o755) }, -1, ""},
	{"mknod fifo", func(m func(string) string) error { return unix.Mkfifo(m("job/chk-1/fifo"), 0o644) }, -1, ""},
	{"symlink", func(m func(string) string) error { return os.Symlink("/etc/passwd", m("job/chk-1/ln")) }, -1, ""},
	{"hard link into folder", func(m func(string) string) error { return os.Link(m("job/free"), m("job/chk-1/lnk")) },
		verdict.OpLink, "job/free"},
	{"hard link out of folder", func(m func(string) string) error { return os.Link(m("job/chk-1/x"), m("job/stolen")) },
		verdict.OpLink, "job/chk-1/x"},
	{"rename into folder", func(m func(string) string) error { return os.Rename(m("job/free"), m("job/chk-1/moved")) },
		verdict.OpRename, "job/free"},
	{"rename out of folder", func(m func(string) string) error { return os.Rename(m("job/chk-1/x"), m("job/stolen")) },
		verdict.OpRename, "job/chk-1/x"},
	{"rename onto file in folder", func(m func(string) string) error { return os.Rename(m("job/free"), m("job/chk-1/x")) },
		verdict.OpRename, "job/free"},
	{"unlink", func(m func(string) string) error { return os.Remove(m("job/chk-1/x")) }, verdict.OpUnlink, "job/chk-1/x"},
	{"rmdir", func(m func(string) string) error { return syscall.Rmdir(m("job/chk-1/d")) }, verdict.OpRmdir, "job/chk-1/d"},
	{"lchown symlink", func(m func(string) string) error { return os.Lchown(m("job/chk-1/sl"), 4321, 4321) }, -1, ""},
	{"utimes symlink", func(m func(string) string) error {
		ts := []unix.Timespec{unix.NsecToTimespec(1e18), unix.NsecToTimespec(1e18)}
		return unix.UtimesNanoAt(unix.AT_FDCWD, m("job/chk-1/sl"), ts, unix.AT_SYMLINK_NOFOLLOW)
	}, -1, ""},
	{"chmod fifo", func(m func(string) string) error { return os.Chmod(m("job/chk-1/ff"), 0o600) }, -1, ""},
	{"chown file", func(m func(string) string) error { return os.Chown(m("job/chk-1/x"), 4321, 4321) }, -1, ""},
	{"setxattr", func(m func(string) string) error { return unix.Setxattr(m("job/chk-1/x"), "user.evil", []byte("1"), 0) }, -1, ""},
	{"removexattr", func(m func(string) string) error { return unix.Removexattr(m("job/chk-1/x"), "user.keep") }, -1, ""},
}

// TestSwappedFolderNeverReachesOutside: someone with write access to the store replaces the folder
// job/chk-1 by a symlink to a directory outside the store — after the kernel looked the folder up (so the
// mount still believes it is a folder), or while the guard decides about the operation. No operation
// through the mount may then create, write, link, rename, remove or change anything in the outside
// directory (the daemon often runs as root): after a swap they fail (ELOOP); during a decision they fail or
// act on the store file that was decided.
func TestSwappedFolderNeverReachesOutside(t *testing.T) {
	for _, during := range []bool{false, true} {
		for _, op := range swapOps {
			if during && op.decided < 0 {
				continue
			}
			name := op.name
			if during {
				name += " during decision"
			}
			t.Run(name, func(t *testing.T) { runSwap(t, op, during) })
		}
	}
}

func runSwap(t *testing.T, op swapOp, during bool) {
	e := mountFake(t)
	m := func(k string) string { return filepath.Join(e.mnt, filepath.FromSlash(k)) }
	outside := t.TempDir()
	for _, k := range []string{"job/chk-1/x", "job/chk-1/y", "job/chk-1/d/keep", "job/free"} {
		e.write(t, k, "store")
	}
	for _, k := range []string{"x", "y", "d/keep", "moved", "stolen"} {
		p := filepath.Join(outside, k)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("precious"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Setxattr(filepath.Join(outside, "x"), "user.keep", []byte("1"), 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(outside, "d/keep")); err != nil { // an empty folder d, as rmdir needs
		t.Fatal(err)
	}
	for _, dir := range []string{outside, filepath.Join(e.store, "job/chk-1")} {
		if err := os.Symlink("x", filepath.Join(dir, "sl")); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mkfifo(filepath.Join(dir, "ff"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, outside)

	// The kernel learns the real folder and the files in it.
	for _, k := range []string{"job/chk-1", "job/chk-1/x", "job/chk-1/d", "job/chk-1/sl", "job/chk-1/ff", "job/free"} {
		if _, err := os.Lstat(m(k)); err != nil {
			t.Fatal(err)
		}
	}
	swap := func() {
		d := filepath.Join(e.store, "job/chk-1")
		if err := os.Rename(d, d+".moved"); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(outside, d); err != nil {
			t.Error(err)
		}
	}
	if during {
		var once sync.Once
		e.setDecideHook(func(key string, o verdict.Op) {
			if key == op.key && o == op.decided {
				once.Do(swap)
			}
		})
	} else {
		swap()
	}
	err := op.do(m)
	e.setDecideHook(nil)
	if after := snapshot(t, outside); after != before {
		t.Errorf("%s reached the directory outside the store (err %v):\nbefore:\n%safter:\n%s", op.name, err, before, after)
	}
	if !during && err == nil {
		t.Errorf("%s through a folder swapped for a symlink succeeded; want an error", op.name)
	}
	// A swap during the decision may also be answered by acting on the file that was decided: an fd-less
	// truncation, and every change through an open handle, act on a descriptor opened before the swap, so
	// they reach the folder now at job/chk-1.moved (still in the store), never the outside one.
}

// TestNamespaceOpsWithoutSwap: the same operations on an intact store work and land in the store (the
// beneath resolution must not refuse legitimate paths, including at the store root).
func TestNamespaceOpsWithoutSwap(t *testing.T) {
	e := mountFake(t)
	m := func(k string) string { return filepath.Join(e.mnt, filepath.FromSlash(k)) }
	e.write(t, "job/chk-1/x", "store")
	e.write(t, "job/free", "free")
	e.write(t, "top", "top")
	steps := []struct {
		name string
		do   func() error
		want []string // keys that must exist in the store afterwards
	}{
		{"create", func() error { return openClose(m("job/chk-1/new"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, true) }, []string{"job/chk-1/new"}},
		{"create at root", func() error { return openClose(m("rootfile"), os.O_CREATE|os.O_WRONLY, true) }, []string{"rootfile"}},
		{"open for write", func() error { return openClose(m("job/chk-1/x"), os.O_WRONLY|os.O_APPEND, true) }, nil},
		{"mkdir", func() error { return os.Mkdir(m("job/chk-1/newdir"), 0o755) }, []string{"job/chk-1/newdir"}},
		{"mknod", func() error { return unix.Mkfifo(m("job/fifo"), 0o644) }, []string{"job/fifo"}},
		{"symlink", func() error { return os.Symlink("chk-1/x", m("job/ln")) }, []string{"job/ln"}},
		{"link", func() error { return os.Link(m("job/free"), m("job/chk-1/lnk")) }, []string{"job/chk-1/lnk"}},
		{"rename", func() error { return os.Rename(m("top"), m("job/chk-1/top")) }, []string{"job/chk-1/top"}},
		{"rename dir", func() error { return os.Rename(m("job/chk-1/newdir"), m("newdir")) }, []string{"newdir"}},
		{"chmod dir", func() error { return os.Chmod(m("job/chk-1"), 0o700) }, nil},
		{"setxattr", func() error { return unix.Setxattr(m("job/free"), "user.a", []byte("1"), 0) }, nil},
		{"chmod fifo", func() error { return os.Chmod(m("job/fifo"), 0o600) }, nil},
		{"lchown symlink", func() error { return os.Lchown(m("job/ln"), 4321, 4321) }, nil},
	}
	for _, s := range steps {
		if s.name == "lchown symlink" && os.Geteuid() != 0 {
			continue
		}
		if err := s.do(); err != nil {
			if s.name == "setxattr" && errors.Is(err, unix.ENOTSUP) {
				continue
			}
			t.Errorf("%s: %v", s.name, err)
		}
		for _, k := range s.want {
			if !e.exists(k) {
				t.Errorf("%s: %s not in the store", s.name, k)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(e.store, "job/chk-1/x")); err != nil || string(b) != "storeevil" {
		t.Errorf("append through the mount: %q %v", b, err)
	}
	if l, err := os.Readlink(m("job/ln")); err != nil || l != "chk-1/x" {
		t.Errorf("readlink: %q %v", l, err)
	}
	if st, err := os.Stat(filepath.Join(e.store, "job/chk-1")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("chmod dir: %v %v", st, err)
	}
	if st, err := os.Lstat(filepath.Join(e.store, "job/fifo")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("chmod fifo: %v %v", st, err)
	}
	var ls, xs syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(e.store, "job/ln"), &ls); os.Geteuid() == 0 && (err != nil || ls.Uid != 4321) {
		t.Errorf("lchown symlink: uid %d %v", ls.Uid, err)
	}
	if err := syscall.Lstat(filepath.Join(e.store, "job/chk-1/x"), &xs); err != nil || xs.Uid == 4321 {
		t.Errorf("lchown of a symlink changed its target: uid %d %v", xs.Uid, err)
	}
	// Inode numbers of created entries match a fresh lookup (one inode per file for go-fuse and the kernel).
	var a, b syscall.Stat_t
	if err := syscall.Lstat(m("job/chk-1/new"), &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Lstat(filepath.Join(e.store, "job/chk-1/new"), &b); err != nil {
		t.Fatal(err)
	}
	if a.Ino != b.Ino {
		t.Errorf("inode through the mount %d, in the store %d", a.Ino, b.Ino)
	}
	names, err := os.ReadDir(m("job/chk-1"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range names {
		got = append(got, n.Name())
	}
	sort.Strings(got)
	if want := []string{"lnk", "new", "top", "x"}; !equal(got, want) {
		t.Errorf("listing %v, want %v", got, want)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// setDecideHook sets the checker's DecideHook, ordered with the Decide calls of the FUSE server's goroutines.
func (e *env) setDecideHook(f func(key string, op verdict.Op)) { e.checker.SetDecideHook(f) }
