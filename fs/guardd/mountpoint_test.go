package guardd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/internal/fusetest"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestMountpointMappedAutomatically (review C3, e3): Flink configured with the mountpoint writes
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
