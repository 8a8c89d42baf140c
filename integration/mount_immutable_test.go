package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/hold"
	"github.com/ckguard/ckguard/internal/loopfs"
	"github.com/ckguard/ckguard/localbackend/localhold"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// immutableStore generates IncidentOne on a loop-mounted ext4 (the index and logs in a temp folder
// off it). Returns base (for sharedMount) and the tree.
func immutableStore(t *testing.T) (string, *treegen.Tree) {
	t.Helper()
	fsRoot := loopfs.Ext4(t, loopfs.Options{Prefix: "ckguard-ext4-immutable-"})
	base, err := os.MkdirTemp("", "ckguard-ext4-immutable-base-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	tr, err := treegen.IncidentOne(filepath.Join(fsRoot, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Whatever a failed test leaves flagged must not keep the image from being removed.
	t.Cleanup(func() { _, _ = mntRun(t, "", "chattr", "-R", "-f", "-i", tr.Root) })
	return base, tr
}

// immutable reports whether the store file k carries FS_IMMUTABLE_FL.
func immutable(t *testing.T, tr *treegen.Tree, k string) bool {
	t.Helper()
	f, err := os.Open(filepath.Join(tr.Root, filepath.FromSlash(k)))
	if err != nil {
		t.Fatalf("open %s beside the mount: %v", k, err)
	}
	defer f.Close()
	on, err := localhold.Immutable(f)
	if err != nil {
		t.Fatalf("flags of %s: %v", k, err)
	}
	return on
}

// protectedSet is every existing file a live checkpoint references, and every live _metadata.
func protectedSet(tr *treegen.Tree) []string {
	set := map[string]bool{}
	for _, k := range tr.Referenced() {
		set[k] = true
	}
	for k := range tr.Live {
		set[k] = true
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func holdStatus(t *testing.T, p *mntProc) hold.Status {
	t.Helper()
	out, code := mntRun(t, "", mntBinary(t), "hold", "status", "--store", p.store, "--index", p.index, "--json")
	var s hold.Status
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
		t.Fatalf("hold status --json: exit %d\n%s", code, out)
	}
	return s
}

// waitFlags waits (bounded) until exactly the files in want carry the flag among those in all.
func waitFlags(t *testing.T, p *mntProc, tr *treegen.Tree, all, want []string, what string) {
	t.Helper()
	wantSet := map[string]bool{}
	for _, k := range want {
		wantSet[k] = true
	}
	var wrong []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		wrong = wrong[:0]
		for _, k := range all {
			if _, err := os.Lstat(filepath.Join(tr.Root, filepath.FromSlash(k))); err != nil {
				continue
			}
			if immutable(t, tr, k) != wantSet[k] {
				wrong = append(wrong, k)
			}
		}
		if len(wrong) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after 30 s these files' immutable flag is not what the references say (want set: %v):\n%s\n%s", what, len(want),
				strings.Join(wrong, "\n"), p.logText())
		}
	}
}

