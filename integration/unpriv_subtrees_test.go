package integration

import (
	"encoding/json"
	"os"
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
