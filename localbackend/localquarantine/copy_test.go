package localquarantine

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// openSrc opens the store file key for reading, as the mount does before a truncation.
func openSrc(t *testing.T, dir, key string) int {
	t.Helper()
	fd, err := unix.Open(filepath.Join(dir, key), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// stageNames lists the uncommitted copies in the folder.
func stageNames(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, ".ckguard-quarantine", "*"+stageSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestLocalTruncationStaged: Prepare copies, Commit makes the copy an entry, the truncation then cuts
// the file; the entry is the old content byte for byte with its mtime and mode, its change is
// "truncate", and a restore onto the truncated file is refused (never overwrites) until it is moved away.
func TestLocalTruncationStaged(t *testing.T) {
	dir, l, _ := newArea(t)
	old := strings.Repeat("state bytes ", 10000)
	write(t, dir, "job/chk-1/sst", old)
	p := filepath.Join(dir, "job/chk-1/sst")
	mt := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	if err := os.Chtimes(p, mt, mt); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	src := openSrc(t, dir, "job/chk-1/sst")
	prep, err := l.Prepare(src, "job/chk-1/sst")
	if err != nil {
		t.Fatal(err)
	}
	if es, _ := l.List(context.Background()); len(es) != 0 {
		t.Fatalf("an uncommitted copy is listed: %v", es)
	}
	e, err := prep.Commit(quarantine.Decision{Op: quarantine.OpTruncate, Reason: "unreferenced"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	prep.Done()
	es, err := l.List(context.Background())
	if err != nil || len(es) != 1 || es[0].ID != e.ID || es[0].Change() != quarantine.OpTruncate || es[0].Size != int64(len(old)) {
		t.Fatalf("list after the truncation: %v %v, want the one truncate entry of %d bytes", es, err, len(old))
	}
	if _, err := l.Restore(context.Background(), e.ID); !errors.Is(err, quarantine.ErrOccupied) {
		t.Fatalf("restore onto the truncated file: %v, want quarantine.ErrOccupied", err)
	}
	if err := os.Rename(p, p+".new"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Restore(context.Background(), e.ID); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != old {
		t.Fatalf("restored content differs (%d bytes, %v)", len(b), err)
	}
	fi, _ := os.Stat(p)
	if !fi.ModTime().Equal(mt) || fi.Mode().Perm() != 0o640 {
		t.Fatalf("restored mtime %v mode %v, want %v 0640", fi.ModTime(), fi.Mode().Perm(), mt)
	}
}

// TestLocalTruncationChangedMeanwhile: a write between the copy and the commit makes the copy stale:
// Commit refuses (ErrChanged) and leaves nothing in the folder.
func TestLocalTruncationChangedMeanwhile(t *testing.T) {
	dir, l, _ := newArea(t)
	write(t, dir, "f", "old content")
	src := openSrc(t, dir, "f")
	prep, err := l.Prepare(src, "f")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a ctime tick on coarse-clock filesystems
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("newer content"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := prep.Commit(quarantine.Decision{Op: quarantine.OpTruncate}); !errors.Is(err, ErrChanged) {
		t.Fatalf("commit after a write: %v, want ErrChanged", err)
	}
	prep.Abort()
	if es, _ := l.List(context.Background()); len(es) != 0 {
		t.Fatalf("entries after a refused commit: %v", es)
	}
	if n := stageNames(t, dir); len(n) != 0 {
		t.Fatalf("copies left: %v", n)
	}
}

// TestLocalTruncationCrashStates: a crash after the copy (before the commit) leaves an uncommitted copy,
// a crash after the commit (before the truncation) a committed one whose file is unchanged. Neither is
// an entry (the content is at its key: never in both places), and Tidy removes both copies once old.
func TestLocalTruncationCrashStates(t *testing.T) {
	dir, l, clk := newArea(t)
	write(t, dir, "a", "content a")
	write(t, dir, "b", "content b")
	if _, err := l.Prepare(openSrc(t, dir, "a"), "a"); err != nil { // never committed
		t.Fatal(err)
	}
	pb, err := l.Prepare(openSrc(t, dir, "b"), "b")
	if err != nil {
		t.Fatal(err)
	}
	eb, err := pb.Commit(quarantine.Decision{Op: quarantine.OpTruncate}) // never truncated
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	l2, err := OpenLocal(dir, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	es, probs, err := l2.ListAll(context.Background())
	if err != nil || len(es) != 0 || len(probs) != 0 {
		t.Fatalf("after the crash: entries %v problems %v (%v), want none", es, probs, err)
	}
	if err := l2.Tidy(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if len(stageNames(t, dir)) != 1 {
		t.Fatal("Tidy removed a young uncommitted copy")
	}
	clk.t = clk.t.Add(time.Hour)
	if err := l2.Tidy(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := stageNames(t, dir); len(n) != 0 {
		t.Fatalf("Tidy left uncommitted copies: %v", n)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".ckguard-quarantine", eb.ID)); !os.IsNotExist(err) {
		t.Fatalf("Tidy left the copy of a truncation that never happened: %v", err)
	}
	for _, k := range []string{"a", "b"} {
		if b, _ := os.ReadFile(filepath.Join(dir, k)); string(b) != "content "+k {
			t.Fatalf("%s: %q", k, b)
		}
	}
}

// TestLocalTruncationCopyNeverRootsASetID: as root, the copy of a user's set-id file is never root's
// with its set-id bits: when the copy cannot be given to the file's owner (a full quota: EDQUOT, an NFS
// server squashing root), Prepare fails and no copy is left, so no restore can put back a root-owned
// set-uid program with the user's content; when it can, the copy is the user's with the user's mode.
func TestLocalTruncationCopyNeverRootsASetID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown)")
	}
	const uid = 65534
	for _, tc := range []struct {
		name      string
		chownErr  error
		wantEntry bool
	}{
		{"chown works", nil, true},
		{"chown fails", unix.EDQUOT, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, l, _ := newArea(t)
			write(t, dir, "job/tool", "#!/bin/sh\nid\n")
			p := filepath.Join(dir, "job/tool")
			if err := os.Chown(p, uid, uid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, 0o4755|os.ModeSetuid); err != nil {
				t.Fatal(err)
			}
			defer func(f func(int, int, int) error) { fchown = f }(fchown)
			if tc.chownErr != nil {
				fchown = func(int, int, int) error { return tc.chownErr }
			}
			prep, err := l.Prepare(openSrc(t, dir, "job/tool"), "job/tool")
			if (err == nil) != tc.wantEntry {
				t.Fatalf("Prepare: %v, want an entry %v", err, tc.wantEntry)
			}
			names, _ := filepath.Glob(filepath.Join(dir, ".ckguard-quarantine", "*"))
			for _, n := range names {
				var st unix.Stat_t
				if err := unix.Lstat(n, &st); err != nil {
					t.Fatal(err)
				}
				if filepath.Base(n) != JournalName && st.Uid == 0 && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
					t.Errorf("%s: root's with mode %o", n, st.Mode)
				}
				if filepath.Base(n) != JournalName && tc.wantEntry && (st.Uid != uid || st.Mode&0o7777 != 0o4755) {
					t.Errorf("%s: uid %d mode %o, want the file's (uid %d, 4755)", n, st.Uid, st.Mode&0o7777, uid)
				}
			}
			if !tc.wantEntry {
				if len(stageNames(t, dir)) != 0 {
					t.Errorf("copies left after the failed Prepare: %v", stageNames(t, dir))
				}
				return
			}
			if _, err := prep.Commit(quarantine.Decision{Op: quarantine.OpTruncate}); err != nil {
				t.Fatal(err)
			}
			prep.Done()
		})
	}
}

// TestLocalTruncationCopyKeepsACL: the copy of a file with an access ACL has that ACL (not only the mode,
// whose group bits would then give the owning group the ACL's mask), so the file a restore puts back is
// no more readable than the one truncated.
func TestLocalTruncationCopyKeepsACL(t *testing.T) {
	dir, l, _ := newArea(t)
	write(t, dir, "job/acl", "secret")
	p := filepath.Join(dir, "job/acl")
	if out, err := exec.Command("setfacl", "-m", "u::rw,g::-,u:65534:r,o::-", p).CombinedOutput(); err != nil {
		t.Skipf("setfacl: %v %s", err, out)
	}
	want, err := exec.Command("getfacl", "-c", "-n", p).Output()
	if err != nil {
		t.Skipf("getfacl: %v", err)
	}
	prep, err := l.Prepare(openSrc(t, dir, "job/acl"), "job/acl")
	if err != nil {
		t.Fatal(err)
	}
	e, err := prep.Commit(quarantine.Decision{Op: quarantine.OpTruncate})
	if err != nil {
		t.Fatal(err)
	}
	prep.Done()
	got, err := exec.Command("getfacl", "-c", "-n", filepath.Join(dir, store.QuarantineDir, e.ID)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("the copy's ACL:\n%s\nwant the file's:\n%s", got, want)
	}
}

// TestLocalChangeWithoutTraceStaysAnEntry: a change that leaves the file's size and times as they were
// (a hole punched, or a range zeroed, within the clock tick of the file's last change: nothing in its
// stat moves) is still an entry after Done, and Tidy keeps its copy; without Done's rewrite the entry
// would look like a change that never happened and Tidy would remove the only copy of the old bytes.
// A committed entry whose change is not known yet (no Done) is the crash case: no entry, and Tidy
// removes the copy once it is old enough.
func TestLocalChangeWithoutTraceStaysAnEntry(t *testing.T) {
	dir, l, clk := newArea(t)
	ctx := context.Background()
	old := strings.Repeat("punched ", 1000)
	write(t, dir, "job/sst", old)
	write(t, dir, "job/crashed", old)

	src := openSrc(t, dir, "job/sst")
	prep, err := l.Prepare(src, "job/sst")
	if err != nil {
		t.Fatal(err)
	}
	e, err := prep.Commit(quarantine.Decision{Op: quarantine.OpAllocate, Reason: "unreferenced"})
	if err != nil {
		t.Fatal(err)
	}
	// The change happens here without leaving a trace in the stat.
	if err := prep.Done(); err != nil {
		t.Fatal(err)
	}

	crashed, err := l.Prepare(openSrc(t, dir, "job/crashed"), "job/crashed")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crashed.Commit(quarantine.Decision{Op: quarantine.OpAllocate, Reason: "unreferenced"}); err != nil {
		t.Fatal(err)
	}

	check := func(when string) {
		t.Helper()
		es, err := l.List(ctx)
		if err != nil || len(es) != 1 || es[0].ID != e.ID || es[0].Change() != quarantine.OpAllocate || es[0].Source != nil {
			t.Fatalf("%s: %+v %v, want the one fallocate entry of job/sst, without a quarantine.Source", when, es, err)
		}
	}
	check("after Done")
	clk.t = clk.t.Add(time.Hour)
	if err := l.Tidy(ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	check("after Tidy")
	if b, err := os.ReadFile(filepath.Join(dir, ".ckguard-quarantine", e.ID)); err != nil || string(b) != old {
		t.Fatalf("staged copy after Tidy: %d bytes (%v), want the old content", len(b), err)
	}
	l2, err := OpenLocal(dir, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if es, err := l2.List(ctx); err != nil || len(es) != 1 || es[0].ID != e.ID {
		t.Fatalf("reopened: %+v %v, want the entry (the rewritten record is the one read back)", es, err)
	}
}

// TestLocalTruncationCopyKeepsHoles: the copy of a sparse file is as sparse as the file (holes stay
// holes) and has its bytes where the file has data. A file of hundreds of megabytes (on the mount:
// `truncate -s 10T f`, in an instant, by anyone who may truncate it) whose truncation made the daemon
// write every zero would let any user fill the store's filesystem with one command.
func TestLocalTruncationCopyKeepsHoles(t *testing.T) {
	dir, l, _ := newArea(t)
	write(t, dir, "job/sparse", "")
	p := filepath.Join(dir, "job/sparse")
	const size, at = 256 << 20, 100 << 20
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("data in the middle"), at); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tail"), size-4); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var src unix.Stat_t
	if err := unix.Stat(p, &src); err != nil {
		t.Fatal(err)
	}
	if src.Blocks*512 > 1<<20 {
		t.Skipf("the filesystem of %s makes no sparse files (%d blocks for %d bytes)", dir, src.Blocks, size)
	}
	prep, err := l.Prepare(openSrc(t, dir, "job/sparse"), "job/sparse")
	if err != nil {
		t.Fatal(err)
	}
	names := stageNames(t, dir)
	if len(names) != 1 {
		t.Fatalf("copies: %v, want one", names)
	}
	var cp unix.Stat_t
	if err := unix.Stat(names[0], &cp); err != nil {
		t.Fatal(err)
	}
	if cp.Size != size || cp.Blocks > src.Blocks+16 {
		t.Errorf("copy of a %d-byte file taking %d blocks: %d bytes in %d blocks, want the size and at most %d blocks",
			size, src.Blocks, cp.Size, cp.Blocks, src.Blocks+16)
	}
	b, err := os.ReadFile(names[0])
	if err != nil {
		t.Fatal(err)
	}
	if string(b[at:at+18]) != "data in the middle" || string(b[size-4:]) != "tail" || strings.Trim(string(b[:at]), "\x00") != "" {
		t.Errorf("copy's bytes differ from the file's")
	}
	if _, err := prep.Commit(quarantine.Decision{Op: quarantine.OpTruncate}); err != nil {
		t.Fatal(err)
	}
	prep.Done()
}
