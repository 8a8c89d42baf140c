package hdfsmount_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient/hdfsfake"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsmount"
)

const dir = "/flink/checkpoints"

type env struct {
	f   *hdfsfake.FS
	ck  *guardtest.Checker
	mnt string
}

func setup(t *testing.T, trash time.Duration) *env { t.Helper(); return setupFake(t, trash, nil) }

// setupFake is setup with prep configuring the fake before the mount uses it (its exported fields are
// not safe to change while mounted; its fault hook is, through SetFault).
func setupFake(t *testing.T, trash time.Duration, prep func(*hdfsfake.FS)) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("FUSE mount not run in -short mode")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	e := &env{f: hdfsfake.New("flink"), ck: guardtest.New(), mnt: t.TempDir()}
	e.f.Trash = trash
	if prep != nil {
		prep(e.f)
	}
	if err := e.f.MkdirAll(context.Background(), dir, 0o755); err != nil {
		t.Fatal(err)
	}
	enf, err := guard.NewEnforcer(guard.Config{Checker: e.ck})
	if err != nil {
		t.Fatal(err)
	}
	m, err := hdfsmount.Mount(context.Background(), hdfsmount.Options{FS: e.f, Dir: dir, Name: "hdfs://nn:8020" + dir, Mountpoint: e.mnt, Enforcer: enf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			_ = exec.Command("fusermount3", "-uz", e.mnt).Run()
		}
	})
	return e
}

// incident builds the HDFS incident layout: the old job's shared SSTs still referenced by the current
// job's live checkpoint, next to unreferenced ones.
func (e *env) incident(t *testing.T) {
	t.Helper()
	old := time.Now().Add(-10 * 24 * time.Hour)
	for _, k := range []string{
		"job_7d83f2a1/chk-40/_metadata", "job_7d83f2a1/chk-40/x", "job_7d83f2a1/shared/sst-ref", "job_7d83f2a1/shared/sst-gone",
		"job_7d83f2a1/taskowned/t", "job_d29e1b63/chk-3/_metadata", "job_d29e1b63/shared/sst-new",
	} {
		if err := e.f.Put(dir+"/"+k, []byte(k), old); err != nil {
			t.Fatal(err)
		}
	}
	e.ck.Protect("job_7d83f2a1/shared/sst-ref", "job_d29e1b63/chk-3")
	e.ck.Protect("job_d29e1b63/chk-3/_metadata", "job_d29e1b63/chk-3")
	e.ck.Protect("job_d29e1b63/shared/sst-new", "job_d29e1b63/chk-3")
}

func (e *env) files() string {
	var out []string
	for _, f := range e.f.Files() {
		out = append(out, strings.TrimPrefix(f, dir+"/"))
	}
	return strings.Join(out, ",")
}

// rmtree is shutil.rmtree with an error handler that reports and goes on (as cleanup scripts use it),
// so one refusal does not stop the rest of the tree from going.
const rmtree = `import shutil, sys
errs = []
def h(f, p, e):
    errs.append(p)
    print(e[1] if isinstance(e, tuple) else e, file=sys.stderr)
kw = {"onexc": h} if sys.version_info >= (3, 12) else {"onerror": h}
shutil.rmtree(sys.argv[1], **kw)
sys.exit(1 if errs else 0)
`

const survivors = "job_7d83f2a1/shared/sst-ref,job_d29e1b63/chk-3/_metadata,job_d29e1b63/shared/sst-new"

