package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// qWrite writes content at key in the store with an mtime well in the past.
func qWrite(t *testing.T, root, key, content string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-40 * 24 * time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
}

// qObject reads an entry's staged object straight from the store's quarantine folder.
func qObject(t *testing.T, root string, e quarantine.Entry) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, store.QuarantineDir, e.ID))
	if err != nil {
		t.Fatalf("staged object of %s (%s): %v", e.Path, e.ID, err)
	}
	return string(b)
}

func qRead(t *testing.T, root, key string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(key)))
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

// mntRunAll runs each command as root and fails the test on the first that exits non-zero; where names
// the mount for the message.
func mntRunAll(t *testing.T, where string, cmds ...[]string) {
	t.Helper()
	for _, c := range cmds {
		if out, code := mntRun(t, "", c[0], c[1:]...); code != 0 {
			t.Fatalf("%v through %s: exit %d\n%s", c, where, code, out)
		}
	}
}

// qRestoreMovedAway moves each of keys (all staged) away through p's mount, so that no restore would
// replace anything, restores the folder dir, and checks that every key holds its old content files[key]
// again (read reads the store; ok false when absent) and that the quarantine is empty.
func qRestoreMovedAway(t *testing.T, p *mntProc, read func(key string) (string, bool), dir string, keys []string, files map[string]string) {
	t.Helper()
	for _, k := range keys {
		if out, code := mntRun(t, "", "mv", p.m(k), p.m(k+".new")); code != 0 {
			t.Fatalf("mv %s away: exit %d\n%s", k, code, out)
		}
	}
	if out, code := qcli(p, "restore", dir); code != 0 {
		t.Fatalf("restore %s: exit %d\n%s", dir, code, out)
	}
	for _, k := range keys {
		if got, _ := read(k); got != files[k] {
			t.Errorf("%s restored: %d bytes, not the old content byte for byte (%d bytes)", k, len(got), len(files[k]))
		}
	}
	if es := qList(t, p); len(es) != 0 {
		t.Fatalf("entries left after the restore: %+v", es)
	}
}

// qKillDuring runs the Python program py (arguments: the mountpoint and n) against p's mount and kills
// the daemon with SIGKILL once more than n/2 allowed changes are in its audit log (or after wait), then
// reaps the program, which fails on the dead mount.
func qKillDuring(t *testing.T, p *mntProc, py string, n int, wait time.Duration) {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", py, p.mnt, fmt.Sprint(n))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for {
		recs, _ := os.ReadFile(p.audit)
		if strings.Count(string(recs), `"decision":"allow"`) > n/2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	p.kill9()
	_ = cmd.Wait()
}

// qWant is a content that must be exactly once at one of the keys at or among their staged objects:
// after a crash, a change in place neither loses the old content nor keeps it twice.
type qWant struct {
	s  string
	at []string
}

// qNotOnce counts the wants that are not exactly once at their keys (read reads the store; ok false
// when absent) or among the keys' staged objects (staged: by path), reporting the first few.
func qNotOnce(t *testing.T, when string, read func(key string) (string, bool), staged map[string][]string, wants []qWant) int {
	t.Helper()
	bad := 0
	for _, w := range wants {
		got := 0
		for _, k := range w.at {
			if v, ok := read(k); ok && v == w.s {
				got++
			}
			for _, o := range staged[k] {
				if o == w.s {
					got++
				}
			}
		}
		if got != 1 {
			bad++
			if bad < 5 {
				t.Errorf("%s: %.8s found %d times at %v and in quarantine, want once", when, w.s, got, w.at)
			}
		}
	}
	return bad
}

