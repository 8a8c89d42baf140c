package localquarantine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// decidedStat is the stat a decision takes of key through its parent folder, with that folder's
// descriptor (closed at the end of the test).
func decidedStat(t *testing.T, dir, key string) (int, unix.Stat_t) {
	t.Helper()
	pfd, err := unix.Open(filepath.Join(dir, filepath.Dir(key)), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(pfd) })
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, filepath.Base(key), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	return pfd, st
}

// TestLocalStagesOnlyTheDecidedFile: between a decision and its staging the name can be taken by
// another file (a concurrent unlink of the same name and a create, neither serialized with this unlink)
// or by a folder with files in it. The staging of the decided stat moves neither into quarantine: it is
// refused (ESTALE), what holds the name is left there, and the quarantine holds nothing. A hard link of
// the decided file (same inode) is staged as usual.
func TestLocalStagesOnlyTheDecidedFile(t *testing.T) {
	dir, l, _ := newArea(t)
	ctx := context.Background()
	replace := map[string]func(p string){
		"new file": func(p string) {
			os.Remove(p)
			if err := os.WriteFile(p, []byte("someone else's"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"folder": func(p string) {
			os.Remove(p)
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(p, "inside"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
	}
	for what, swap := range replace {
		key := "j/" + strings.ReplaceAll(what, " ", "-")
		write(t, dir, key, "decided")
		pfd, st := decidedStat(t, dir, key)
		swap(filepath.Join(dir, key))
		_, err := l.MoveAtStat(pfd, filepath.Base(key), key, &st, quarantine.Decision{Op: quarantine.OpUnlink, UID: 7})
		if !errors.Is(err, unix.ESTALE) {
			t.Errorf("%s in place of the decided file: MoveAtStat = %v, want ESTALE", what, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, key)); err != nil {
			t.Errorf("%s in place of the decided file left its key: %v", what, err)
		}
	}
	if es, probs, err := l.ListAll(ctx); err != nil || len(es)+len(probs) != 0 {
		t.Fatalf("quarantine after refused stagings: %+v %+v %v", es, probs, err)
	}

	write(t, dir, "j/linked", "both names")
	if err := os.Link(filepath.Join(dir, "j/linked"), filepath.Join(dir, "j/other-name")); err != nil {
		t.Fatal(err)
	}
	pfd, st := decidedStat(t, dir, "j/linked")
	if _, err := l.MoveAtStat(pfd, "linked", "j/linked", &st, quarantine.Decision{Op: quarantine.OpUnlink}); err != nil {
		t.Fatalf("staging a hard-linked file: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "j/other-name")); err != nil || string(b) != "both names" {
		t.Fatalf("the other name of a staged hard link: %q %v", b, err)
	}
}

// TestLocalNamesAtTheEdges: keys that hold the name separator, percent signs, control characters,
// invalid UTF-8 or a 255-byte final name, and keys around the name limit, stage, list, find and restore
// to their exact bytes; a key too long for a name falls back to a journal record written before the move.
// The limit is the quarantine folder's own (statfs f_namelen), and a smaller one (eCryptfs: 143) moves
// the fallback down with it: no entry name is longer than the folder's filesystem takes.
func TestLocalNamesAtTheEdges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int // 0: the folder's own
	}{{"folder's own limit", 0}, {"eCryptfs limit 143", 143}} {
		t.Run(tc.name, func(t *testing.T) { testLocalNamesAtTheEdges(t, tc.limit) })
	}
}

func testLocalNamesAtTheEdges(t *testing.T, limit int) {
	dir, l, _ := newArea(t)
	ctx := context.Background()
	var sfs unix.Statfs_t
	if err := unix.Statfs(filepath.Join(dir, store.QuarantineDir), &sfs); err != nil {
		t.Fatal(err)
	}
	if l.nameMax != int(sfs.Namelen) {
		t.Fatalf("name limit %d, the folder's filesystem says %d", l.nameMax, sfs.Namelen)
	}
	if limit != 0 {
		l.nameMax = limit
	}
	journal := filepath.Join(dir, store.QuarantineDir, JournalName)
	// fits is the longest key whose self-describing name fits the limit for the comm used below.
	d := quarantine.Decision{Op: quarantine.OpUnlink, UID: 4294967295, GID: 4294967295, PID: 4294967295, Comm: "~%\n\x00comm-15bytes"}
	probe := quarantine.Entry{ID: quarantine.NewID(l.now()), Decision: d}
	fits := 0
	for n := 1; n < 400; n++ {
		probe.Path = strings.Repeat("k", n)
		if quarantine.EntryName(probe, l.nameMax) == "" {
			break
		}
		fits = n
	}
	keys := []string{
		"j/a~b~c~d~e~f~g", "j/100%25%%", "j/ctl\x01\x1b[31m\n\t", "j/bad\xff\xfe", "j/" + strings.Repeat("n", 255),
		"j/" + strings.Repeat("x", fits-2), "j/" + strings.Repeat("y", fits-1),
	}
	for i, k := range keys {
		write(t, dir, k, "content "+k)
		pfd, st := decidedStat(t, dir, k)
		before, _ := os.Stat(journal)
		e, err := l.MoveAtStat(pfd, filepath.Base(k), k, &st, d)
		if err != nil {
			t.Fatalf("stage %q: %v", k, err)
		}
		after, _ := os.Stat(journal)
		_, named, perr := quarantine.ParseEntryName(e.ID)
		if wantNamed := len(k) <= fits; named != wantNamed || perr != nil || len(e.ID) > l.nameMax {
			t.Errorf("key %d (%d bytes): staged as %q (self-describing %v, want %v; %v)", i, len(k), e.ID, named, wantNamed, perr)
		}
		if grew := after.Size() > before.Size(); grew == named {
			t.Errorf("key %d (%d bytes): journal grew %v for a self-describing %v entry", i, len(k), grew, named)
		}
	}
	es, probs, err := l.ListAll(ctx)
	if err != nil || len(es) != len(keys) || len(probs) != 0 {
		t.Fatalf("ListAll = %d entries, %+v %v", len(es), probs, err)
	}
	for _, e := range es {
		if e.Decision.Comm != d.Comm || e.Decision.UID != d.UID || e.Decision.PID != d.PID {
			t.Errorf("entry %q decision %+v", e.ID, e.Decision)
		}
	}
	for _, k := range keys {
		e, ok, err := quarantine.Find(ctx, l, k)
		if err != nil || !ok || e.Key() != k {
			t.Fatalf("quarantine.Find(%q) = %+v %v %v", k, e, ok, err)
		}
		if _, err := l.Restore(ctx, e.ID); err != nil {
			t.Fatalf("restore %q: %v", k, err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, k)); err != nil || string(b) != "content "+k {
			t.Fatalf("%q restored as %q, %v", k, b, err)
		}
	}
}
