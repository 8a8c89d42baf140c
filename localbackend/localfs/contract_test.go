package localfs

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/mounttest"
)

// localHarness runs the mount contract over a temp directory: the local store keeps hard links,
// symlinks, modes, mtimes and extended attributes, renames folders in one step, and asks the index
// before it looks into a folder it removes.
var localHarness = mounttest.Harness{
	Mount: func(t *testing.T, enf *guard.Enforcer) (string, mounttest.Store) {
		dir := t.TempDir()
		st, mnt := dirStore(filepath.Join(dir, "store")), filepath.Join(dir, "mnt")
		for _, d := range []string{string(st), mnt} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		m, err := Mount(Options{Store: string(st), Mountpoint: mnt, Enforcer: enf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := m.Unmount(); err != nil {
				t.Errorf("unmount: %v", err)
				_ = exec.Command("fusermount3", "-uz", mnt).Run()
			}
		})
		return mnt, st
	},
	HardLinks:         true,
	Symlinks:          true,
	Modes:             true,
	Times:             true,
	DirRename:         true,
	TruncateToSize:    true,
	UserXattrs:        true,
	RmdirDecidesFirst: true,
}

// TestContract runs the mount contract suite on the local mount.
func TestContract(t *testing.T) { mounttest.Run(t, localHarness) }

// TestContractCatchesBrokenEnforcer: with an enforcer that lets every unlink through, the suite fails
// on the local mount.
func TestContractCatchesBrokenEnforcer(t *testing.T) {
	mounttest.CatchesBroken(t, "^TestContract$/^(RefusedWhenReferenced|CleanupToolsLeaveReferenced)$", "unlink",
		"TestContract/RefusedWhenReferenced/unlink", "TestContract/CleanupToolsLeaveReferenced/rm_-rf")
}

// dirStore is a store directory, reached beside the mount.
type dirStore string

func (d dirStore) Put(t testing.TB, key, data string) {
	t.Helper()
	p := filepath.Join(string(d), filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (d dirStore) Get(t testing.TB, key string) (string, bool) {
	t.Helper()
	p := filepath.Join(string(d), filepath.FromSlash(key))
	if st, err := os.Lstat(p); err != nil || !st.Mode().IsRegular() {
		return "", false
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

func (d dirStore) Files(t testing.TB) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(string(d), func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.Type().IsRegular() {
			rel, err := filepath.Rel(string(d), p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