// TestMountQuarantineReplaceAndTruncate: with the quarantine on (the local default), `mv new old` over an
// unreferenced file, `: > file`, `truncate -s 0` and `truncate -s N` through the mount stage the old
// content like an unlink: each shows in `quarantine list` as the kind of change that staged it, with its
// size and decision; a restore onto the path (which now holds the new content) is refused, never
// overwriting; once the new file is moved away the restore brings back the old content byte for byte,
// mtime included. A rename onto a free name and a truncation that cuts nothing stage nothing.
func TestMountQuarantineReplaceAndTruncate(t *testing.T) {
	mntRequire(t)
	root := filepath.Join(t.TempDir(), "store")
	oldA := strings.Repeat("A", 70000) + "end of the replaced file"
	files := map[string]string{
		"scratch/old": oldA, "scratch/new": "the replacement",
		"scratch/colon": "cut by an O_TRUNC open " + strings.Repeat("c", 5000),
		"scratch/zero":  "cut by truncate -s 0 " + strings.Repeat("z", 3000),
		"scratch/part":  "kept|cut by truncate -s 4",
		"scratch/grow":  "extended, nothing cut",
		"scratch/free":  "renamed onto a free name",
	}
	for k, v := range files {
		qWrite(t, root, k, v)
	}
	mtimeA := func() time.Time {
		fi, err := os.Stat(filepath.Join(root, "scratch/old"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.ModTime()
	}()
	p := mntStart(t, root, "", "--grace", "0s", "--active-window", "0s")
	mntRunAll(t, "the mount",
		[]string{"mv", p.m("scratch/new"), p.m("scratch/old")},
		[]string{"sh", "-c", ": > " + p.m("scratch/colon")},
		[]string{"truncate", "-s", "0", p.m("scratch/zero")},
		[]string{"truncate", "-s", "4", p.m("scratch/part")},
		[]string{"truncate", "-s", "100", p.m("scratch/grow")},
		[]string{"mv", p.m("scratch/free"), p.m("scratch/freed")})
	for k, want := range map[string]string{"scratch/old": "the replacement", "scratch/colon": "", "scratch/zero": "", "scratch/part": "kept"} {
		if got, _ := qRead(t, root, k); got != want {
			t.Fatalf("%s in the store: %q, want %q", k, got, want)
		}
	}
	es := qList(t, p)
	byPath := map[string]quarantine.Entry{}
	for _, e := range es {
		byPath[e.Path] = e
	}
	want := map[string]string{"scratch/old": quarantine.OpReplace, "scratch/colon": quarantine.OpTruncate,
		"scratch/zero": quarantine.OpTruncate, "scratch/part": quarantine.OpTruncate}
	if len(es) != len(want) {
		t.Fatalf("%d entries, want %d (one per destroyed content): %+v", len(es), len(want), es)
	}
	for k, op := range want {
		e, ok := byPath[k]
		if !ok {
			t.Fatalf("%s not staged: %+v", k, es)
		}
		if e.Change() != op || e.Size != int64(len(files[k])) || e.Decision.Reason == "" || e.Decision.UID != 0 {
			t.Errorf("%s: change %q size %d decision %+v, want %q, %d bytes and the allowing decision", k, e.Change(), e.Size, e.Decision, op, len(files[k]))
		}
		if got := qObject(t, root, e); got != files[k] {
			t.Errorf("%s: staged content differs from the old content (%d bytes, want %d)", k, len(got), len(files[k]))
		}
	}
	out, code := qcli(p, "list")
	if code != 0 || !strings.Contains(out, "CHANGE") || !strings.Contains(out, "replace") || !strings.Contains(out, "truncate") {
		t.Fatalf("quarantine list does not show the kind of change: exit %d\n%s", code, out)
	}
	// The path holds the new content: a restore never overwrites it.
	out, code = qcli(p, "restore", "scratch/old")
	if code != 1 || !strings.Contains(out, "never replaces") {
		t.Fatalf("restore onto the replacement: exit %d, want 1 and a refusal\n%s", code, out)
	}
	if got, _ := qRead(t, root, "scratch/old"); got != "the replacement" {
		t.Fatalf("the refused restore changed the replacement: %q", got)
	}
	qRestoreMovedAway(t, p, func(k string) (string, bool) { return qRead(t, root, k) }, "scratch",
		[]string{"scratch/old", "scratch/colon", "scratch/zero", "scratch/part"}, files)
	if fi, err := os.Stat(filepath.Join(root, "scratch/old")); err != nil || !fi.ModTime().Equal(mtimeA) {
		t.Errorf("restored scratch/old: mtime %v (%v), want %v", fi.ModTime(), err, mtimeA)
	}
}

// TestMountQuarantineKill9DuringReplaceAndTruncate kills the daemon with SIGKILL while a program renames
// files over others, truncates files (O_TRUNC opens and truncate(2) alternately) and punches holes
// over whole files (fallocate(2) PUNCH_HOLE|KEEP_SIZE: the size stays) through a mount with the
// quarantine on, then mounts again: every old content is exactly once at its path or in quarantine
// (never lost, never both), every replacement exactly once at its old or its new name, and no object in
// the folder lacks its record.
func TestMountQuarantineKill9DuringReplaceAndTruncate(t *testing.T) {
	mntRequire(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "store")
	const n = 1500
	content := func(kind string, i int) string { return fmt.Sprintf("%s-%05d-%s", kind, i, strings.Repeat(kind, 200)) }
	for i := range n {
		qWrite(t, root, fmt.Sprintf("r/old-%05d", i), content("A", i))
		qWrite(t, root, fmt.Sprintf("r/new-%05d", i), content("B", i))
		qWrite(t, root, fmt.Sprintf("t/f-%05d", i), content("C", i))
		qWrite(t, root, fmt.Sprintf("h/f-%05d", i), content("D", i))
	}
	p := mntStart(t, root, filepath.Join(dir, "index"), "--grace", "0s", "--active-window", "0s")
	py := `import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
m, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    os.rename(f"{m}/r/new-{i:05d}", f"{m}/r/old-{i:05d}")
    if i % 2:
        open(f"{m}/t/f-{i:05d}", "w").close()
    else:
        os.truncate(f"{m}/t/f-{i:05d}", 0)
    fd = os.open(f"{m}/h/f-{i:05d}", os.O_WRONLY)
    if libc.fallocate(fd, 3, ctypes.c_longlong(0), ctypes.c_longlong(4096)) != 0:  # PUNCH_HOLE|KEEP_SIZE
        raise OSError(ctypes.get_errno(), "fallocate")
    os.close(fd)
`
	qKillDuring(t, p, py, n, 60*time.Second)

	check := func(when string) {
		t.Helper()
		lr := qListAll(t, p)
		staged := map[string][]string{}
		for _, e := range lr.Entries {
			staged[e.Path] = append(staged[e.Path], qObject(t, root, e))
		}
		var wants []qWant
		done, punched := 0, 0
		for i := range n {
			oldK, newK, tK, hK := fmt.Sprintf("r/old-%05d", i), fmt.Sprintf("r/new-%05d", i), fmt.Sprintf("t/f-%05d", i), fmt.Sprintf("h/f-%05d", i)
			wants = append(wants, qWant{content("A", i), []string{oldK}}, qWant{content("B", i), []string{oldK, newK}}, qWant{content("C", i), []string{tK}}, qWant{content("D", i), []string{hK}})
			if got, _ := qRead(t, root, tK); got == "" {
				done++
			}
			if got, _ := qRead(t, root, hK); got == strings.Repeat("\x00", len(content("D", i))) {
				punched++
			}
		}
		bad := qNotOnce(t, when, func(k string) (string, bool) { return qRead(t, root, k) }, staged, wants)
		if bad != 0 || len(lr.Problems) != 0 {
			t.Fatalf("%s: %d contents lost or duplicated, %d problems %+v", when, bad, len(lr.Problems), lr.Problems)
		}
		t.Logf("%s: %d truncations and %d hole punches done, %d entries", when, done, punched, len(lr.Entries))
	}
	check("after kill -9")
	waitStale(t, p)
	p.start()
	check("after the remount")
}

// waitStale waits (bounded) until the killed daemon's mount answers with an error: a stat of the
// mountpoint within the attribute timeout (1 s) is served from the kernel's cache, and the next mount
// would take the dead mount for a live one. Listing it reaches the (dead) connection.
func waitStale(t *testing.T, p *mntProc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		_, serr := os.Stat(p.mnt)
		_, lerr := os.ReadDir(p.mnt)
		if serr != nil && lerr != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the killed daemon's mount %s still answers after 30 s", p.mnt)
}

// qListAll is `quarantine list --json`, problems included.
func qListAll(t *testing.T, p *mntProc) quarantine.ListResult {
	t.Helper()
	out, code := qcli(p, "list", "--json")
	var r quarantine.ListResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || (code != 0 && len(r.Problems) == 0) {
		t.Fatalf("quarantine list --json: exit %d (%v)\n%s", code, err, out)
	}
	return r
}

// qBlock is n bytes of a pattern that differs from block to block (a hole punched in it shows).
func qBlock(tag string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s-%06d|", tag, i)
	}
	return b.String()[:n]
}

// TestMountQuarantineFallocate: with the quarantine on, `fallocate -p` (a hole punched) and `fallocate
// -z` (a range zeroed) through the mount on unreferenced files stage the old content like a truncation:
// `quarantine list` shows each as a "fallocate" entry with the old size, the staged object is the old
// content, a restore onto the changed file is refused (never overwriting), and after moving it away the
// restore is byte-identical. `fallocate -c` (collapse) is refused by the kernel's FUSE client itself and
// changes nothing; a range past the end destroys nothing and stages nothing; a referenced file is still
// refused and untouched. With --quarantine 0s the same punch happens and nothing is staged.
func TestMountQuarantineFallocate(t *testing.T) {
	mntRequire(t)
	base := t.TempDir()
	root := filepath.Join(base, "store")
	tr, err := treegen.YoungOrphan(root, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var ref string
	for _, c := range tr.Live {
		ref = c.Refs[0]
	}
	files := map[string]string{
		"scratch/punch":    qBlock("punch", 3*4096),
		"scratch/zero":     qBlock("zero", 3*4096+100),
		"scratch/collapse": qBlock("collapse", 4*4096),
		"scratch/tail":     qBlock("tail", 5000),
	}
	for k, v := range files {
		qWrite(t, root, k, v)
	}
	refBefore, _ := qRead(t, root, ref)
	p := mntStart(t, root, "", "--grace", "0s", "--active-window", "0s")
	mntRunAll(t, "the mount",
		[]string{"fallocate", "-p", "-o", "0", "-l", "4096", p.m("scratch/punch")},
		[]string{"fallocate", "-z", "-o", "4096", "-l", "4096", p.m("scratch/zero")},
		[]string{"fallocate", "-p", "-o", "1048576", "-l", "4096", p.m("scratch/tail")})
	if out, code := mntRun(t, "", "fallocate", "-c", "-o", "0", "-l", "4096", p.m("scratch/collapse")); code == 0 {
		t.Fatalf("fallocate -c through the mount succeeded (the kernel's FUSE client passes no collapse)\n%s", out)
	}
	if out, code := mntRun(t, "", "fallocate", "-p", "-o", "0", "-l", "4096", p.m(ref)); code == 0 || !strings.Contains(out, "not permitted") {
		t.Fatalf("fallocate -p of referenced %s: exit %d, want EPERM\n%s", ref, code, out)
	}
	if got, _ := qRead(t, root, ref); got != refBefore {
		t.Fatalf("referenced %s changed by a refused fallocate", ref)
	}
	zeros := strings.Repeat("\x00", 4096)
	wantNow := map[string]string{
		"scratch/punch":    zeros + files["scratch/punch"][4096:],
		"scratch/zero":     files["scratch/zero"][:4096] + zeros + files["scratch/zero"][8192:],
		"scratch/collapse": files["scratch/collapse"],
		"scratch/tail":     files["scratch/tail"],
	}
	for k, want := range wantNow {
		if got, _ := qRead(t, root, k); got != want {
			t.Fatalf("%s in the store after the fallocate: not the expected content (%d bytes)", k, len(got))
		}
	}
	staged := []string{"scratch/punch", "scratch/zero"}
	es := qList(t, p)
	if len(es) != len(staged) {
		t.Fatalf("%d entries, want %d (one per destroyed range): %+v", len(es), len(staged), es)
	}
	byPath := map[string]quarantine.Entry{}
	for _, e := range es {
		byPath[e.Path] = e
	}
	for _, k := range staged {
		e, ok := byPath[k]
		if !ok {
			t.Fatalf("%s not staged: %+v", k, es)
		}
		if e.Change() != quarantine.OpAllocate || e.Size != int64(len(files[k])) || e.Decision.Reason == "" {
			t.Errorf("%s: change %q size %d decision %+v, want %q, %d bytes and the allowing decision", k, e.Change(), e.Size, e.Decision, quarantine.OpAllocate, len(files[k]))
		}
		if got := qObject(t, root, e); got != files[k] {
			t.Errorf("%s: staged content differs from the old content", k)
		}
	}
	if out, code := qcli(p, "list"); code != 0 || !strings.Contains(out, quarantine.OpAllocate) {
		t.Fatalf("quarantine list does not show the fallocate entries: exit %d\n%s", code, out)
	}
	out, code := qcli(p, "restore", "scratch/punch")
	if code != 1 || !strings.Contains(out, "never replaces") {
		t.Fatalf("restore onto the punched file: exit %d, want 1 and a refusal\n%s", code, out)
	}
	if got, _ := qRead(t, root, "scratch/punch"); got != wantNow["scratch/punch"] {
		t.Fatal("the refused restore changed the punched file")
	}
	qRestoreMovedAway(t, p, func(k string) (string, bool) { return qRead(t, root, k) }, "scratch", staged, files)

	// Quarantine off: the punch happens, nothing is staged.
	root2 := filepath.Join(base, "store2")
	qWrite(t, root2, "scratch/punch", files["scratch/punch"])
	p2 := mntStart(t, root2, "", "--grace", "0s", "--active-window", "0s", "--quarantine", "0s")
	if out, code := mntRun(t, "", "fallocate", "-p", "-o", "0", "-l", "4096", p2.m("scratch/punch")); code != 0 {
		t.Fatalf("fallocate -p with the quarantine off: exit %d\n%s", code, out)
	}
	if got, _ := qRead(t, root2, "scratch/punch"); got != wantNow["scratch/punch"] {
		t.Fatal("fallocate -p with the quarantine off: the hole is not there")
	}
	if names, _ := filepath.Glob(filepath.Join(root2, store.QuarantineDir, "*")); len(names) > 1 {
		t.Fatalf("the quarantine folder holds %v with the quarantine off", names)
	}
}