// TestMountHoldImmutable (issue 31, local): with --hold required on a local ext4 store, every file a
// live checkpoint references and every live _metadata gets FS_IMMUTABLE_FL after the first sync:
// `rm` and `mv` as root beside the mount fail (EPERM), garbage beside is removable; the guard's own
// staging of an allowed deletion through the mount (a retired checkpoint's _metadata, flagged) works;
// once a checkpoint is retired, the files only it referenced lose the flag within a sync and `rm`
// beside works. After kill -9 of the mount, a checkpoint retired beside it (an operator clearing the
// flag of its _metadata first) leaves its exclusive files flagged; restart and one sync clear them.
// hold status and the metrics show what is held.
func TestMountHoldImmutable(t *testing.T) {
	mntRequire(t)
	base, tr := immutableStore(t)
	addr := freePort(t)
	p := sharedMount(t, base, tr.Root, "--hold", "required", "--quarantine", "24h", "--metrics-addr", addr)
	all := tr.AllFiles()
	prot := protectedSet(tr)
	waitFlags(t, p, tr, all, prot, "after the first sync")
	if s := holdStatus(t, p); !s.Active || s.Mode != "required" || s.Held != len(prot) || s.Failed != 0 {
		t.Errorf("hold status: %+v, want active, required, %d held, none failed", s, len(prot))
	}
	text := mntHTTPGet(t, "http://"+addr+"/metrics")
	if v, ok := metricValue(text, "ckguard_hold_active"); !ok || v != 1 {
		t.Errorf("ckguard_hold_active = %v (%v), want 1", v, ok)
	}
	if v, ok := metricValue(text, "ckguard_held_objects"); !ok || v != float64(len(prot)) {
		t.Errorf("ckguard_held_objects = %v (%v), want %d", v, ok, len(prot))
	}

	// Beside the mount, as root: referenced files and a live _metadata cannot be removed or moved.
	protSet := map[string]bool{}
	for _, k := range prot {
		protSet[k] = true
	}
	var ref, meta, garbage string
	for _, k := range prot {
		if strings.HasSuffix(k, "/_metadata") && meta == "" {
			meta = k
		} else if ref == "" && !strings.HasSuffix(k, "/_metadata") {
			ref = k
		}
	}
	for _, k := range all {
		if !protSet[k] {
			garbage = k
			break
		}
	}
	for _, k := range []string{ref, meta} {
		real := filepath.Join(tr.Root, filepath.FromSlash(k))
		if out, code := mntRun(t, "", "rm", "-f", real); code == 0 || !strings.Contains(out, "Operation not permitted") {
			t.Errorf("rm -f %s as root beside the mount: exit %d, want EPERM\n%s", k, code, out)
		}
		if out, code := mntRun(t, "", "mv", real, real+".moved"); code == 0 {
			t.Errorf("mv %s as root beside the mount: exit 0, want EPERM\n%s", k, out)
		}
		if _, err := os.Stat(real); err != nil {
			t.Errorf("%s is gone: %v", k, err)
		}
	}
	if out, code := mntRun(t, "", "rm", filepath.Join(tr.Root, filepath.FromSlash(garbage))); code != 0 {
		t.Errorf("rm %s (garbage) beside the mount: exit %d\n%s", garbage, code, out)
	}

	// Retire the current job's older checkpoint through the mount: its _metadata is flagged, the
	// guard allows the deletion and stages it (the flag cleared first).
	cur := "flink-checkpoints/" + treegen.IncidentOneNewJob
	var older string
	var olderID int64
	for k, c := range tr.Live {
		if c.Job == cur && (older == "" || c.ID < olderID) {
			older, olderID = k, c.ID
		}
	}
	if older == "" || !immutable(t, tr, older) {
		t.Fatalf("no flagged checkpoint of %s to retire (%q)", cur, older)
	}
	if out, code := mntRun(t, "", "rm", p.m(older)); code != 0 {
		t.Fatalf("rm %s through the mount (allowed: not the newest checkpoint): exit %d\n%s", older, code, out)
	}
	if es := qList(t, p); len(es) != 1 || es[0].Key() != older {
		t.Fatalf("quarantine after rm %s: %+v, want its staging", older, es)
	}
	if err := tr.Retire(older); err == nil || !os.IsNotExist(err) {
		// Retire removes the file itself; it is in quarantine already, so only the ground truth changes.
		t.Logf("retire %s in the ground truth: %v", older, err)
	}
	delete(tr.Live, older)
	prot2 := protectedSet(tr)
	freed := setMinus(prot, prot2, older)
	if len(freed) == 0 {
		t.Fatalf("retiring %s frees no file: the scenario no longer tests the release", older)
	}
	waitFlags(t, p, tr, all, prot2, "one sync after "+older+" was retired")
	real := filepath.Join(tr.Root, filepath.FromSlash(freed[0]))
	if out, code := mntRun(t, "", "rm", real); code != 0 {
		t.Errorf("rm %s beside the mount after its last checkpoint was retired: exit %d\n%s", freed[0], code, out)
	}

	// kill -9, then a checkpoint retired beside the mount while it is down.
	p.kill9()
	p.stop()
	var last string
	for k, c := range tr.Live {
		if c.Job != cur {
			last = k // the old job's retained checkpoint
		}
	}
	if last == "" {
		t.Fatal("no checkpoint of the old job")
	}
	prot3, stale := retireHeld(t, tr, last, prot2)
	if len(stale) == 0 {
		t.Fatalf("retiring %s frees no file", last)
	}
	for _, k := range stale {
		if !immutable(t, tr, k) {
			t.Fatalf("%s lost its flag while the mount was down", k)
		}
	}
	p.start("--allow-other", "--hold", "required", "--quarantine", "24h")
	waitFlags(t, p, tr, all, prot3, "restart after kill -9 and one sync")
	if s := holdStatus(t, p); s.Held != len(prot3) {
		t.Errorf("hold status after the restart: %d held, want %d", s.Held, len(prot3))
	}
	for _, k := range stale[:1] {
		if out, code := mntRun(t, "", "rm", filepath.Join(tr.Root, filepath.FromSlash(k))); code != 0 {
			t.Errorf("rm %s beside the mount after the restart: exit %d\n%s", k, code, out)
		}
	}
}

