package guardd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/guardd"
)

// TestCheckPlacementSeesBindMounts: the store also reachable at another path through a bind mount
// (an ops team's layout the paths alone do not show): an index, audit log, control socket or
// mountpoint given through that path is inside the store all the same, and refused; places really
// outside it are accepted.
func TestCheckPlacementSeesBindMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount --bind)")
	}
	dir := t.TempDir()
	store, bind, outside := filepath.Join(dir, "store"), filepath.Join(dir, "bind"), filepath.Join(dir, "outside")
	for _, d := range []string{filepath.Join(store, "job"), bind, filepath.Join(outside, "mnt")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(store, bind, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(bind, unix.MNT_DETACH) })
	if err := os.Mkdir(filepath.Join(bind, "mnt"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := guardd.Config{StoreDir: store, IndexDir: filepath.Join(outside, "index"), Mountpoint: filepath.Join(outside, "mnt")}
	for _, tc := range []struct {
		name string
		set  func(c *guardd.Config)
		want string // "" accepted, else part of the error
	}{
		{"all outside", func(c *guardd.Config) {}, ""},
		{"index through the bind mount", func(c *guardd.Config) { c.IndexDir = filepath.Join(bind, "job", "index") }, "--index"},
		{"index through the bind mount, not made yet", func(c *guardd.Config) { c.IndexDir = filepath.Join(bind, "new", "deeper", "index") }, "--index"},
		{"audit log through the bind mount", func(c *guardd.Config) { c.AuditLog = filepath.Join(bind, "audit.jsonl") }, "--audit-log"},
		{"control socket through the bind mount", func(c *guardd.Config) { c.ControlSocket = filepath.Join(bind, "job", "ckguard.sock") }, "--control-socket"},
		{"mountpoint through the bind mount", func(c *guardd.Config) { c.Mountpoint = filepath.Join(bind, "mnt") }, "is inside the store"},
		{"mountpoint is the bind mount", func(c *guardd.Config) { c.Mountpoint = bind }, "is inside the store"},
		{"index by the store's own path", func(c *guardd.Config) { c.IndexDir = filepath.Join(store, "index") }, "--index"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.set(&c)
			err := c.CheckPlacement()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("CheckPlacement: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
