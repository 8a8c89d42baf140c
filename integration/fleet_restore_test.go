package integration

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFleetRestoreOnce: a file staged by mount 1's quarantine (the folder is the store's, so every
// mount of it sees the entry) is restored through mount 2; the same restore racing through mount 3
// restores nothing more and never replaces the restored file, and neither does a restore after it.
func TestFleetRestoreOnce(t *testing.T) {
	mntRequire(t)
	store := filepath.Join(t.TempDir(), "store")
	key := "garbage/x/f"
	p := filepath.Join(store, key)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-30 * 24 * time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--shared", "--quarantine", "24h", "--sync-interval", "1s"}
	ps := []*mntProc{mntStart(t, store, "", flags...), mntStart(t, store, "", flags...), mntStart(t, store, "", flags...)}
	if err := os.Remove(ps[0].m(key)); err != nil {
		t.Fatalf("rm through mount 1: %v", err)
	}
	restore := func(i int) (string, int) {
		return mntRun(t, "", mntBinary(t), "quarantine", "restore", "--store", store, "--index", ps[i].index, key)
	}
	var wg sync.WaitGroup
	outs := make([]string, 3)
	codes := make([]int, 3)
	for _, i := range []int{1, 2} {
		wg.Add(1)
		go func() { defer wg.Done(); outs[i], codes[i] = restore(i) }()
	}
	wg.Wait()
	t.Logf("restore through mount 2: exit %d: %s", codes[1], strings.TrimSpace(outs[1]))
	t.Logf("restore through mount 3: exit %d: %s", codes[2], strings.TrimSpace(outs[2]))
	if (codes[1] == 0) == (codes[2] == 0) {
		t.Errorf("racing restores: exits %d and %d, want exactly one success", codes[1], codes[2])
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "original" {
		t.Fatalf("restored file: %q %v", b, err)
	}
	// Written over meanwhile by someone: a later restore must not replace it.
	if err := os.WriteFile(p, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := restore(0)
	t.Logf("restore through mount 1 after: exit %d: %s", code, strings.TrimSpace(out))
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Errorf("a later restore replaced the file: %q", b)
	}
}
