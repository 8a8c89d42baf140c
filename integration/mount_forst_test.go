package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// ForSt working folders through a real guard mount, without Flink's REST API: two jobs, one with the
// default primary dir (its working folders in <job>/shared/) and one with --forst-primary forst, each
// with two attempt folders whose files are 10 days old and a checkpoint completed 3 minutes ago.
// `find -mtime +7 -delete` over the mount and `rm -rf` of the older attempt folders are refused while
// the jobs are active (audit reason forst-working-dir, `why` names the checkpoint that says so); once
// the store shows them inactive (everything backdated by 10 days, past --active-window) the same
// commands remove the attempt folders.
func TestMountForStWorkingDirs(t *testing.T) {
	mntRequire(t)
	now := time.Now()
	old := now.Add(-10 * 24 * time.Hour)
	base := t.TempDir()
	store := filepath.Join(base, "store")
	jobs := []struct {
		id, primary string
	}{{"6c79f1a2b3c4d5e6f708192a3b4c5d6e", ""}, {"0f1e2d3c4b5a69788796a5b4c3d2e1f0", "forst"}}
	var trees []*treegen.ForStTree
	for _, j := range jobs {
		ft, err := treegen.ForSt(store, now, treegen.ForStSpec{JobID: j.id, Newest: now.Add(-3 * time.Minute), WorkingMTime: old, Primary: j.primary, Attempts: 2})
		if err != nil {
			t.Fatal(err)
		}
		trees = append(trees, ft)
	}
	p := mntStart(t, store, "", "--forst-primary", "forst")

	present := func(k string) bool {
		_, err := os.Lstat(filepath.Join(store, filepath.FromSlash(k)))
		return err == nil
	}
	// While active: nothing of the working folders goes, whatever the tool.
	mntRun(t, "", "find", p.mnt, "-mtime", "+7", "-delete")
	for _, ft := range trees {
		if out, code := mntRun(t, "", "rm", "-rf", p.m(ft.Attempts[0])); code == 0 {
			t.Errorf("rm -rf %s of an active job: exit 0 (%s)", ft.Attempts[0], out)
		}
		for _, k := range ft.Working {
			if !present(k) {
				t.Errorf("%s (10 days old, in a working folder of an active job) was deleted through the mount", k)
			}
		}
	}
	refused := 0
	for _, r := range p.auditRecords() {
		if r.Reason == "forst-working-dir" {
			refused++
		}
	}
	if refused == 0 {
		t.Errorf("no audit record with reason forst-working-dir")
	}
	out, code := p.cli("why", trees[0].Working[0])
	t.Logf("why %s:\n%s", trees[0].Working[0], out)
	if code == 0 || !strings.Contains(out, "forst-working-dir") && !strings.Contains(out, "ForSt working directory") || !strings.Contains(out, "chk-12") {
		t.Errorf("why %s (exit %d) does not name the ForSt working directory and the checkpoint that keeps it:\n%s", trees[0].Working[0], code, out)
	}

	// The jobs stop: the store's signals age past --active-window.
	if err := filepath.Walk(store, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(path, old, old)
	}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		gone := true
		for _, ft := range trees {
			mntRun(t, "", "rm", "-rf", p.m(ft.Attempts[0]))
			gone = gone && !present(ft.Attempts[0])
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("older attempt folders of inactive jobs still refused after 30s:\n%s", p.logText())
		}
		time.Sleep(500 * time.Millisecond)
	}
	mntRun(t, "", "find", p.mnt, "-mtime", "+7", "-delete")
	for _, ft := range trees {
		for _, k := range ft.Working {
			if present(k) {
				t.Errorf("%s of an inactive job survived find -mtime +7 -delete", k)
			}
		}
	}
}