// setMinus is a minus b, without skip.
// retireHeld retires the checkpoint whose _metadata is metaKey beside the mount, as root does with a
// held one (chattr -i of the _metadata first: the flag is the hold), and returns the protected set
// after it and the files of the set before it that only that checkpoint protected.
func retireHeld(t *testing.T, tr *treegen.Tree, metaKey string, before []string) (after, freed []string) {
	t.Helper()
	if out, code := mntRun(t, "", "chattr", "-i", filepath.Join(tr.Root, filepath.FromSlash(metaKey))); code != 0 {
		t.Fatalf("chattr -i %s: exit %d\n%s", metaKey, code, out)
	}
	if err := tr.Retire(metaKey); err != nil {
		t.Fatal(err)
	}
	after = protectedSet(tr)
	return after, setMinus(before, after, metaKey)
}

func setMinus(a, b []string, skip string) []string {
	in := map[string]bool{}
	for _, k := range b {
		in[k] = true
	}
	var out []string
	for _, k := range a {
		if !in[k] && k != skip {
			out = append(out, k)
		}
	}
	return out
}

// TestMountHoldImmutableUnsupported: on a filesystem without the flag (ramfs), --hold required
// refuses to start, naming the reason and the alternatives; --hold best-effort runs, says so as an
// ERROR, and hold status and ckguard_hold_active show it off. On ext4 a daemon without
// CAP_LINUX_IMMUTABLE is refused, the capability named.
func TestMountHoldImmutableUnsupported(t *testing.T) {
	mntRequire(t)
	root := loopfs.Ramfs(t, "ckguard-ext4-ramfs-")
	tr, err := treegen.IncidentOne(filepath.Join(root, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "mnt"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, code := mntRun(t, "", "timeout", "60", mntBinary(t), "mount", "--store", tr.Root, "--index", filepath.Join(dir, "index"), "--foreground",
		"--hold", "required", filepath.Join(dir, "mnt"))
	if code == 0 || !strings.Contains(out, "--hold required") || !strings.Contains(out, "no immutable flag") || !strings.Contains(out, "best-effort") {
		t.Fatalf("mount --hold required on ramfs: exit %d, want a refusal naming the missing flag and --hold best-effort\n%s", code, out)
	}
	// On ext4, a daemon without CAP_LINUX_IMMUTABLE (dropped from its bounding set) is refused with the
	// capability named.
	ext, err := treegen.IncidentOne(filepath.Join(loopfs.Ext4(t, loopfs.Options{Size: 16 << 20, Prefix: "ckguard-ext4-nocap-"}), "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("setpriv"); err == nil {
		out, code = mntRun(t, "", "timeout", "60", "setpriv", "--bounding-set", "-linux_immutable", "--inh-caps", "-linux_immutable", "--",
			mntBinary(t), "mount", "--store", ext.Root, "--index", filepath.Join(dir, "index2"), "--foreground",
			"--hold", "required", filepath.Join(dir, "mnt"))
		if code == 0 || !strings.Contains(out, "CAP_LINUX_IMMUTABLE") {
			t.Errorf("mount --hold required without CAP_LINUX_IMMUTABLE: exit %d, want a refusal naming the capability\n%s", code, out)
		}
	}
	base, err := os.MkdirTemp("", "ckguard-ext4-ramfs-base-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	addr := freePort(t)
	p := sharedMount(t, base, tr.Root, "--hold", "best-effort", "--metrics-addr", addr)
	if !strings.Contains(p.logText(), "level=ERROR") || !strings.Contains(p.logText(), "immutable flag is NOT applied") {
		t.Errorf("--hold best-effort on ramfs: no ERROR line saying the flag is off:\n%s", p.logText())
	}
	if s := holdStatus(t, p); s.Active || !strings.Contains(s.Note, "no immutable flag") {
		t.Errorf("hold status: %+v, want inactive with the reason", s)
	}
	if v, ok := metricValue(mntHTTPGet(t, "http://"+addr+"/metrics"), "ckguard_hold_active"); !ok || v != 0 {
		t.Errorf("ckguard_hold_active = %v (%v), want 0", v, ok)
	}
}

// TestMountHoldImmutableFlinkThroughTheMount: what Flink does through the mount works with every
// referenced file flagged. With no sync after the first (1 h interval), a retired checkpoint's
// _metadata and then its exclusive files, all still flagged, are deleted through the mount (the mount
// clears each flag right before its own unlink), and a new checkpoint is written into folders full of
// flagged files.
func TestMountHoldImmutableFlinkThroughTheMount(t *testing.T) {
	mntRequire(t)
	base, tr := immutableStore(t)
	p := sharedMount(t, base, tr.Root, "--hold", "required", "--sync-interval", "1h", "--max-staleness", "3h")
	all := tr.AllFiles()
	prot := protectedSet(tr)
	waitFlags(t, p, tr, all, prot, "after the first sync")
	cur := "flink-checkpoints/" + treegen.IncidentOneNewJob
	var older, newer string
	var olderID int64
	for k, c := range tr.Live {
		if c.Job != cur {
			continue
		}
		if older == "" || c.ID < olderID {
			if older != "" {
				newer = older
			}
			older, olderID = k, c.ID
		} else {
			newer = k
		}
	}
	delete(tr.Live, older)
	freed := setMinus(prot, protectedSet(tr), older)
	if len(freed) == 0 {
		t.Fatalf("retiring %s frees no file", older)
	}
	for _, k := range append([]string{older}, freed...) {
		if !immutable(t, tr, k) {
			t.Fatalf("%s is not flagged before the mount deletes it: the test would not show the flag cleared", k)
		}
		if out, code := mntRun(t, "", "rm", p.m(k)); code != 0 {
			t.Fatalf("rm %s through the mount (allowed, flagged): exit %d\n%s", k, code, out)
		}
		if _, err := os.Lstat(filepath.Join(tr.Root, filepath.FromSlash(k))); !os.IsNotExist(err) {
			t.Fatalf("%s still in the store after rm through the mount: %v", k, err)
		}
	}
	// A new checkpoint beside flagged files: data files in shared/ and the checkpoint folder, its
	// _metadata (a copy of the newest).
	newDir := cur + "/chk-100275"
	if err := os.MkdirAll(p.m(newDir), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{cur + "/shared/new-sst", newDir + "/private"} {
		if err := os.WriteFile(p.m(k), []byte("new state"), 0o644); err != nil {
			t.Fatalf("write %s through the mount: %v", k, err)
		}
	}
	b, err := os.ReadFile(p.m(newer))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.m(newDir+"/_metadata"), b, 0o644); err != nil {
		t.Fatalf("write %s/_metadata through the mount: %v", newDir, err)
	}
	// A flagged file that is still referenced stays refused through the mount (the guard's refusal,
	// not the flag's).
	var ref string
	for _, k := range prot {
		if strings.Contains(k, "/shared/") && !strings.HasPrefix(k, older) {
			if _, err := os.Lstat(filepath.Join(tr.Root, filepath.FromSlash(k))); err == nil {
				ref = k
				break
			}
		}
	}
	if ref != "" {
		if out, code := mntRun(t, "", "rm", "-f", p.m(ref)); code == 0 {
			t.Errorf("rm %s (referenced) through the mount: exit 0\n%s", ref, out)
		}
		if !immutable(t, tr, ref) {
			t.Errorf("the refused rm of %s cleared its flag", ref)
		}
	}
	if strings.Contains(p.logText(), "could not clear the flag") {
		t.Errorf("a flag could not be cleared:\n%s", p.logText())
	}
}
