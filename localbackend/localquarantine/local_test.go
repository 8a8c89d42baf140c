package localquarantine

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// fakeClock is a settable clock: TTL tests never sleep.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newArea(t *testing.T) (string, *Local, *fakeClock) {
	t.Helper()
	dir := t.TempDir()
	clk := &fakeClock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	l, err := OpenLocal(dir, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return dir, l, clk
}

func write(t *testing.T, dir, key, content string) {
	t.Helper()
	p := filepath.Join(dir, key)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// move stages key the way the mount does: through its parent folder's descriptor.
func move(t *testing.T, dir string, l *Local, key string) quarantine.Entry {
	t.Helper()
	pfd, err := unix.Open(filepath.Join(dir, filepath.Dir(key)), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd)
	e, err := l.MoveAt(pfd, filepath.Base(key), key, quarantine.Decision{Op: "unlink", Reason: "unreferenced", UID: 7})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestLocalMoveRestoreByteIdentical(t *testing.T) {
	dir, l, clk := newArea(t)
	keys := []string{"job/shared/a.sst", "job/chk-1/_metadata", "top", "job/bad\xffname"}
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, k := range keys {
		write(t, dir, k, "content of "+k)
		if err := os.Chtimes(filepath.Join(dir, k), mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	var es []quarantine.Entry
	for _, k := range keys {
		clk.t = clk.t.Add(time.Second)
		es = append(es, move(t, dir, l, k))
	}
	if err := os.RemoveAll(filepath.Join(dir, "job")); err != nil { // rm -rf removed the folders too
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := os.Lstat(filepath.Join(dir, k)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still at its key after the move: %v", k, err)
		}
	}
	got, err := l.List(context.Background())
	if err != nil || len(got) != len(keys) {
		t.Fatalf("List = %d entries, %v; want %d", len(got), err, len(keys))
	}
	for i, e := range got {
		if e.Key() != keys[i] || e.Size != int64(len("content of "+keys[i])) || !e.ModTime.Equal(mtime) || e.Decision.UID != 7 {
			t.Errorf("entry %d = %+v", i, e)
		}
	}
	if e, ok, err := quarantine.Find(context.Background(), l, "job/shared/a.sst"); err != nil || !ok || e.ID != es[0].ID {
		t.Fatalf("quarantine.Find = %v %v %v", e, ok, err)
	}
	for _, e := range es {
		if _, err := l.Restore(context.Background(), e.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		b, err := os.ReadFile(filepath.Join(dir, k))
		if err != nil || !bytes.Equal(b, []byte("content of "+k)) {
			t.Fatalf("%s after restore: %q %v", k, b, err)
		}
		fi, _ := os.Stat(filepath.Join(dir, k))
		if !fi.ModTime().Equal(mtime) {
			t.Errorf("%s mtime %v, want %v", k, fi.ModTime(), mtime)
		}
	}
	if got, _ := l.List(context.Background()); len(got) != 0 {
		t.Fatalf("entries left after restoring all: %v", got)
	}
	names, _ := os.ReadDir(filepath.Join(dir, store.QuarantineDir))
	if len(names) != 1 || names[0].Name() != JournalName {
		t.Fatalf("quarantine folder holds %v, want only the journal", names)
	}
}

func TestLocalRestoreNeverOverwrites(t *testing.T) {
	dir, l, _ := newArea(t)
	write(t, dir, "j/f", "old")
	e := move(t, dir, l, "j/f")
	write(t, dir, "j/f", "new")
	_, err := l.Restore(context.Background(), e.ID)
	if !errors.Is(err, quarantine.ErrOccupied) {
		t.Fatalf("restore onto an occupied path: %v, want quarantine.ErrOccupied", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "j/f")); string(b) != "new" {
		t.Fatalf("the occupant was replaced: %q", b)
	}
	if got, _ := l.List(context.Background()); len(got) != 1 {
		t.Fatalf("the entry left quarantine: %v", got)
	}
}

// longKey is a key whose self-describing name would not fit in a name: its entry is a plain id with a
// record in the journal.
var longKey = "j/" + strings.Repeat("x", 200)

// TestLocalCrashStates checks every state a crash can leave between two steps of a move, restore or purge,
// for both forms of entry (a self-describing name; a plain id with its record, for a long key): the
// object is at its key or in the folder, and List names it once or not at all.
func TestLocalCrashStates(t *testing.T) {
	for _, tc := range []struct {
		name     string
		key      string
		setup    func(t *testing.T, dir, key string, l *Local)
		entries  int
		atKey    bool
		problems int
	}{
		{"record written, object not moved", longKey, func(t *testing.T, dir, key string, l *Local) {
			if err := l.writeRecord(quarantine.Entry{ID: quarantine.NewID(l.now()), Path: key}); err != nil {
				t.Fatal(err)
			}
		}, 0, true, 0},
		{"object moved back, record not removed", longKey, func(t *testing.T, dir, key string, l *Local) {
			e := move(t, dir, l, key)
			if err := unix.Renameat(l.dir, e.ID, unix.AT_FDCWD, filepath.Join(dir, key)); err != nil {
				t.Fatal(err)
			}
		}, 0, true, 0},
		{"named object moved back", "j/f", func(t *testing.T, dir, key string, l *Local) {
			e := move(t, dir, l, key)
			if err := unix.Renameat(l.dir, e.ID, unix.AT_FDCWD, filepath.Join(dir, key)); err != nil {
				t.Fatal(err)
			}
		}, 0, true, 0},
		{"object moved, record lost", longKey, func(t *testing.T, dir, key string, l *Local) {
			move(t, dir, l, key)
			// A power failure took the journal's last write, not the rename: reopened, the object has no record.
			if err := os.Truncate(filepath.Join(dir, store.QuarantineDir, JournalName), 0); err != nil {
				t.Fatal(err)
			}
			fresh, err := OpenLocal(dir, l.now)
			if err != nil {
				t.Fatal(err)
			}
			l.recMu.Lock()
			l.recs = fresh.recs
			l.recMu.Unlock()
			fresh.Close()
		}, 0, false, 1},
		{"complete move", longKey, func(t *testing.T, dir, key string, l *Local) { move(t, dir, l, key) }, 1, false, 0},
		{"complete named move", "j/f", func(t *testing.T, dir, key string, l *Local) { move(t, dir, l, key) }, 1, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, l, clk := newArea(t)
			write(t, dir, tc.key, "x")
			tc.setup(t, dir, tc.key, l)
			es, probs, err := l.ListAll(context.Background())
			if err != nil || len(es) != tc.entries || len(probs) != tc.problems {
				t.Fatalf("ListAll = %d entries, %d problems, %v; want %d, %d", len(es), len(probs), err, tc.entries, tc.problems)
			}
			for _, e := range es {
				if e.Key() != tc.key {
					t.Fatalf("entry %+v: key %q, want %q", e, e.Key(), tc.key)
				}
			}
			_, err = os.Lstat(filepath.Join(dir, tc.key))
			if (err == nil) != tc.atKey {
				t.Fatalf("object at its key: %v, want %v", err == nil, tc.atKey)
			}
			if tc.atKey && tc.entries != 0 {
				t.Fatal("object both at its key and in quarantine")
			}
			// A young stale record is kept (its move may be under way); an old one goes.
			if err := l.Tidy(context.Background(), time.Minute); err != nil {
				t.Fatal(err)
			}
			clk.t = clk.t.Add(2 * time.Minute)
			if err := l.Tidy(context.Background(), time.Minute); err != nil {
				t.Fatal(err)
			}
			names, _ := os.ReadDir(filepath.Join(dir, store.QuarantineDir))
			if want := tc.entries + tc.problems + 1; len(names) != want {
				t.Fatalf("after Tidy the folder holds %d names, want %d (objects and the journal)", len(names), want)
			}
			reopened, err := OpenLocal(dir, clk.now)
			if err != nil {
				t.Fatal(err)
			}
			defer reopened.Close()
			if got := len(reopened.recs) + len(reopened.named); got != tc.entries {
				t.Fatalf("reopened after Tidy: %d records and named entries, want %d", got, tc.entries)
			}
		})
	}
}

func TestPurgeExpired(t *testing.T) {
	dir, l, clk := newArea(t)
	for _, k := range []string{"a/old", "a/ref", "a/young"} {
		write(t, dir, k, k)
	}
	move(t, dir, l, "a/old")
	move(t, dir, l, "a/ref")
	clk.t = clk.t.Add(20 * time.Hour)
	move(t, dir, l, "a/young")
	clk.t = clk.t.Add(5 * time.Hour) // old and ref are 25 h old, young 5 h
	referenced := func(_ context.Context, key string) (bool, error) { return key == "a/ref", nil }
	if _, err := quarantine.PurgeExpired(context.Background(), l, nil, 0, clk.t, referenced); err == nil {
		t.Fatal("a purge with no TTL was accepted")
	}
	r, err := quarantine.PurgeExpired(context.Background(), l, nil, 24*time.Hour, clk.t, referenced)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Purged) != 1 || r.Purged[0].Path != "a/old" {
		t.Fatalf("purged %v, want a/old only", r.Purged)
	}
	reasons := map[string]quarantine.Kept{}
	for _, k := range r.Kept {
		reasons[k.Entry.Path] = k
	}
	if reasons["a/ref"].Reason != "referenced" || reasons["a/young"].Reason != "young" || time.Duration(reasons["a/young"].Left) != 19*time.Hour {
		t.Fatalf("kept %+v", reasons)
	}
	failing := func(context.Context, string) (bool, error) { return false, errors.New("index closed") }
	clk.t = clk.t.Add(48 * time.Hour)
	r, _ = quarantine.PurgeExpired(context.Background(), l, nil, 24*time.Hour, clk.t, failing)
	if len(r.Purged) != 0 {
		t.Fatalf("purged %v although the index could not be asked", r.Purged)
	}
	es, _ := l.List(context.Background())
	if s := quarantine.Summarise(es); s.Objects != 2 || s.Bytes != int64(len("a/ref")+len("a/young")) {
		t.Fatalf("quarantine.Summarise = %+v", s)
	}
}

// FuzzJournal: whatever the journal holds, opening and listing the area neither panics nor holds more
// than MaxRecord of one line, every object is listed once (as an entry or a problem), and a restore of a
// hostile record's path never leaves the store.
func FuzzJournal(f *testing.F) {
	f.Add([]byte(`{"id":"0000000000000000001-00","path":"a/b","size":3}` + "\n"))
	f.Add([]byte(`{"id":"0000000000000000001-00","path":"../../etc/passwd"}` + "\n"))
	f.Add([]byte(`{"id":"0000000000000000001-00","path":".ckguard-quarantine/x"}`))
	f.Add([]byte(`{"id":"../x","path":"a"}` + "\n" + `{"id":"entries.jsonl","path":"a"}`))
	f.Add(bytes.Repeat([]byte("["), 1000))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		q := filepath.Join(dir, store.QuarantineDir)
		if err := os.Mkdir(q, 0o700); err != nil {
			t.Fatal(err)
		}
		id := "0000000000000000001-00"
		if err := os.WriteFile(filepath.Join(q, id), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(q, JournalName), b, 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := OpenLocal(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		es, probs, err := l.ListAll(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(es)+len(probs) != 1 {
			t.Fatalf("%d entries + %d problems for one object", len(es), len(probs))
		}
		for _, e := range es {
			if e.ID != id {
				t.Fatalf("entry %q for object %q", e.ID, id)
			}
			if _, err := l.Restore(context.Background(), e.ID); err == nil {
				if _, err := os.Lstat(filepath.Join(dir, e.Key())); err != nil || store.InQuarantine(e.Key()) {
					t.Fatalf("restored to %q: %v", e.Key(), err)
				}
			}
		}
	})
}

func TestReadLineBoundsLongLines(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 3*quarantine.MaxRecord)
	recs, bad, err := parseJournal(bytes.NewReader(append(append(long, '\n'), []byte(`{"id":"1-a","path":"p"}`+"\n")...)))
	if err != nil || bad != 1 || len(recs) != 1 || recs["1-a"].Path != "p" {
		t.Fatalf("parseJournal = %v, %d bad, %v; want the record after the long line", recs, bad, err)
	}
}

// TestLocalRestoreGivesNewFoldersToTheOwner: as root, the folders a restore creates belong to the
// restored object's owner (so its user can clean them up), a folder someone else put at the name
// keeps its owner, and a symlink on the way is never followed.
func TestLocalRestoreGivesNewFoldersToTheOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown)")
	}
	const uid = 65534
	for _, tc := range []struct {
		name     string
		prepare  func(t *testing.T, dir string) // after the staging, before the restore
		wantErr  bool
		wantUIDs map[string]uint32 // folder → owner after the restore
	}{
		{"created folders", func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, "job")); err != nil {
				t.Fatal(err)
			}
		}, false, map[string]uint32{"job": uid, "job/chk-1": uid}},
		{"existing folder of another user", func(t *testing.T, dir string) {
			if err := os.Chown(filepath.Join(dir, "job"), 4242, 4242); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(filepath.Join(dir, "job", "chk-1")); err != nil {
				t.Fatal(err)
			}
		}, false, map[string]uint32{"job": 4242, "job/chk-1": uid}},
		{"symlink on the way", func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, "job")); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(dir, "elsewhere"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("elsewhere", filepath.Join(dir, "job")); err != nil {
				t.Fatal(err)
			}
		}, true, map[string]uint32{"elsewhere": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, l, _ := newArea(t)
			write(t, dir, "job/chk-1/f", "data")
			if err := os.Chown(filepath.Join(dir, "job/chk-1/f"), uid, uid); err != nil {
				t.Fatal(err)
			}
			e := move(t, dir, l, "job/chk-1/f")
			tc.prepare(t, dir)
			_, err := l.Restore(context.Background(), e.ID)
			if tc.wantErr != (err != nil) {
				t.Fatalf("restore: %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				if _, err := os.Lstat(filepath.Join(dir, "elsewhere", "chk-1")); err == nil {
					t.Fatal("the restore followed the symlink")
				}
			}
			for d, want := range tc.wantUIDs {
				var st unix.Stat_t
				if err := unix.Lstat(filepath.Join(dir, d), &st); err != nil {
					t.Fatal(err)
				}
				if st.Uid != want {
					t.Errorf("%s: owner %d, want %d", d, st.Uid, want)
				}
			}
		})
	}
}

