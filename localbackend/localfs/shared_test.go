package localfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/internal/fusetest"
)

// nobody is the unprivileged local user the tests of a shared (--allow-other) mount act as.
const nobody = "65534"

// mountShared mounts a guard over store with --allow-other on a mountpoint every user can reach (the store
// itself stays wherever the caller put it), as a root daemon on a shared host runs.
func mountShared(t *testing.T, store string) *env {
	t.Helper()
	fusetest.Require(t)
	requireRoot(t)
	mdir, err := os.MkdirTemp("", "ckguard-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(mdir) })
	if err := os.Chmod(mdir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &env{store: store, mnt: filepath.Join(mdir, "mnt"), auditPath: filepath.Join(t.TempDir(), "audit.jsonl")}
	if err := os.Mkdir(e.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	e.checker = guardtest.New()
	al, err := audit.Open(e.auditPath, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.met = metrics.New()
	enf, err := guard.NewEnforcer(guard.Config{Checker: e.checker, Audit: al, Metrics: e.met})
	if err != nil {
		t.Fatal(err)
	}
	e.m, err = Mount(Options{Store: store, Mountpoint: e.mnt, Enforcer: enf, Metrics: e.met, AllowOther: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.m.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
			_ = exec.Command("fusermount3", "-uz", e.mnt).Run()
		}
		al.Close()
	})
	return e
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the daemon of a shared mount runs as root, and the test acts as another user")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("setpriv (util-linux) is required")
		}
		t.Skip("setpriv not installed")
	}
}

// asNobody runs argv as uid/gid 65534 without supplementary groups, from /, and returns its combined output.
func asNobody(t *testing.T, argv ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + nobody, "--regid=" + nobody, "--clear-groups", "--"}, argv...)...)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// ext4Store makes a store directory on a fresh ext4 filesystem in a loop-mounted image file the test
// created, so what an attack does to "the store's filesystem" stays inside the test (never a real one).
// The store folder belongs to nobody.
func ext4Store(t *testing.T) string {
	t.Helper()
	fusetest.Require(t)
	requireRoot(t)
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is required", tool)
			}
			t.Skipf("%s not installed", tool)
		}
	}
	dir := t.TempDir()
	img, fsdir := filepath.Join(dir, "store.img"), filepath.Join(dir, "fs")
	if err := os.Mkdir(fsdir, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run("truncate", "-s", "64M", img)
	run("mkfs.ext4", "-q", "-F", img)
	run("mount", "-o", "loop", img, fsdir)
	// Registered after the mount's own cleanup (Cleanup runs last-in first-out): the guard is unmounted
	// first. Lazily, so a test that failed with a file still open cannot leave the loop device behind.
	t.Cleanup(func() { _ = exec.Command("umount", "-l", fsdir).Run() })
	store := filepath.Join(fsdir, "store")
	if err := os.Mkdir(store, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(store, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	return store
}
