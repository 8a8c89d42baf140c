package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/internal/hangfs"
)

// TestUnprivHungMountInsideStore (issue 29): a user mounts, on a folder of theirs inside the store
// (scratch/u1/mnt, below the 1777 scratch), a file system whose stat and listing never answer. The
// guard's syncs must go on (the walk never enters the mount, which is one confined unknown subtree
// named in stats): nobody still deletes an unrelated old file and an old file beside the mount by
// rm through the --allow-other mount, a referenced file stays refused, and so does rmdir of the
// mount's folder; orphans completes (exit 3, naming the mount).
func TestUnprivHungMountInsideStore(t *testing.T) {
	mntRequire(t)
	base, tr := unprivStore(t, "ckguard-mounts-hung-")
	old := time.Now().Add(-10 * 24 * time.Hour)
	for _, k := range []string{"elsewhere/old-unreferenced", "scratch/u1/old-beside"} {
		if err := tr.Write(k, 100, old); err != nil {
			t.Fatal(err)
		}
	}
	mp := filepath.Join(tr.Root, "scratch", "u1", "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	// All modes and owners set before the mount: a chmod -R after it would block in it.
	nobodyOwns(t, tr.Root)
	if out, err := exec.Command("chmod", "-R", "a+rwX", tr.Root).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v %s", err, out)
	}
	if err := os.Chmod(filepath.Join(tr.Root, "scratch"), 0o1777); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "-R", "1:1", filepath.Join(tr.Root, "scratch", "u1")).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	hung := hangfs.Mount(t, mp) // made by root here; by the user with fusermount in the field

	p := sharedProc(t, base, tr.Root)
	p.start("--allow-other")
	t.Cleanup(hung.Release) // before the daemon's stop: a daemon blocked in it could not exit
	waitSyncAfter(t, p, time.Now())
	waitSyncAfter(t, p, time.Now())

	s := p.stats()
	if s.SyncError != "" || len(s.UnknownSubtrees) != 1 || s.UnknownSubtrees[0].Key != "scratch/u1/mnt" || !s.UnknownSubtrees[0].Confined ||
		s.UnknownSubtrees[0].UID == nil || *s.UnknownSubtrees[0].UID != 1 || !strings.Contains(s.UnknownSubtrees[0].Cause, "another filesystem is mounted at "+mp) {
		t.Fatalf("stats: sync error %q, unknown subtrees %+v; want scratch/u1/mnt, uid 1, confined, naming the mount\n%s", s.SyncError, s.UnknownSubtrees, p.logText())
	}
	ref := tr.Referenced()[0]
	if out, code := asNobody(t, "rm", p.m("elsewhere/old-unreferenced"), p.m("scratch/u1/old-beside")); code != 0 {
		t.Errorf("rm of old unreferenced files as nobody: exit %d\n%s\n%s", code, out, p.logText())
	}
	res := unprivAttempts(t, `
attempt("ref", lambda: os.unlink(sys.argv[1]))
attempt("rmdir_u1", lambda: os.rmdir(sys.argv[2]))
`, p.m(ref), p.m("scratch/u1"))
	if res["ref"] != errnoOf(1) || res["rmdir_u1"] != errnoOf(1) {
		t.Errorf("as nobody: unlink referenced %s (want EPERM), rmdir scratch/u1 %s (want EPERM)\n%s", res["ref"], res["rmdir_u1"], p.logText())
	}
	if out, code := p.cli("orphans"); code != 3 || !strings.Contains(out, "scratch/u1/mnt") {
		t.Errorf("orphans with the hung mount: exit %d, want 3 naming it\n%s", code, out)
	}
	mustExist(t, tr.Root, ref)
	for _, k := range []string{"elsewhere/old-unreferenced", "scratch/u1/old-beside"} {
		if _, err := os.Lstat(filepath.Join(tr.Root, k)); !os.IsNotExist(err) {
			t.Errorf("%s still in the store after rm: %v", k, err)
		}
	}
	// Unmounted: the next sync clears it, no restart.
	hung.Unmount(t)
	waitSyncAfter(t, p, time.Now())
	if s := p.stats(); len(s.UnknownSubtrees) != 0 {
		t.Errorf("after the unmount: unknown subtrees %+v", s.UnknownSubtrees)
	}
}
