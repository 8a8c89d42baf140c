package hdfsmount_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient/hdfsfake"
)

// rpcCounter counts the NameNode calls the mount makes, by op, through the fake's fault hook.
type rpcCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *env) countRPCs() *rpcCounter {
	c := &rpcCounter{n: map[string]int{}}
	e.f.SetFault(func(op, name string) error {
		c.mu.Lock()
		c.n[op]++
		c.mu.Unlock()
		return nil
	})
	return c
}

func (c *rpcCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// TestWalkCostsNoStatPerEntry: find and rm -rf over listed directories cost the NameNode one listing
// per directory and one delete per name, not a stat per entry: the kernel's lookups after a readdir
// (READDIRPLUS) and the unlink's decision are answered from the listing's attributes.
func TestWalkCostsNoStatPerEntry(t *testing.T) {
	const dirs, perDir = 3, 40
	e := setup(t, 0)
	old := time.Now().Add(-10 * 24 * time.Hour)
	for d := range dirs {
		for f := range perDir {
			if err := e.f.Put(fmt.Sprintf("%s/job/d%d/f%03d", dir, d, f), []byte("x"), old); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := e.countRPCs()
	cases := []struct {
		name      string
		args      []string
		maxStat   int
		wantRm    int
		wantFiles int
	}{
		// A stat or two for the walk's root and directories the kernel looks up before listing them.
		{"find -type f", []string{"find", filepath.Join(e.mnt, "job"), "-type", "f"}, dirs + 2, 0, dirs * perDir},
		// rmdir stats its directory afresh.
		{"rm -rf", []string{"rm", "-rf", filepath.Join(e.mnt, "job")}, 2*dirs + 2, dirs*perDir + dirs + 1, 0},
	}
	for _, tc := range cases {
		out, err := exec.Command(tc.args[0], tc.args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v %s", tc.name, err, out)
		}
		n := c.take()
		if n["stat"] > tc.maxStat {
			t.Errorf("%s over %d files made %d stat calls (want <= %d): %v", tc.name, dirs*perDir, n["stat"], tc.maxStat, n)
		}
		if n["delete"] != tc.wantRm {
			t.Errorf("%s made %d delete calls, want %d: %v", tc.name, n["delete"], tc.wantRm, n)
		}
		if got := strings.Count(e.files(), "job/"); got != tc.wantFiles {
			t.Errorf("after %s %d files left, want %d", tc.name, got, tc.wantFiles)
		}
	}
}

// TestListedAttrsFollowOwnChanges: after a listing filled the attribute cache, the mount's own
// writes, removals and renames show at once (they drop the names they change).
func TestListedAttrsFollowOwnChanges(t *testing.T) {
	e := setup(t, 0)
	old := time.Now().Add(-10 * 24 * time.Hour)
	for _, k := range []string{"j/a", "j/b"} {
		if err := e.f.Put(dir+"/"+k, []byte("x"), old); err != nil {
			t.Fatal(err)
		}
	}
	j := filepath.Join(e.mnt, "j")
	steps := []struct {
		name string
		sh   string
		want string
	}{
		{"write a new file", `ls -l "$0" >/dev/null; w "$0/c" hello; stat -c %s "$0/c"`, "5"},
		{"rename over a listed name", `ls -l "$0" >/dev/null; rm "$0/a"; mv "$0/b" "$0/a"; ls "$0"; stat -c %s "$0/a"`, "a\nc\n1"},
		{"recreate a removed name", `ls -l "$0" >/dev/null; rm "$0/a"; w "$0/a" abc; stat -c %s "$0/a"`, "3"},
	}
	for _, s := range steps {
		// w writes a file with one open, write, close (a shell redirect's dup'd descriptor would flush
		// the new file early).
		w := `w() { /usr/bin/python3 -c 'import sys; open(sys.argv[1], "w").write(sys.argv[2])' "$1" "$2"; }; `
		out, err := exec.Command("sh", "-c", w+s.sh, j).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v %s", s.name, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != s.want {
			t.Errorf("%s: got %q, want %q", s.name, got, s.want)
		}
	}
}

// TestSlowRmRelistsInsteadOfStat: an rm -rf slower than the age an unlink's decision accepts of listed
// attributes refreshes them by listing the directory again, a call per page, instead of a stat per
// file; every file still goes, decided on attributes at most that old.
func TestSlowRmRelistsInsteadOfStat(t *testing.T) {
	const files = 60
	var mu sync.Mutex
	n := map[string]int{}
	e := setupFake(t, 0, func(f *hdfsfake.FS) {
		f.SetFault(func(op, name string) error {
			mu.Lock()
			n[op]++
			mu.Unlock()
			if op == "delete" {
				time.Sleep(80 * time.Millisecond) // 60 deletes: about 5 s, past the 2 s an unlink accepts
			}
			return nil
		})
	})
	old := time.Now().Add(-10 * 24 * time.Hour)
	for f := range files {
		if err := e.f.Put(fmt.Sprintf("%s/job/d/f%03d", dir, f), []byte("x"), old); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	clear(n) // the calls that count are rm's
	mu.Unlock()
	if out, err := exec.Command("rm", "-rf", filepath.Join(e.mnt, "job")).CombinedOutput(); err != nil {
		t.Fatalf("rm -rf: %v %s", err, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if n["delete"] != files+2 {
		t.Errorf("%d delete calls, want %d: %v", n["delete"], files+2, n)
	}
	// Without relisting about 35 of the 60 unlinks stat; with it, a relisting every 2 s or so.
	t.Logf("calls: %v", n)
	if n["stat"] > 8 || n["list"] > 10 {
		t.Errorf("a slow rm -rf of %d files made %d stat and %d list calls (want <= 8 and <= 10): %v", files, n["stat"], n["list"], n)
	}
	if strings.Contains(e.files(), "job/") {
		t.Errorf("left: %s", e.files())
	}
}
