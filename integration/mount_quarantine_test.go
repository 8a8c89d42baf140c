package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// qFile is what a test compares of a store file: content and mtime.
type qFile struct {
	data  string
	mtime time.Time
}

// qSnapshot reads every file of the store outside the quarantine folder.
func qSnapshot(t *testing.T, root string) map[string]qFile {
	t.Helper()
	out := map[string]qFile{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && rel == store.QuarantineDir {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = qFile{string(b), fi.ModTime()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// qcli runs `ckguard quarantine SUB` with the mount's --store and --index.
func qcli(p *mntProc, sub string, args ...string) (string, int) {
	p.t.Helper()
	full := append([]string{"quarantine", sub, "--store", p.store, "--index", p.index}, args...)
	return mntRun(p.t, "", mntBinary(p.t), full...)
}

func qList(t *testing.T, p *mntProc) []quarantine.Entry {
	t.Helper()
	out, code := qcli(p, "list", "--json")
	if code != 0 {
		t.Fatalf("quarantine list: exit %d\n%s", code, out)
	}
	var r quarantine.ListResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("quarantine list --json: %v\n%s", err, out)
	}
	return r.Entries
}

// TestMountQuarantineRestoreAfterWrongPolicy: with a wrong policy (no grace, no active window) rm -rf
// through the mount takes every job, checkpoints and all. With the default quarantine nothing is lost:
// a purge is refused (too young); restoring one checkpoint brings back its _metadata and the files it
// references from wherever they were, except one whose path is occupied meanwhile (never overwritten:
// verify is red naming the checkpoint until that file is restored, then green); restoring the rest gives
// back the store byte for byte, mtimes included. (verify --deep is red while the occupant is there.)
func TestMountQuarantineRestoreAfterWrongPolicy(t *testing.T) {
	mntRequire(t)
	dir := t.TempDir()
	tr, err := treegen.IncidentOne(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	before := qSnapshot(t, tr.Root)
	p := mntStart(t, tr.Root, "", "--grace", "0s", "--active-window", "0s", "--savepoint-keep-newest=false")
	if out, code := p.cli("verify"); code != 0 {
		t.Fatalf("verify before the cleanup: exit %d\n%s", code, out)
	}
	// The live job first (its checkpoints retire, so nothing protects the old job's SSTs any more),
	// then everything.
	for _, d := range []string{"flink-checkpoints/" + treegen.IncidentOneNewJob, "flink-checkpoints"} {
		if out, code := mntRun(t, "", "rm", "-rf", p.m(d)); code != 0 {
			t.Fatalf("rm -rf %s through the mount: exit %d\n%s", d, code, out)
		}
	}
	if left := qSnapshot(t, tr.Root); len(left) != 0 {
		t.Fatalf("the wrong policy should have let rm take everything; left: %v", left)
	}
	es := qList(t, p)
	if len(es) != len(before) {
		t.Fatalf("%d entries in quarantine for %d files deleted", len(es), len(before))
	}
	out, code := qcli(p, "purge")
	if code != 1 || !strings.Contains(out, "younger than the TTL") || !strings.Contains(out, "purged 0 entries") {
		t.Fatalf("purge before the TTL: exit %d, want 1 and every entry refused\n%s", code, out)
	}

	job := "flink-checkpoints/" + treegen.IncidentOneNewJob
	meta := job + "/chk-100274/_metadata"
	// Something at the path of one of chk-100274's files now: that entry stays staged, the occupant
	// untouched, and the restored checkpoint is live without it: verify red, naming it.
	var occupied string
	for _, e := range es {
		if strings.HasPrefix(e.Path, job+"/chk-100274/") && e.Path != meta {
			occupied = e.Path
			break
		}
	}
	if err := os.MkdirAll(filepath.Dir(p.m(occupied)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.m(occupied), []byte("occupant"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The checkpoint by its _metadata: the _metadata and every staged file it references, its job's
	// shared/ folder and the old job's SSTs included.
	out, code = qcli(p, "restore", meta)
	if code != 1 || !strings.Contains(out, "never replaces") || !strings.Contains(out, occupied) {
		t.Fatalf("restore onto an occupied path: exit %d, want 1 naming %s and saying it never replaces\n%s", code, occupied, out)
	}
	if b, _ := os.ReadFile(filepath.Join(tr.Root, occupied)); string(b) != "occupant" {
		t.Fatalf("the occupant of %s was replaced: %q", occupied, b)
	}
	// The occupant is shorter than the state handle says: the restorability drill names the checkpoint.
	if out, code := p.cli("verify", "--deep", "--index", t.TempDir(), "--no-sync=false"); code != 1 || !strings.Contains(out, occupied) {
		t.Fatalf("verify --deep with chk-100274 live again and one of its files occupied: exit %d, want 1 naming %s\n%s", code, occupied, out)
	}
	// Referenced now, so the mount refuses to remove the occupant; the operator moves it away on the store.
	if err := os.Remove(p.m(occupied)); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("removing the occupant of a referenced path through the mount: %v, want EPERM", err)
	}
	if err := os.Remove(filepath.Join(tr.Root, occupied)); err != nil {
		t.Fatal(err)
	}
	if out, code := qcli(p, "restore", occupied); code != 0 {
		t.Fatalf("restore %s: exit %d\n%s", occupied, code, out)
	}
	if out, code := p.cli("verify"); code != 0 || !strings.Contains(out, "1 checkpoint checked") {
		t.Fatalf("verify after restoring the checkpoint: exit %d, want 0 with it checked\n%s", code, out)
	}
	if out, code := qcli(p, "restore", "--since", "1h"); code != 0 {
		t.Fatalf("restore --since 1h: exit %d\n%s", code, out)
	}
	after := qSnapshot(t, tr.Root)
	for k, f := range before {
		g, ok := after[k]
		switch {
		case !ok:
			t.Errorf("%s not restored", k)
		case g.data != f.data:
			t.Errorf("%s restored with other content", k)
		case !g.mtime.Equal(f.mtime):
			t.Errorf("%s restored with mtime %v, was %v", k, g.mtime, f.mtime)
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d files after the restore, %d before", len(after), len(before))
	}
	if es := qList(t, p); len(es) != 0 {
		t.Errorf("%d entries left in quarantine", len(es))
	}
	if out, code := p.cli("verify"); code != 0 {
		t.Fatalf("verify after restoring everything: exit %d\n%s", code, out)
	}
}

// TestMountQuarantineHiddenFromUsers: on an --allow-other mount, an unprivileged user can neither see
// nor reach nor make the quarantine folder, even where the store root is writable by everyone.
func TestMountQuarantineHiddenFromUsers(t *testing.T) {
	mntRequire(t)
	base, err := os.MkdirTemp("", "ckguard-quarantine-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	tr, err := treegen.IncidentOne(filepath.Join(base, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tr.Root, 0o777); err != nil {
		t.Fatal(err)
	}
	p := sharedMount(t, base, tr.Root)
	// Something staged, so there is something to find.
	garbage := "flink-checkpoints/" + treegen.IncidentOneOldJob + "/chk-100270"
	if out, code := mntRun(t, "", "rm", "-rf", p.m(garbage)); code != 0 {
		t.Fatalf("rm -rf %s: exit %d\n%s", garbage, code, out)
	}
	es := qList(t, p)
	if len(es) == 0 {
		t.Fatal("nothing staged")
	}
	area := p.m(store.QuarantineDir)
	py := `import os, sys
area, entry = sys.argv[1], sys.argv[2]
def attempt(name, f):
    try:
        f()
        print(name, "OK")
    except OSError as e:
        print(name, e.errno)
attempt("stat", lambda: os.lstat(area))
attempt("stat-entry", lambda: os.lstat(os.path.join(area, entry)))
attempt("open-entry", lambda: open(os.path.join(area, entry)).read())
attempt("mkdir", lambda: os.mkdir(area))
attempt("create", lambda: open(area, "x").close())
attempt("symlink", lambda: os.symlink("/", area))
attempt("rename", lambda: os.rename(os.path.join(os.path.dirname(area), "flink-checkpoints"), area))
print("names", ",".join(sorted(os.listdir(os.path.dirname(area)))))
`
	out, code := asNobody(t, "/usr/bin/python3", "-c", py, area, es[0].ID)
	if code != 0 {
		t.Fatalf("python as uid %s: exit %d\n%s", nobodyUID, code, out)
	}
	want := map[string]string{
		"stat": fmt.Sprint(int(syscall.ENOENT)), "stat-entry": fmt.Sprint(int(syscall.ENOENT)), "open-entry": fmt.Sprint(int(syscall.ENOENT)),
		"mkdir": fmt.Sprint(int(syscall.EPERM)), "create": fmt.Sprint(int(syscall.EPERM)), "symlink": fmt.Sprint(int(syscall.EPERM)),
		"rename": fmt.Sprint(int(syscall.EPERM)),
	}
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 {
			got[f[0]] = f[1]
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s of %s as uid %s: %q, want errno %s", k, store.QuarantineDir, nobodyUID, got[k], v)
		}
	}
	if strings.Contains(got["names"], store.QuarantineDir) {
		t.Errorf("the store root lists %s to uid %s: %s", store.QuarantineDir, nobodyUID, got["names"])
	}
	if n := len(qList(t, p)); n != len(es) {
		t.Errorf("%d entries after the attempts, %d before", n, len(es))
	}
}

// TestMountQuarantineKill9DuringRm kills the daemon with SIGKILL while rm -rf runs through a mount with
// the quarantine on, then mounts again: every file is at its path or staged, never lost and never both,
// no object in the folder lacks its record, and rm -rf after the remount stages the rest.
func TestMountQuarantineKill9DuringRm(t *testing.T) {
	mntRequire(t)
	dir := t.TempDir()
	tr, err := treegen.IncidentOne(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-40 * 24 * time.Hour)
	for i := range 6000 {
		if err := tr.Write(fmt.Sprintf("%s/chk-100270/leftover-%05d", tr.Purge, i), 16, old); err != nil {
			t.Fatal(err)
		}
	}
	before := qSnapshot(t, tr.Root)
	p := mntStart(t, tr.Root, filepath.Join(dir, "index"))
	rm := exec.Command("rm", "-rf", p.m(tr.Purge))
	var rmOut bytes.Buffer
	rm.Stdout, rm.Stderr = &rmOut, &rmOut
	if err := rm.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs, _ := os.ReadFile(p.audit)
		if strings.Count(string(recs), `"decision":"allow"`) > 1500 || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	p.kill9()
	_ = rm.Wait()

	check := func(when string) {
		t.Helper()
		now := qSnapshot(t, tr.Root)
		out, code := qcli(p, "list", "--json")
		if code != 0 {
			t.Fatalf("%s: quarantine list: exit %d (an object without its record?)\n%s", when, code, out)
		}
		var r quarantine.ListResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		staged := map[string]int{}
		for _, e := range r.Entries {
			staged[e.Path]++
		}
		lost, both, dup := 0, 0, 0
		for k := range before {
			_, there := now[k]
			switch {
			case there && staged[k] > 0:
				both++
			case !there && staged[k] == 0:
				lost++
			case staged[k] > 1:
				dup++
			}
		}
		if lost+both+dup != 0 || len(r.Problems) != 0 {
			t.Fatalf("%s: %d files lost, %d both at their path and staged, %d staged twice, %d problems", when, lost, both, dup, len(r.Problems))
		}
		t.Logf("%s: %d files at their path, %d staged", when, len(now), len(r.Entries))
	}
	check("after kill -9")
	p.start()
	check("after the remount")
	if out, code := mntRun(t, "", "rm", "-rf", p.m(tr.Purge)); code != 1 || !strings.Contains(out, "Operation not permitted") {
		t.Fatalf("rm -rf after the remount: exit %d (the referenced SSTs are refused)\n%s", code, out)
	}
	check("after rm -rf again")
}
