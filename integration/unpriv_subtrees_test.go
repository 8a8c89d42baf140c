package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
)

// TestUnprivLongPathOutage is the outage of issue 29: on an --allow-other local mount, user nobody makes
// 18 nested folders of 250 bytes through the mount (a path of 4.5 KiB, past PATH_MAX), plus a symlink
// loop and names with a newline, control bytes and invalid UTF-8. Every index sync used to fail (`walk
// …: file name too long`) and the guard refused every change of the store, the deep folder's own
// rmdir included. Now, after two syncs: no sync error, an unreferenced 10-day-old file elsewhere is
// removed by rm, a referenced file is still refused, the deep tree is no unknown subtree (it is
// readable: it is walked by descriptors) and `rm -rf` of it through the mount works.
func TestUnprivLongPathOutage(t *testing.T) {
	mntRequire(t)
	base, tr := unprivStore(t, "ckguard-subtrees-")
	old := time.Now().Add(-10 * 24 * time.Hour)
	if err := tr.Write("elsewhere/old-unreferenced", 100, old); err != nil {
		t.Fatal(err)
	}
	nobodyOwns(t, tr.Root)
	p := sharedMount(t, base, tr.Root)
	ref := tr.Referenced()[0]

	name := strings.Repeat("d", 250)
	got := unprivAttempts(t, `
import os
root = sys.argv[1]
def deep():
    os.chdir(root)
    for i in range(18):
        os.mkdir(sys.argv[2])
        os.chdir(sys.argv[2])
attempt("deep", deep)
os.chdir(root)
os.mkdir("odd")
attempt("loop", lambda: (os.symlink("b", "odd/a"), os.symlink("a", "odd/b")))
attempt("names", lambda: [os.mkdir(os.path.join(b"odd", n)) for n in (b"new\nline", b"ctl\x01\x1b[31m", b"bad\xff\xfe")])
`, p.mnt, name)
	for _, k := range []string{"deep", "loop", "names"} {
		if got[k] != "OK" {
			t.Fatalf("making %s through the mount as nobody: %s", k, got[k])
		}
	}
	if st, err := os.Stat(filepath.Join(tr.Root, name)); err != nil || !st.IsDir() {
		t.Fatalf("deep folder not in the store: %v", err)
	}
	t0 := time.Now()
	waitSyncAfter(t, p, t0)
	waitSyncAfter(t, p, time.Now())

	out, _ := p.cli("stats", "--json")
	var s refindex.StatsResult
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	if s.SyncError != "" || len(s.UnknownSubtrees) != 0 {
		t.Errorf("after the deep path: sync error %q, unknown subtrees %+v", s.SyncError, s.UnknownSubtrees)
	}
	res := unprivAttempts(t, `
attempt("old", lambda: os.unlink(sys.argv[1]))
attempt("ref", lambda: os.unlink(sys.argv[2]))
`, p.m("elsewhere/old-unreferenced"), p.m(ref))
	if res["old"] != "OK" {
		t.Errorf("rm of an unreferenced 10-day-old file elsewhere: %s, want OK\n%s", res["old"], p.logText())
	}
	if res["ref"] != errnoOf(1) {
		t.Errorf("rm of the referenced %s: %s, want EPERM", ref, res["ref"])
	}
	if out, code := asNobody(t, "rm", "-rf", p.m(name)); code != 0 {
		t.Errorf("rm -rf of the deep folder through the mount as nobody: exit %d\n%s\n%s", code, out, p.logText())
	}
	if _, err := os.Lstat(filepath.Join(tr.Root, name)); !os.IsNotExist(err) {
		t.Errorf("deep folder still in the store after rm -rf: %v", err)
	}
	mustExist(t, tr.Root, ref, "odd/a", "odd/b", "odd/new\nline", "odd/bad\xff\xfe")
}