// TestLocalRefusesAFolderNotItsOwn: a quarantine folder that someone other than the daemon's user made
// (or can write) is refused at open, before its journal is read: the Flink user owning the store root
// can make the folder before the first mount, or rename the daemon's away and make another between two
// mounts, with records naming what root should restore where.
func TestLocalRefusesAFolderNotItsOwn(t *testing.T) {
	const other = 65534
	// A default ACL on the store root does not open the folder made 0700 to others (its mask is the
	// mode's group bits), so it is not refused.
	t.Run("made under a default ACL", func(t *testing.T) {
		dir := t.TempDir()
		if out, err := exec.Command("setfacl", "-d", "-m", "u:65534:rwx,g::rwx,o::rwx", dir).CombinedOutput(); err != nil {
			t.Skipf("setfacl: %v %s", err, out)
		}
		l, err := OpenLocal(dir, nil)
		if err != nil {
			t.Fatalf("OpenLocal: %v", err)
		}
		l.Close()
		fi, err := os.Stat(filepath.Join(dir, store.QuarantineDir))
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("the folder made under a default ACL: %v, %v; want 0700", fi.Mode(), err)
		}
	})
	for _, tc := range []struct {
		name     string
		uid      int // owner of the folder made before the open (-1: none made)
		mode     os.FileMode
		wantOpen bool
	}{
		{"made by the open", -1, 0, true},
		{"own 0700", os.Geteuid(), 0o700, true},
		{"own 0755", os.Geteuid(), 0o755, true},
		{"own, group-writable", os.Geteuid(), 0o770, false},
		{"own, world-writable", os.Geteuid(), 0o777, false},
		{"another user's 0700", other, 0o700, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.uid >= 0 && tc.uid != os.Geteuid() && os.Geteuid() != 0 {
				t.Skip("needs root (chown)")
			}
			dir := t.TempDir()
			if tc.uid >= 0 {
				q := filepath.Join(dir, store.QuarantineDir)
				if err := os.Mkdir(q, 0o700); err != nil {
					t.Fatal(err)
				}
				// A planted entry: an object and its record naming another user's folder.
				write(t, q, "1-a", "planted")
				write(t, q, JournalName, `{"id":"1-a","path":"victim/chk-1/_metadata"}`+"\n")
				if err := os.Chmod(q, tc.mode); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(q, tc.uid, tc.uid); err != nil {
					t.Fatal(err)
				}
			}
			l, err := OpenLocal(dir, nil)
			if tc.wantOpen != (err == nil) {
				t.Fatalf("OpenLocal: %v, want opened %v", err, tc.wantOpen)
			}
			if err != nil {
				t.Logf("refused: %v", err)
				return
			}
			defer l.Close()
			if tc.uid >= 0 {
				if es, err := l.List(context.Background()); err != nil || len(es) != 1 {
					t.Fatalf("List of the daemon's own folder: %v, %v", es, err)
				}
			}
		})
	}
}