// TestCleanupsLeaveReferencedFiles: rm -rf of the old job, find -mtime +7 -delete and shutil.rmtree
// through the mount delete exactly the unreferenced files and fail loudly on the rest.
func TestCleanupsLeaveReferencedFiles(t *testing.T) {
	cleanups := []struct {
		name string
		cmd  func(mnt string) *exec.Cmd
		want string
	}{
		{"rm -rf old job", func(m string) *exec.Cmd { return exec.Command("rm", "-rf", filepath.Join(m, "job_7d83f2a1")) },
			"job_7d83f2a1/shared/sst-ref,job_d29e1b63/chk-3/_metadata,job_d29e1b63/shared/sst-new"},
		{"find -mtime +7 -delete", func(m string) *exec.Cmd {
			return exec.Command("find", m, "-mindepth", "1", "-mtime", "+7", "-delete")
		}, survivors},
		{"shutil.rmtree", func(m string) *exec.Cmd {
			return exec.Command("/usr/bin/python3", "-c", rmtree, filepath.Join(m, "job_7d83f2a1"))
		}, "job_7d83f2a1/shared/sst-ref,job_d29e1b63/chk-3/_metadata,job_d29e1b63/shared/sst-new"},
	}
	for _, tc := range cleanups {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, 0)
			e.incident(t)
			out, err := tc.cmd(e.mnt).CombinedOutput()
			if err == nil {
				t.Errorf("%s succeeded although referenced files are in the way", tc.name)
			}
			if !strings.Contains(string(out), "ermitted") {
				t.Errorf("%s output does not say \"Operation not permitted\": %s", tc.name, out)
			}
			if got := e.files(); got != tc.want {
				t.Errorf("left %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestListingOrder: _metadata and the newest chk-N come first.
func TestListingOrder(t *testing.T) {
	e := setup(t, 0)
	for _, k := range []string{"j/a", "j/chk-2/x", "j/chk-10/x", "j/_metadata", "j/shared/s"} {
		if err := e.f.Put(dir+"/"+k, nil, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	d, err := os.Open(filepath.Join(e.mnt, "j"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names, ","); !strings.HasPrefix(got, "_metadata,chk-10,chk-2,") {
		t.Errorf("listing order %s", got)
	}
}

// TestNameNodeTroubleRefusesDeletes: with the NameNode failing (safe mode, standby, RPC errors) an
// rm -rf deletes nothing and reports I/O errors; after it recovers the same rm deletes exactly the
// unreferenced files.
func TestNameNodeTroubleRefusesDeletes(t *testing.T) {
	faults := []struct {
		name string
		op   string
		err  error
	}{
		{"safe mode on delete", "delete", hdfsclient.ErrSafeMode},
		{"standby on stat", "stat", hdfsclient.ErrStandby},
		{"rpc failure on list", "list", hdfsclient.ErrUnavailable},
		{"rpc failure on delete", "delete", hdfsclient.ErrUnavailable},
	}
	for _, fc := range faults {
		t.Run(fc.name, func(t *testing.T) {
			e := setup(t, 0)
			e.incident(t)
			before := e.files()
			// Warm the kernel's view first so the fault meets the deleter, not the lookup of the root.
			if _, err := os.Stat(filepath.Join(e.mnt, "job_7d83f2a1")); err != nil {
				t.Fatal(err)
			}
			e.f.SetFault(func(op, name string) error {
				if op == fc.op && strings.Contains(name, "job_7d83f2a1") {
					return fc.err
				}
				return nil
			})
			out, err := exec.Command("rm", "-rf", filepath.Join(e.mnt, "job_7d83f2a1")).CombinedOutput()
			if err == nil {
				t.Errorf("rm -rf succeeded with the NameNode failing")
			}
			if fc.op != "stat" && !strings.Contains(string(out), "Input/output error") {
				t.Errorf("rm output does not say Input/output error: %s", out)
			}
			if got := e.files(); got != before && fc.op != "list" {
				t.Errorf("files changed although every delete failed:\n%s\nwas %s", got, before)
			}
			for _, k := range strings.Split(survivors, ",") {
				if _, err := e.f.Stat(context.Background(), dir+"/"+k); err != nil && !errors.Is(err, fc.err) {
					t.Errorf("referenced %s: %v", k, err)
				}
			}
			e.f.SetFault(nil)
			_ = exec.Command("rm", "-rf", filepath.Join(e.mnt, "job_7d83f2a1")).Run()
			if got := e.files(); got != survivors {
				t.Errorf("after recovery left %s\nwant %s", got, survivors)
			}
		})
	}
}

// TestTrash: with fs.trash.interval > 0 an allowed deletion goes to the user's .Trash; a refused one
// stays where it is.
func TestTrash(t *testing.T) {
	e := setup(t, time.Hour)
	e.incident(t)
	_ = exec.Command("rm", "-rf", filepath.Join(e.mnt, "job_7d83f2a1")).Run()
	if _, err := e.f.Stat(context.Background(), "/user/flink/.Trash/Current"+dir+"/job_7d83f2a1/shared/sst-gone"); err != nil {
		t.Errorf("unreferenced file not in the trash: %v", err)
	}
	if _, err := e.f.Stat(context.Background(), dir+"/job_7d83f2a1/shared/sst-ref"); err != nil {
		t.Errorf("referenced file: %v", err)
	}
}

// TestRenameNeverReplaces: a rename onto an existing name fails with EEXIST and both files stay.
func TestRenameNeverReplaces(t *testing.T) {
	e := setup(t, 0)
	for _, k := range []string{"j/a", "j/b"} {
		if err := e.f.Put(dir+"/"+k, []byte(k), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	err := os.Rename(filepath.Join(e.mnt, "j/a"), filepath.Join(e.mnt, "j/b"))
	if !errors.Is(err, syscall.EEXIST) {
		t.Errorf("rename onto an existing file: %v", err)
	}
	if b, _ := e.f.ReadFile(dir + "/j/b"); string(b) != "j/b" {
		t.Errorf("target replaced: %q", b)
	}
	if err := os.Rename(filepath.Join(e.mnt, "j/a"), filepath.Join(e.mnt, "j/c")); err != nil {
		t.Fatal(err)
	}
	if b, _ := e.f.ReadFile(dir + "/j/c"); string(b) != "j/a" {
		t.Errorf("renamed content %q", b)
	}
}

// TestWriteReadThrough: a file created and written through the mount is on HDFS at close, the index
// is told, and it reads back.
func TestWriteReadThrough(t *testing.T) {
	e := setup(t, 0)
	if err := os.MkdirAll(filepath.Join(e.mnt, "j/chk-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := strings.Repeat("flink-state ", 300000)
	p := filepath.Join(e.mnt, "j/chk-1/_metadata")
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := e.f.ReadFile(dir + "/j/chk-1/_metadata"); err != nil || string(b) != data {
		t.Fatalf("HDFS content %d bytes, %v", len(b), err)
	}
	got, err := os.ReadFile(p)
	if err != nil || string(got) != data {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}
	if !strings.Contains(strings.Join(e.ck.Calls, ";"), "written j/chk-1/_metadata") {
		t.Errorf("index not told: %v", e.ck.Calls)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("more")); !errors.Is(err, syscall.ENOTSUP) {
		t.Errorf("append to an HDFS file: %v", err)
	}
	f.Close()
}

// TestShellRedirection: a shell's `> f` opens the file, dup2s it to stdout and closes the original
// descriptor (a FLUSH) before anything is written; the file must stay writable until the descriptor
// that writes is closed, for a new file, an existing one (truncated at open) and an empty result.
func TestShellRedirection(t *testing.T) {
	e := setup(t, 0)
	old := time.Now().Add(-time.Hour)
	if err := e.f.Put(dir+"/j/old", []byte("previous content"), old); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, script, file, want string }{
		{"builtin into a new file", `printf x > new`, "j/new", "x"},
		{"builtin over an existing file", `printf y > old`, "j/old", "y"},
		{"builtins in a group", `{ printf a; printf b; } > group`, "j/group", "ab"},
		{"writes after an inherited descriptor closed", `{ printf a; /bin/true; printf b; /bin/true; printf c; } > again`, "j/again", "abc"},
		{"external command", `/usr/bin/printf z > ext`, "j/ext", "z"},
		{"empty", `: > empty`, "j/empty", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("bash", "-c", tc.script)
			cmd.Dir = filepath.Join(e.mnt, "j")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s through the mount: %v %s", tc.script, err, out)
			}
			// The release that completes an empty file comes after close returns.
			deadline := time.Now().Add(5 * time.Second)
			for {
				b, err := e.f.ReadFile(dir + "/" + tc.file)
				if err == nil && string(b) == tc.want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("HDFS %s = %q, %v; want %q", tc.file, b, err, tc.want)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if got, err := os.ReadFile(filepath.Join(e.mnt, tc.file)); err != nil || string(got) != tc.want {
				t.Errorf("read back through the mount %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestWriteAfterCompletingClose: a descriptor that writes after a flush completed its file (another
// descriptor of it closed) continues the file with an append, decided like a write to an existing
// file: refused while the file is referenced (the content stays), ESTALE when the file changed since.
func TestWriteAfterCompletingClose(t *testing.T) {
	e := setup(t, 0)
	if err := e.f.MkdirAll(context.Background(), dir+"/j", 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(e.mnt, "j", "w")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// completeByOtherClose closes a duplicate of f: the kernel's FLUSH, which completes the file.
	completeByOtherClose := func() {
		t.Helper()
		d, err := syscall.Dup(int(f.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Close(d); err != nil {
			t.Fatalf("close of the duplicate: %v", err)
		}
	}
	hdfsIs := func(want string) {
		t.Helper()
		if b, err := e.f.ReadFile(dir + "/j/w"); err != nil || string(b) != want {
			t.Fatalf("HDFS j/w = %q, %v; want %q", b, err, want)
		}
	}
	write := func(s string) error { _, err := f.WriteString(s); return err }

	if err := write("a"); err != nil {
		t.Fatal(err)
	}
	completeByOtherClose()
	hdfsIs("a")
	e.ck.Protect("j/w", "j/chk-1/_metadata")
	if err := write("b"); err == nil {
		t.Fatal("write to a referenced file after its completing close was allowed")
	}
	hdfsIs("a")
	e.ck.Unprotect("j/w")
	if err := write("b"); err != nil {
		t.Fatalf("write after the completing close: %v", err)
	}
	completeByOtherClose()
	hdfsIs("ab")

	if err := e.f.Put(dir+"/j/w", []byte("other writer"), time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := write("c"); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("write after the file was replaced: %v; want ESTALE", err)
	}
	hdfsIs("other writer")
}

// TestStreamedListing: a directory of many listing pages is served whole, exactly once per name, in
// cleanup order (_metadata, chk-* newest first, then the rest in listing order), again after a
// rewind; a NameNode failure in the middle of it fails the reader instead of ending the listing short.
func TestStreamedListing(t *testing.T) {
	var failing atomic.Bool // the 4th listing call of j fails once set
	var lists atomic.Int32
	e := setupFake(t, 0, func(f *hdfsfake.FS) {
		f.PageSize = 3
		f.SetFault(func(op, name string) error {
			if failing.Load() && op == "list" && strings.HasSuffix(name, "/j") && lists.Add(1) == 4 {
				return hdfsclient.ErrUnavailable
			}
			return nil
		})
	})
	names := []string{"A1", "_metadata", "a", "chk-1", "chk-10", "chk-2", "chk-x"}
	for i := range 20 {
		names = append(names, fmt.Sprintf("d%02d", i))
	}
	for _, n := range names {
		if err := e.f.Put(dir+"/j/"+n, []byte(n), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	want := "_metadata,chk-10,chk-2,chk-1,chk-x,A1,a"
	for i := range 20 {
		want += fmt.Sprintf(",d%02d", i)
	}
	d, err := os.Open(filepath.Join(e.mnt, "j"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, pass := range []string{"first", "after rewind"} {
		got, err := d.Readdirnames(-1)
		if err != nil {
			t.Fatal(err)
		}
		if g := strings.Join(got, ","); g != want {
			t.Errorf("%s listing:\n got %s\nwant %s", pass, g, want)
		}
		if _, err := d.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
	}

	failing.Store(true)
	if out, err := exec.Command("ls", filepath.Join(e.mnt, "j")).CombinedOutput(); err == nil {
		t.Errorf("a listing whose 4th page failed succeeded: %s", out)
	} else if !strings.Contains(string(out), "Input/output error") {
		t.Errorf("a failed listing reports %v %s, want an I/O error", err, out)
	}
}

// TestInodeKeptAcrossLookups: once the kernel's entry timeout has passed, looking a name up again
// answers with the same inode while the name is the same HDFS file or directory (a walk repeated after
// a second keeps the kernel's inodes instead of forgetting the previous walk's tree), and with a new
// inode once something else is at the name.
func TestInodeKeptAcrossLookups(t *testing.T) {
	e := setup(t, 0)
	ctx := context.Background()
	if err := e.f.MkdirAll(ctx, dir+"/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := e.f.Put(dir+"/d/f", []byte("x"), time.Now()); err != nil {
		t.Fatal(err)
	}
	ino := func(p string) uint64 {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(e.mnt, p), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	d0, f0 := ino("d"), ino("d/f")
	time.Sleep(1200 * time.Millisecond) // past the kernel's 1 s entry timeout: it looks both up again
	if d1, f1 := ino("d"), ino("d/f"); d1 != d0 || f1 != f0 {
		t.Errorf("inodes after the entry timeout: d %d, d/f %d; want %d, %d (the same HDFS inodes)", d1, f1, d0, f0)
	}
	// Replaced beside the mount: another HDFS inode at the name.
	if err := e.f.Remove(ctx, dir+"/d/f"); err != nil {
		t.Fatal(err)
	}
	if err := e.f.Put(dir+"/d/f", []byte("yy"), time.Now()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond)
	if f2 := ino("d/f"); f2 == f0 {
		t.Errorf("d/f replaced beside the mount kept inode %d", f2)
	}
}