// TestUnprivUnreadableFolderConfined: a folder the guard cannot read, for real. Root reads any mode on a
// local disk, so the daemon runs as root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (setpriv), as a
// root squashed by NFS would be; the store's folders are 777 so it can still change them. User daemon
// (uid 1) makes a folder of mode 700 in a 1777 scratch folder. After two syncs: no sync error, the folder
// is an unknown subtree in `stats --json` (owned by uid 1, confined: uid 1 wrote no `_metadata`), an
// unreferenced old file elsewhere is removed by nobody through the --allow-other mount, a referenced one is
// refused, `rmdir` of scratch is refused (unknown-subtree); once root makes it readable, the next sync
// clears it (logged once each way) and `rm -rf` of it works.
func TestUnprivUnreadableFolderConfined(t *testing.T) {
	mntRequire(t)
	base, tr := unprivStore(t, "ckguard-subtrees-dark-")
	old := time.Now().Add(-10 * 24 * time.Hour)
	if err := tr.Write("elsewhere/old-unreferenced", 100, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(tr.Root, "scratch"), 0o777); err != nil {
		t.Fatal(err)
	}
	nobodyOwns(t, tr.Root)
	if out, err := exec.Command("chmod", "-R", "a+rwX", tr.Root).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v %s", err, out)
	}
	if err := os.Chmod(filepath.Join(tr.Root, "scratch"), 0o1777); err != nil {
		t.Fatal(err)
	}
	dark := filepath.Join(tr.Root, "scratch", "dark")
	if err := os.MkdirAll(filepath.Join(dark, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dark, "inner", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(filepath.Join(dark, "inner", "f"), old, old)
	if out, err := exec.Command("chown", "-R", "1:1", dark).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	if err := os.Chmod(dark, 0o700); err != nil {
		t.Fatal(err)
	}
	p := sharedProc(t, base, tr.Root)
	p.wrap = []string{"setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-dac_override,-dac_read_search", "--"}
	p.start("--allow-other")
	waitSyncAfter(t, p, time.Now())
	waitSyncAfter(t, p, time.Now())

	s := p.stats()
	if s.SyncError != "" || len(s.UnknownSubtrees) != 1 || s.UnknownSubtrees[0].Key != "scratch/dark" || !s.UnknownSubtrees[0].Confined ||
		s.UnknownSubtrees[0].UID == nil || *s.UnknownSubtrees[0].UID != 1 || !strings.Contains(s.UnknownSubtrees[0].Cause, "permission denied") {
		t.Fatalf("stats: sync error %q, unknown subtrees %+v; want scratch/dark, uid 1, confined\n%s", s.SyncError, s.UnknownSubtrees, p.logText())
	}
	ref := tr.Referenced()[0]
	res := unprivAttempts(t, `
import shutil
attempt("old", lambda: os.unlink(sys.argv[1]))
attempt("ref", lambda: os.unlink(sys.argv[2]))
attempt("rmdir_scratch", lambda: os.rmdir(sys.argv[3]))
`, p.m("elsewhere/old-unreferenced"), p.m(ref), p.m("scratch"))
	if res["old"] != "OK" || res["ref"] != errnoOf(1) || res["rmdir_scratch"] != errnoOf(1) {
		t.Errorf("as nobody: unlink old %s (want OK), unlink referenced %s (want EPERM), rmdir scratch %s (want EPERM)\n%s", res["old"], res["ref"], res["rmdir_scratch"], p.logText())
	}
	if out, code := p.cli("orphans"); code != 3 || !strings.Contains(out, "scratch/dark") {
		t.Errorf("orphans while scratch/dark is unreadable: exit %d, want 3 naming it\n%s", code, out)
	}
	if strings.Count(p.logText(), "store entry cannot be read") != 1 {
		t.Errorf("the unreadable folder is not logged exactly once over several syncs:\n%s", p.logText())
	}
	// Made readable (by root, beside the mount): the next sync clears it, no restart.
	if err := os.Chmod(dark, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dark, "inner"), 0o777); err != nil {
		t.Fatal(err)
	}
	waitSyncAfter(t, p, time.Now())
	if s := p.stats(); len(s.UnknownSubtrees) != 0 {
		t.Errorf("after chmod: unknown subtrees %+v", s.UnknownSubtrees)
	}
	if out, code := asNobody(t, "rm", "-rf", p.m("scratch/dark")); code != 0 {
		t.Errorf("rm -rf of the folder once readable: exit %d\n%s", code, out)
	}
	if !strings.Contains(p.logText(), "store entry readable again") {
		t.Errorf("clearing not logged:\n%s", p.logText())
	}
	mustExist(t, tr.Root, ref)
}
