package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// TestFleetRestoreOnce, on a local store and on one versitygw bucket: a file staged by mount 1's
// quarantine (the area is the store's, so every mount of it sees the entry) is restored through
// mount 2; the same restore racing through mount 3 restores nothing more and never replaces the restored file, and neither does a restore after it;
// both name the mount that restored the file and when ("already restored by the mount on ...").
func TestFleetRestoreOnce(t *testing.T) {
	mntRequire(t)
	const key = "garbage/x/f"
	for _, tc := range []struct {
		name string
		// setup makes the store with key holding "original", old enough to delete; overwrite writes
		// "new" there and read reads it (beside the mounts).
		setup func(t *testing.T) (store string, flags []string, overwrite func(), read func() string)
	}{
		{"local", func(t *testing.T) (string, []string, func(), func() string) {
			store := filepath.Join(t.TempDir(), "store")
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
			return store, nil, func() {
					if err := os.WriteFile(p, []byte("new"), 0o644); err != nil {
						t.Fatal(err)
					}
				}, func() string {
					b, _ := os.ReadFile(p)
					return string(b)
				}
		}},
		{"s3", func(t *testing.T) (string, []string, func(), func() string) {
			e := s3Start(t)
			e.tree(t, incident{"IncidentOne", treegen.IncidentOne}, s3Root)
			c := e.client(t, e.srv.Endpoint)
			put := func(v string) {
				if _, err := c.Put(context.Background(), key, strings.NewReader(v), int64(len(v)), s3client.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			put("original")
			return s3Root, e.mountArgs(), func() { put("new") }, func() string {
				got, _ := s3Read(t, c, key)
				return got
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, storeFlags, overwrite, read := tc.setup(t)
			flags := append(append([]string{}, storeFlags...), "--shared", "--quarantine", "24h", "--sync-interval", "1s")
			if tc.name == "s3" {
				flags = append(flags, "--grace", "0s", "--active-window", "0s") // an object cannot be made old on S3
			}
			ps := []*mntProc{mntStart(t, store, "", flags...), mntStart(t, store, "", flags...), mntStart(t, store, "", flags...)}
			if err := os.Remove(ps[0].m(key)); err != nil {
				t.Fatalf("rm through mount 1: %v", err)
			}
			waitEntries(t, ps[0], 1) // S3: the staging follows in the delete queue's rounds
			restore := func(i int) (string, int) {
				return qcli(ps[i], "restore", append(append([]string{}, storeFlags...), key)...)
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
			// The loser names the winner: its host and the mount's registry id, and when.
			winner, loser := 1, 2
			if codes[1] != 0 {
				winner, loser = 2, 1
			}
			host, _ := os.Hostname()
			wantMsg := "already restored by the mount on " + host + " (" + shared.MountID(host, ps[winner].index) + ") at "
			if !strings.Contains(outs[loser], wantMsg) {
				t.Errorf("the losing restore (mount %d) says %q, want it to name the winner: %q", loser+1, strings.TrimSpace(outs[loser]), wantMsg)
			}
			if got := read(); got != "original" {
				t.Fatalf("restored file: %q", got)
			}
			// Written over meanwhile by someone: a later restore must not replace it.
			overwrite()
			out, code := restore(0)
			t.Logf("restore through mount 1 after: exit %d: %s", code, strings.TrimSpace(out))
			if got := read(); got != "new" {
				t.Errorf("a later restore replaced the file: %q", got)
			}
			if code == 0 || !strings.Contains(out, wantMsg) {
				t.Errorf("a later restore through mount 1: exit %d, %q; want a failure naming who restored the file: %q", code, strings.TrimSpace(out), wantMsg)
			}
			if tc.name != "local" {
				return
			}
			// The CLI on the store with no mount behind its index claims the restore too: a mount
			// restoring the same path afterwards names it.
			// "new" at key, made old: stage it through mount 1, restore it by the CLI.
			old := time.Now().Add(-30 * 24 * time.Hour)
			if err := os.Chtimes(filepath.Join(store, key), old, old); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(ps[0].m(key)); err != nil {
				t.Fatalf("rm through mount 1: %v", err)
			}
			waitEntries(t, ps[0], 1)
			out, code = mntRun(t, "", mntBinary(t), "quarantine", "restore", "--store", store, "--index", filepath.Join(t.TempDir(), "no-mount"), key)
			t.Logf("restore by the CLI, no mount: exit %d: %s", code, strings.TrimSpace(out))
			if code != 0 || read() != "new" {
				t.Fatalf("restore by the CLI with no mount: exit %d, %q", code, read())
			}
			out, code = restore(1)
			if code == 0 || !strings.Contains(out, "already restored by `ckguard quarantine restore` of ") {
				t.Errorf("a restore through mount 2 after the CLI's: exit %d, %q; want it to name the CLI's restore", code, strings.TrimSpace(out))
			}
		})
	}
}
