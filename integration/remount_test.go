package integration

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/mountutil"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestPrepareSeesDeadMountAtOnce: right after the daemon is killed, the kernel may still answer stat of
// the mountpoint from its attribute cache; a new mount started then (systemd's restart) finds the dead
// mount stale and detaches it instead of refusing the mountpoint as "already mounted".
func TestPrepareSeesDeadMountAtOnce(t *testing.T) {
	mntRequire(t)
	tr, err := treegen.IncidentOne(filepath.Join(t.TempDir(), "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := mntStart(t, tr.Root, "")
	if _, err := os.Stat(p.mnt); err != nil { // the root's attributes are now in the kernel's cache
		t.Fatal(err)
	}
	p.kill9()
	stale, err := mountutil.Prepare(p.mnt)
	if err != nil || !stale {
		t.Fatalf("Prepare right after kill -9: stale %v, err %v (want the dead mount detached)", stale, err)
	}
}