// TestLocalNamedEntries: an unlink of a key whose name fits is staged by the rename alone (nothing is
// written to the journal), under a name that is its record: reopened without any record (a kill -9 right
// after the rename), the entry is listed and found with its key, size, mtime and caller, and restores
// byte-identical. A long key still gets its record first.
func TestLocalNamedEntries(t *testing.T) {
	dir, l, _ := newArea(t)
	journal := filepath.Join(dir, store.QuarantineDir, JournalName)
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	keys := []string{"job/shared/a.sst", "job/odd ~name\xff", longKey}
	for _, k := range keys {
		write(t, dir, k, "content of "+k)
		if err := os.Chtimes(filepath.Join(dir, k), mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys[:2] {
		e := move(t, dir, l, k)
		if _, named, err := quarantine.ParseEntryName(e.ID); !named || err != nil {
			t.Fatalf("%s staged as %q, not under a self-describing name (%v)", k, e.ID, err)
		}
		if fi, err := os.Stat(journal); err != nil || fi.Size() != 0 {
			t.Fatalf("staging %s wrote to the journal: %v %v", k, fi.Size(), err)
		}
	}
	long := move(t, dir, l, longKey)
	if _, named, _ := quarantine.ParseEntryName(long.ID); named {
		t.Fatalf("the long key got a self-describing name %q", long.ID)
	}
	if fi, err := os.Stat(journal); err != nil || fi.Size() == 0 {
		t.Fatalf("the long key's record is not in the journal: %v", err)
	}
	l.Close()
	re, err := OpenLocal(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close()
	es, probs, err := re.ListAll(context.Background())
	if err != nil || len(es) != 3 || len(probs) != 0 {
		t.Fatalf("ListAll after reopening = %+v %+v %v", es, probs, err)
	}
	for _, e := range es {
		if e.Size != int64(len("content of "+e.Key())) || !e.ModTime.Equal(mtime) || e.Decision.UID != 7 || e.Change() != quarantine.OpUnlink || e.Decision.Reason == "" {
			t.Errorf("entry %+v", e)
		}
	}
	for _, k := range keys {
		e, ok, err := quarantine.Find(context.Background(), re, k)
		if err != nil || !ok || e.Key() != k || e.Size != int64(len("content of "+k)) {
			t.Fatalf("quarantine.Find(%q) after reopening = %+v %v %v", k, e, ok, err)
		}
		if _, err := re.Restore(context.Background(), e.ID); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, k)); err != nil || string(b) != "content of "+k {
			t.Fatalf("%s restored as %q, %v", k, b, err)
		}
		if _, ok, _ := quarantine.Find(context.Background(), re, k); ok {
			t.Fatalf("%s still found in quarantine after its restore", k)
		}
	}
}

// TestLocalMoveAtStatTakesTheDecidedStat: the decided stat names the file to stage: a stat of another
// inode (here a made-up one) is refused with the file left at its key, a folder is refused on it, and
// the entry's size, mtime and mode are the staged object's.
func TestLocalMoveAtStatTakesTheDecidedStat(t *testing.T) {
	dir, l, _ := newArea(t)
	write(t, dir, "j/f", "x")
	pfd, err := unix.Open(filepath.Join(dir, "j"), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd)
	fake := unix.Stat_t{Mode: unix.S_IFREG | 0o640, Size: 12345}
	if _, err := l.MoveAtStat(pfd, "f", "j/f", &fake, quarantine.Decision{Op: quarantine.OpUnlink}); !errors.Is(err, ErrReplaced) {
		t.Fatalf("MoveAtStat with another inode's stat = %v, want ErrReplaced", err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, "f", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	e, err := l.MoveAtStat(pfd, "f", "j/f", &st, quarantine.Decision{Op: quarantine.OpUnlink})
	if err != nil || e.Size != 1 || e.Mode != st.Mode {
		t.Fatalf("MoveAtStat = %+v %v; want the staged file's size and mode", e, err)
	}
	write(t, dir, "j/g", "y")
	dst := unix.Stat_t{Mode: unix.S_IFDIR | 0o755}
	if _, err := l.MoveAtStat(pfd, "g", "j/g", &dst, quarantine.Decision{Op: quarantine.OpUnlink}); err != unix.EISDIR {
		t.Fatalf("MoveAtStat of what the decision saw as a folder = %v, want EISDIR", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "j/g")); err != nil {
		t.Fatalf("j/g left its key: %v", err)
	}
}

// TestLocalOldFormatArea: a folder the previous release wrote (every object under a plain id, its JSON
// record in the journal) beside self-describing entries lists, restores and purges as before.
func TestLocalOldFormatArea(t *testing.T) {
	dir, _, clk := newArea(t)
	q := filepath.Join(dir, store.QuarantineDir)
	old := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	ids := []string{"1793527200000000000-0123456789abcdef", "1793527201000000000-fedcba9876543210"}
	journal := `{"id":"` + ids[0] + `","path":"oldjob/shared/a","size":5,"mtime":"2026-10-01T00:00:00Z","mode":33188,"deleted_at":"2026-11-01T10:00:00Z","decision":{"op":"unlink","reason":"unreferenced","message":"unlink /oldjob/shared/a: referenced by no live checkpoint","pid":42,"uid":1000,"gid":1000,"comm":"rm"}}` + "\n" +
		`{"id":"` + ids[1] + `","path":"oldjob/chk-1/_metadata","size":4,"mtime":"2026-10-01T00:00:00Z","deleted_at":"2026-11-01T10:00:01Z","decision":{"reason":"unreferenced","uid":0,"gid":0}}` + "\n"
	write(t, q, JournalName, journal)
	write(t, q, ids[0], "aaaaa")
	write(t, q, ids[1], "meta")
	l, err := OpenLocal(dir, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	write(t, dir, "newjob/f", "new")
	move(t, dir, l, "newjob/f")
	es, probs, err := l.ListAll(context.Background())
	if err != nil || len(es) != 3 || len(probs) != 0 {
		t.Fatalf("ListAll = %+v %+v %v", es, probs, err)
	}
	if es[0].ID != ids[0] || es[0].Key() != "oldjob/shared/a" || es[0].Decision.Comm != "rm" || !es[0].DeletedAt.Equal(old) || es[1].Change() != quarantine.OpUnlink {
		t.Fatalf("old entries read as %+v, %+v", es[0], es[1])
	}
	if e, ok, err := quarantine.Find(context.Background(), l, "oldjob/chk-1/_metadata"); err != nil || !ok || e.ID != ids[1] {
		t.Fatalf("quarantine.Find of an old entry = %+v %v %v", e, ok, err)
	}
	if _, err := l.Restore(context.Background(), ids[0]); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "oldjob/shared/a")); string(b) != "aaaaa" {
		t.Fatalf("old entry restored as %q", b)
	}
	clk.t = clk.t.Add(48 * time.Hour)
	r, err := quarantine.PurgeExpired(context.Background(), l, nil, 24*time.Hour, clk.t, nil)
	if err != nil || len(r.Purged) != 2 {
		t.Fatalf("purge = %+v %v; want the old _metadata and the new entry purged", r, err)
	}
	if es, _ := l.List(context.Background()); len(es) != 0 {
		t.Fatalf("left after the purge: %+v", es)
	}
}

// TestLocalPlantedNames: a name with the separator that is not one of ours is a problem (never
// restored or purged), and a self-describing name whose key leaves the store is never restored.
func TestLocalPlantedNames(t *testing.T) {
	dir, _, clk := newArea(t)
	q := filepath.Join(dir, store.QuarantineDir)
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	evil := "0000000000000000001-0123456789abcdef~unlink~0~0~0~~" + enc("../../etc/x")
	bad := "0000000000000000001-00~unlink~zz"
	write(t, q, evil, "x")
	write(t, q, bad, "x")
	l, err := OpenLocal(dir, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	es, probs, err := l.ListAll(context.Background())
	if err != nil || len(es) != 1 || len(probs) != 1 || probs[0].ID != bad {
		t.Fatalf("ListAll = %+v %+v %v", es, probs, err)
	}
	if _, err := l.Restore(context.Background(), evil); err == nil {
		t.Fatal("restored an entry whose key leaves the store")
	}
	if _, err := os.Stat(filepath.Join(dir, "../etc/x")); err == nil {
		t.Fatal("something was written outside the store")
	}
	if err := l.Purge(context.Background(), bad); !errors.Is(err, quarantine.ErrNoEntry) {
		t.Fatalf("purge of a planted name = %v, want quarantine.ErrNoEntry", err)
	}
}

// TestLocalRestoreKeepsAPrivateFolderPrivate: a file that sat in a 0700 folder is, after a restore that
// had to make its folders again, readable by its owner (uid 65534) and by no other user: the folders a
// restore makes are 0700, never more open than the one the file came from.
func TestLocalRestoreKeepsAPrivateFolderPrivate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown, another user's reads)")
	}
	const owner, other = 65534, 4242
	dir, l, _ := newArea(t)
	// The test's temporary folders are 0700: let every user reach the store root.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, dir, "job/secret/f", "data")
	for _, k := range []string{"job", "job/secret", "job/secret/f"} {
		if err := os.Chown(filepath.Join(dir, k), owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "job/secret"), 0o700); err != nil {
		t.Fatal(err)
	}
	readAs := func(uid uint32) error {
		cmd := exec.Command("cat", filepath.Join(dir, "job/secret/f"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if err := readAs(other); err == nil {
		t.Fatal("before the staging another user reads the file: the setup is wrong")
	}
	e := move(t, dir, l, "job/secret/f")
	if err := os.RemoveAll(filepath.Join(dir, "job")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Restore(context.Background(), e.ID); err != nil {
		t.Fatal(err)
	}
	if err := readAs(owner); err != nil {
		t.Errorf("the owner cannot read the restored file: %v", err)
	}
	if err := readAs(other); err == nil {
		t.Error("another user reads the restored file: a folder the restore made is more open than the 0700 one it sat in")
	}
	for _, k := range []string{"job", "job/secret"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, k), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o777 != 0o700 || st.Uid != owner {
			t.Errorf("%s: mode %04o owner %d, want 0700 owned by %d", k, st.Mode&0o777, st.Uid, owner)
		}
	}
}
