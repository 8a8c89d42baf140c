package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestRedteamDefaultIndexAtAnotherPath: a mount runs with the default index (no --index) of the store
// given at one path, and the operator runs commands with the store spelt another way: through a
// symlink, or through a bind mount of it (two real paths, one directory). The default index folder
// is found by the store's identity (real path, root device and inode), so:
//   - `ckguard pin` through the other path reaches the running mount (the pin shows in the mount's
//     user.ckguard.state), and `ckguard quarantine list` goes through the mount too;
//   - with the mount stopped, `ckguard pin` through the other path writes the index the mount opens
//     next (the pin is there after a restart), and no second index folder is ever made;
//   - a mount of the store with an --index of its own, which the command cannot find, makes the
//     command refuse, naming the mount, rather than open a second index whose pins the mount never
//     sees; the stale mount-table entry of a mount killed by kill -9 does not (and the killed
//     daemon exits: it holds no file open on a FUSE mount).
func TestRedteamDefaultIndexAtAnotherPath(t *testing.T) {
	mntRequire(t)
	for _, via := range []string{"symlink", "bind-mount"} {
		t.Run(via, func(t *testing.T) {
			base, err := os.MkdirTemp("", "ckguard-indexdir-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			real := filepath.Join(base, "real")
			tr, err := treegen.IncidentTwo(filepath.Join(real, "store"), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			other := filepath.Join(base, "other")
			switch via {
			case "symlink":
				if err := os.Symlink("real", other); err != nil {
					t.Fatal(err)
				}
			case "bind-mount":
				if err := os.Mkdir(other, 0o755); err != nil {
					t.Fatal(err)
				}
				if out, err := exec.Command("mount", "--bind", real, other).CombinedOutput(); err != nil {
					t.Fatalf("bind mount (root is required for the mount tests): %v %s", err, out)
				}
				t.Cleanup(func() { _ = exec.Command("umount", other).Run() })
			}
			cache := filepath.Join(base, "cache")
			t.Setenv("XDG_CACHE_HOME", cache)
			store := filepath.Join(real, "store")
			otherStore := filepath.Join(other, "store")
			// The mount's default index: the folder named by the store's real path (the name earlier
			// versions gave it too).
			h := sha256.Sum256([]byte(store))
			index := filepath.Join(cache, "ckguard", hex.EncodeToString(h[:8]))
			p := mntStartDefaultIndex(t, store, index)
			if _, err := os.Stat(p.sock); err != nil {
				t.Fatalf("the mount's default index is not %s: %v\n%s", index, err, p.logText())
			}

			state := func(key string) string {
				t.Helper()
				buf := make([]byte, 256)
				n, err := syscall.Getxattr(p.m(key), "user.ckguard.state", buf)
				if err != nil {
					t.Fatalf("state of %s: %v", key, err)
				}
				return string(buf[:n])
			}
			var metas []string
			for m := range tr.Live {
				metas = append(metas, m)
			}
			sort.Strings(metas)
			var deletable []string
			for _, m := range metas {
				if state(m) == "deletable" {
					deletable = append(deletable, m)
				}
			}
			if len(deletable) < 2 {
				t.Fatalf("want two deletable live checkpoints to pin, have %v", deletable)
			}
			ckguard := func(args ...string) (string, int) {
				t.Helper()
				out, code := mntRun(t, "", mntBinary(t), args...)
				t.Logf("ckguard %s: exit %d: %s", strings.Join(args, " "), code, strings.TrimSpace(out))
				return out, code
			}
			folders := func() []string {
				t.Helper()
				ents, err := os.ReadDir(filepath.Join(cache, "ckguard"))
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				return names
			}

			// Running mount: the pin goes through it.
			if out, code := ckguard("pin", "--store", otherStore, path.Dir(deletable[0])); code != 0 {
				t.Fatalf("pin through %s: exit %d: %s", via, code, out)
			}
			if got := state(deletable[0]); got == "deletable" {
				t.Errorf("`ckguard pin --store %s` said pinned, yet the mount of %s still finds %s deletable", otherStore, store, deletable[0])
			}
			if out, code := ckguard("quarantine", "list", "--store", otherStore); code != 0 {
				t.Errorf("quarantine list through %s: exit %d: %s", via, code, out)
			}
			if got := folders(); len(got) != 1 || got[0] != filepath.Base(index) {
				t.Errorf("index folders %v, want the mount's %s alone", got, filepath.Base(index))
			}

			// Stopped mount: the pin lands in the index the mount opens next.
			p.stop()
			if out, code := ckguard("pin", "--store", otherStore, path.Dir(deletable[1])); code != 0 {
				t.Fatalf("pin through %s with the mount stopped: exit %d: %s", via, code, out)
			}
			if got := folders(); len(got) != 1 || got[0] != filepath.Base(index) {
				t.Errorf("index folders after a pin with the mount stopped: %v, want %s alone", got, filepath.Base(index))
			}
			p.start()
			for _, m := range deletable[:2] {
				if got := state(m); got == "deletable" {
					t.Errorf("after a restart the mount finds %s deletable: the pin through %s went to another index", m, via)
				}
			}
			p.stop()

			// A mount of the store with an --index of its own: the command cannot reach it and refuses.
			q := mntStart(t, store, "")
			out, code := ckguard("unpin", "--store", otherStore, path.Dir(deletable[0]))
			if code == 0 || !strings.Contains(out, q.mnt) {
				t.Errorf("unpin through %s while a mount with its own --index runs: exit %d, want a refusal naming the mount %s: %s", via, code, q.mnt, out)
			}
			if got := folders(); len(got) != 1 {
				t.Errorf("index folders after the refusal: %v, want one", got)
			}
			q.stop()

			// A mount killed by kill -9 guards nothing: its stale entry in the mount table does not
			// make the command refuse (nor a restart of the mount), and the pin lands in its index.
			p.start()
			p.kill9()
			if out, code := ckguard("unpin", "--store", otherStore, path.Dir(deletable[0])); code != 0 {
				t.Errorf("unpin through %s after the mount was killed: exit %d: %s", via, code, out)
			}
			if got := folders(); len(got) != 1 || got[0] != filepath.Base(index) {
				t.Errorf("index folders after the kill: %v, want %s alone", got, filepath.Base(index))
			}
		})
	}
}
