package hdfsmount_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ckguard/ckguard/fs/guard"
)

// redteamEnforcerAndMountpoint is the prelude of the tests that act as another user through an
// allow_other mount: an enforcer over ck, and an empty mountpoint in a fresh folder of mode 0755 (the
// other user must reach the mountpoint), removed after the test.
func redteamEnforcerAndMountpoint(t *testing.T, ck guard.Checker) (*guard.Enforcer, string) {
	t.Helper()
	enf, err := guard.NewEnforcer(guard.Config{Checker: ck})
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("", "ckguard-redteam-hdfs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(base, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	return enf, mnt
}
