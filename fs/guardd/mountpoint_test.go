package guardd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/internal/fusetest"
	"github.com/ckguard/ckguard/localbackend/localguardd"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestMountpointMappedAutomatically: Flink configured with the mountpoint writes
// file:<mountpoint>/… references. With no --map, the daemon maps the mountpoint to the store root itself, so
// those files are protected (they used to count as outside the store and protect nothing).
func TestMountpointMappedAutomatically(t *testing.T) {
	fusetest.Require(t)
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	tr, err := treegen.YoungOrphan(filepath.Join(dir, "store"), time.Now(), treegen.Options{URIPrefix: "file:" + mnt})
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, c := range tr.Live {
		refs = append(refs, c.Refs...)
	}
	runDaemon(t, guardd.Config{StoreDir: tr.Root, IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
		Policy: refindex.DefaultPolicy()})
	for _, k := range refs {
		if out, err := exec.Command("rm", filepath.Join(mnt, k)).CombinedOutput(); err == nil || !strings.Contains(string(out), "not permitted") {
			t.Errorf("rm %s (referenced as file:<mountpoint>/…): %v %s, want EPERM", k, err, out)
		}
		if _, err := os.Lstat(filepath.Join(tr.Root, k)); err != nil {
			t.Errorf("%s lost: %v", k, err)
		}
	}
}

// TestPlacementRefused: an index, audit log or control socket inside the store would be
// deleted by the cleanup the mount exists for, and one below the mountpoint would be written through the
// mount itself: the daemon refuses to start, before it mounts anything, and names the flag. A symlink to
// the store is seen through.
func TestPlacementRefused(t *testing.T) {
	dir := t.TempDir()
	store, mnt := filepath.Join(dir, "store"), filepath.Join(dir, "mnt")
	for _, d := range []string{store, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(store, filepath.Join(dir, "store-link")); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(dir, "index")
	tests := []struct {
		name string
		cfg  guardd.Config
		want string
	}{
		{"index in the store", guardd.Config{IndexDir: filepath.Join(store, ".ckguard")}, "--index"},
		{"index in the store through a symlink", guardd.Config{IndexDir: filepath.Join(dir, "store-link", "idx")}, "--index"},
		{"index below the mountpoint", guardd.Config{IndexDir: filepath.Join(mnt, "idx")}, "--index"},
		{"audit log in the store", guardd.Config{IndexDir: index, AuditLog: filepath.Join(store, "audit.jsonl")}, "--audit-log"},
		{"control socket in the store", guardd.Config{IndexDir: index, ControlSocket: filepath.Join(store, "s.sock")}, "--control-socket"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			c.StoreDir, c.Mountpoint, c.Policy = store, mnt, refindex.DefaultPolicy()
			err := localguardd.Run(t.Context(), c)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "inside") {
				t.Fatalf("Run = %v; want a refusal naming %s", err, tc.want)
			}
			if entries, _ := os.ReadDir(store); len(entries) != 0 {
				t.Errorf("the refused start left %v in the store", entries)
			}
		})
	}
}
