package integration

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestMountQuarantineRestoreNeverReplaces: after a wrong policy let rm -rf take everything (see
// TestQuarantineRestoreAfterWrongPolicy), restoring one checkpoint brings back its _metadata and the
// files it references from wherever they were, except one whose path is occupied meanwhile (never
// overwritten: verify is red naming the checkpoint until that file is restored, then green; verify
// --deep is red while the occupant is there); restoring the rest gives back the store byte for byte,
// mtimes included.
func TestMountQuarantineRestoreNeverReplaces(t *testing.T) {
	s := qLocal.setup(t)
	tr := s.tr
	p, before, es := wipeWithWrongPolicy(t, s, func(p *mntProc) {
		if out, code := p.cli("verify"); code != 0 {
			t.Fatalf("verify before the cleanup: exit %d\n%s", code, out)
		}
	})

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
	out, code := qcli(p, "restore", meta)
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
	qCompare(t, s, before, qSnapshot(t, tr.Root))
	if es := qList(t, p); len(es) != 0 {
		t.Errorf("%d entries left in quarantine", len(es))
	}
	s.verify(t, p)
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
