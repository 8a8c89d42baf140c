package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestRedteamStoreSeenAtAnotherPath: the deployment differs from the tests in where the store is seen.
// Flink writes its references through one path of the store (a symlinked store root, a bind mount of
// it), the mount is given another (the real directory, or the symlink itself), and the index lives on
// another filesystem than the store (tmpfs). In every case rm -rf of the old job and find -mtime +7
// -delete through the mount leave every file a live checkpoint references, and verify stays green.
func TestRedteamStoreSeenAtAnotherPath(t *testing.T) {
	mntRequire(t)
	for _, tc := range []struct {
		name string
		// setup runs after the tree was generated in base/real (Flink's references spell that path) and
		// returns the store path the mount is given; the files end up in the directory real(base).
		setup func(t *testing.T, base string) string
		index func(t *testing.T) string
	}{
		{"flink-through-symlink", func(t *testing.T, base string) string {
			// Flink's path base/real is now a symlink to the directory the mount is given.
			moveTo(t, base, "real2")
			if err := os.Symlink("real2", filepath.Join(base, "real")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(base, "real2/store")
		}, nil},
		{"mount-through-symlink", func(t *testing.T, base string) string {
			if err := os.Symlink("real", filepath.Join(base, "link")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(base, "link/store")
		}, nil},
		{"flink-through-bind-mount", func(t *testing.T, base string) string {
			// Flink's path base/real is now a bind mount of the directory the mount is given.
			moveTo(t, base, "real2")
			if err := os.Mkdir(filepath.Join(base, "real"), 0o755); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("mount", "--bind", filepath.Join(base, "real2"), filepath.Join(base, "real")).CombinedOutput(); err != nil {
				t.Skipf("bind mount: %v %s", err, out)
			}
			t.Cleanup(func() { _ = exec.Command("umount", filepath.Join(base, "real")).Run() })
			return filepath.Join(base, "real2/store")
		}, nil},
		{"mount-through-bind-mount", func(t *testing.T, base string) string {
			if err := os.Mkdir(filepath.Join(base, "bind"), 0o755); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("mount", "--bind", filepath.Join(base, "real"), filepath.Join(base, "bind")).CombinedOutput(); err != nil {
				t.Skipf("bind mount: %v %s", err, out)
			}
			t.Cleanup(func() { _ = exec.Command("umount", filepath.Join(base, "bind")).Run() })
			return filepath.Join(base, "bind/store")
		}, nil},
		{"index-on-tmpfs", func(t *testing.T, base string) string {
			return filepath.Join(base, "real/store")
		}, func(t *testing.T) string {
			d, err := os.MkdirTemp("/dev/shm", "ckguard-index-")
			if err != nil {
				t.Skip(err)
			}
			t.Cleanup(func() { os.RemoveAll(d) })
			return filepath.Join(d, "index")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			tr, err := treegen.IncidentTwo(filepath.Join(base, "real/store"), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			refs := map[string][]string{}
			for meta, c := range tr.Live {
				refs[meta] = c.Refs
			}
			mount := tc.setup(t, base)
			files, err := filepath.EvalSymlinks(mount)
			if err != nil {
				t.Fatal(err)
			}
			index := ""
			if tc.index != nil {
				index = tc.index(t)
			}
			before := countFiles(t, files)
			p := mntStart(t, mount, index)
			mntRun(t, "", "rm", "-rf", p.m(tr.Purge))
			mntRun(t, "", "find", p.mnt, "-mtime", "+7", "-delete")
			if lost := lostReferences(t, files, refs); len(lost) > 0 {
				t.Errorf("Flink wrote through %s, the mount was given %s: the cleanups lost referenced files:\n%s\n%s",
					filepath.Join(base, "real/store"), mount, strings.Join(lost, "\n"), p.logText())
			}
			if after := countFiles(t, files); after >= before {
				t.Errorf("the cleanups deleted nothing (%d files before, %d after)", before, after)
			}
			if tc.index != nil && !strings.Contains(p.logText(), "the index directory is in memory (tmpfs)") {
				t.Errorf("an index on tmpfs (its pins, clock correction and delete journal are lost at a reboot) was not warned about:\n%s", p.logText())
			}
			if out, code := p.cli("verify"); code != 0 {
				t.Errorf("verify after the guarded cleanups: exit %d\n%s", code, out)
			}
		})
	}
}

// moveTo renames base/real to base/name.
func moveTo(t *testing.T, base, name string) {
	t.Helper()
	if err := os.Rename(filepath.Join(base, "real"), filepath.Join(base, name)); err != nil {
		t.Fatal(err)
	}
}

// countFiles counts the files below dir outside the quarantine folder.
func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == store.QuarantineDir {
			return filepath.SkipDir // staged files are gone from the store's view
		}
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}
