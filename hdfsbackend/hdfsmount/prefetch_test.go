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

// listWatch records the directories the fake was asked to list, through its fault hook.
type listWatch struct {
	mu     sync.Mutex
	listed map[string]int
}

// setupWatched mounts the fake with a listWatch on it.
func setupWatched(t *testing.T) (*env, *listWatch) {
	t.Helper()
	w := &listWatch{listed: map[string]int{}}
	e := setupFake(t, 0, func(f *hdfsfake.FS) {
		f.SetFault(func(op, name string) error {
			if op == "list" {
				w.mu.Lock()
				w.listed[strings.TrimPrefix(name, dir+"/")]++
				w.mu.Unlock()
			}
			return nil
		})
	})
	return e, w
}

func (w *listWatch) count(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.listed[key]
}

// waitListed waits until key has been listed (prefetched) n times.
func (w *listWatch) waitListed(t *testing.T, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for w.count(key) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s was not listed ahead of its opendir (listed %d times, want %d)", key, w.count(key), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the listing's page is read after the hook
}

// TestWalkListsSubdirectoriesAhead: a readdir starts listing the subdirectories it served before they
// are opened, and a walk then lists every directory once (the prefetched listing is used, not
// repeated).
func TestWalkListsSubdirectoriesAhead(t *testing.T) {
	e, w := setupWatched(t)
	old := time.Now().Add(-10 * 24 * time.Hour)
	const dirs = 5
	for d := range dirs {
		for f := range 3 {
			if err := e.f.Put(fmt.Sprintf("%s/job/d%d/f%d", dir, d, f), []byte("x"), old); err != nil {
				t.Fatal(err)
			}
		}
	}
	if out, err := exec.Command("ls", filepath.Join(e.mnt, "job")).CombinedOutput(); err != nil {
		t.Fatalf("ls: %v %s", err, out)
	}
	for d := range dirs {
		w.waitListed(t, fmt.Sprintf("job/d%d", d), 1)
	}
	out, err := exec.Command("find", filepath.Join(e.mnt, "job"), "-type", "f").CombinedOutput()
	if err != nil {
		t.Fatalf("find: %v %s", err, out)
	}
	if got := strings.Count(string(out), "\n"); got != dirs*3 {
		t.Errorf("find saw %d files, want %d", got, dirs*3)
	}
	for d := range dirs {
		// ls's prefetch (taken by find's opendir when still fresh, else discarded) and at most one more.
		if n := w.count(fmt.Sprintf("job/d%d", d)); n > 2 {
			t.Errorf("job/d%d listed %d times", d, n)
		}
	}
}

// TestPrefetchedListingsFollowOwnChanges: a name created, removed or renamed through the mount in a
// directory whose listing was prefetched before the change shows in the next readdir of it.
func TestPrefetchedListingsFollowOwnChanges(t *testing.T) {
	steps := []struct {
		name string
		sh   string // run in <mnt>/job
		want string // ls of job/d
	}{
		{"create", `: > d/new`, "a b new"},
		{"remove", `rm d/a`, "b"},
		{"rename out", `mv d/a a2`, "b"},
		{"rename in", `mv x d/x`, "a b x"},
		{"mkdir", `mkdir d/sub`, "a b sub"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			e, w := setupWatched(t)
			old := time.Now().Add(-10 * 24 * time.Hour)
			for _, k := range []string{"job/d/a", "job/d/b", "job/x"} {
				if err := e.f.Put(dir+"/"+k, []byte("x"), old); err != nil {
					t.Fatal(err)
				}
			}
			job := filepath.Join(e.mnt, "job")
			if out, err := exec.Command("ls", job).CombinedOutput(); err != nil {
				t.Fatalf("ls: %v %s", err, out)
			}
			w.waitListed(t, "job/d", 1) // prefetched, before the change
			cmd := exec.Command("sh", "-c", s.sh)
			cmd.Dir = job
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v %s", s.sh, err, out)
			}
			out, err := exec.Command("ls", filepath.Join(job, "d")).CombinedOutput()
			if err != nil {
				t.Fatalf("ls d: %v %s", err, out)
			}
			if got := strings.Join(strings.Fields(string(out)), " "); got != s.want {
				t.Errorf("after %s: ls d = %q, want %q", s.sh, got, s.want)
			}
		})
	}
}
