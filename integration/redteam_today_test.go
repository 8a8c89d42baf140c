package integration

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// Red team of the day's merges (issues 29, 30, --hold, --shared): each test states the attack, what a
// defended guard does, and asserts that. A test that fails shows a hole in today's code.

// TestRedteamNewerFormatNestedJobFolder: nobody, in the 1777 scratch folder, makes two folders of its
// own (scratch/x/job) and writes a newer-format `_metadata` at scratch/x/job/chk-3/_metadata. The
// "job folder owner" test of badmeta.go (the owner of the job folder and of the folder around it)
// passes, since nobody made both: the guard then trusts it as a Flink JobManager's and refuses every
// deletion in the store (scope "store"), an outage any user who may create a folder anywhere in the
// store causes with one 16-byte file. Defended: it refuses only its own folder (scope "folder"), as
// for scratch/job/chk-3/_metadata (TestUnprivUnjudgeableMetadataScope/newer-nobody).
func TestRedteamNewerFormatNestedJobFolder(t *testing.T) {
	mntRequire(t)
	newer := []byte("\x49\x60\x67\x2d\x00\x00\x00\x09\x00\x00\x00\x00\x00\x00\x00\x01")
	base, root, ref := matrixStore(t, "ckguard-redteam-nested-")
	p := sharedMount(t, base, root)
	bad := "scratch/x/job/chk-3/_metadata"
	if out, code := asNobody(t, "/usr/bin/python3", "-c", `
import os, sys
os.makedirs(os.path.dirname(sys.argv[2]))
with open(sys.argv[2], "wb") as dst:
    dst.write(bytes.fromhex(sys.argv[1]))
`, hex.EncodeToString(newer), p.m(bad)); code != 0 {
		t.Fatalf("writing %s as nobody: exit %d\n%s", bad, code, out)
	}
	waitSyncAfter(t, p, time.Now())
	waitSyncAfter(t, p, time.Now())
	s := p.stats()
	if len(s.BadMetadata) != 1 || s.BadMetadata[0].Metadata != bad {
		t.Fatalf("stats: bad %+v, want %s", s.BadMetadata, bad)
	}
	if s.BadMetadata[0].Scope != "folder" {
		t.Errorf("nobody's newer-format %s two folders deep in the 1777 scratch folder has scope %q, want \"folder\" (nobody is no job folder owner the store can trust)",
			bad, s.BadMetadata[0].Scope)
	}
	elsewhereDecided(t, p, ref, "nobody's newer-format _metadata in scratch/x/job")
}

// TestRedteamUnknownUnconfinedByForgedMetadata: confinement (unknown.go) trusts as "Flink" every owner
// of an indexed `_metadata` of the store. nobody writes one (a copy of a real Flink `_metadata`) into
// the 1777 scratch folder, and a folder of its own it makes unreadable to the guard (mode 700; the
// daemon as root without CAP_DAC_OVERRIDE, as under NFS root squash). The folder is then no longer
// confined: its scope takes every file whose last reference is retired after it went dark, anywhere in
// the store, for as long as nobody keeps it (and the tombstones are kept as long). The Flink user's
// cleanup of a dead job (rm -rf of its folder through the mount) then removes none of the files its
// checkpoints referenced. Defended: a folder of a user who owns no `_metadata` in a job folder they
// did not make themselves stays confined (or at least the cleanup removes the dead job's garbage).
func TestRedteamUnknownUnconfinedByForgedMetadata(t *testing.T) {
	mntRequire(t)
	real := realFlinkMetadata(t)
	base, tr := unprivStore(t, "ckguard-redteam-forged-")
	root := tr.Root
	if err := os.Mkdir(filepath.Join(root, "scratch"), 0o777); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chmod", "-R", "a+rwX", root).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v %s", err, out)
	}
	if err := os.Chmod(filepath.Join(root, "scratch"), 0o1777); err != nil {
		t.Fatal(err)
	}
	p := sharedProc(t, base, root)
	p.wrap = []string{"setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-dac_override,-dac_read_search", "--"}
	p.start("--allow-other")
	waitSyncAfter(t, p, time.Now())
	if out, code := asNobody(t, "/usr/bin/python3", "-c", `
import os, sys
os.umask(0)  # the daemon (no CAP_DAC_OVERRIDE) creates in nobody's folders only where they are 0777
m = sys.argv[2]
os.makedirs(os.path.join(m, "scratch/mine/chk-1"), 0o777)
with open(os.path.join(m, "scratch/mine/chk-1/_metadata"), "wb") as f:
    f.write(bytes.fromhex(sys.argv[1]))
os.makedirs(os.path.join(m, "scratch/dark/inner"), 0o777)
open(os.path.join(m, "scratch/dark/inner/f"), "w").close()
os.chmod(os.path.join(m, "scratch/dark"), 0o700)
`, hex.EncodeToString(real), p.mnt); code != 0 {
		t.Fatalf("as nobody: exit %d\n%s", code, out)
	}
	waitSyncAfter(t, p, time.Now())
	waitSyncAfter(t, p, time.Now())
	s := p.stats()
	var dark *struct{ confined bool }
	for _, u := range s.UnknownSubtrees {
		if u.Key == "scratch/dark" {
			dark = &struct{ confined bool }{u.Confined}
		}
	}
	if dark == nil {
		t.Fatalf("scratch/dark not an unknown subtree: %+v\n%s", s.UnknownSubtrees, p.logText())
	}
	if !dark.confined {
		t.Errorf("nobody's unreadable scratch/dark is not confined once nobody wrote a _metadata of its own into scratch: %+v", s.UnknownSubtrees)
	}
	// The Flink user (root here) removes the dead job's folder through the mount.
	before := time.Now()
	outb, rmErr := exec.Command("rm", "-rf", p.m(tr.Purge)).CombinedOutput()
	out := string(outb)
	waitSyncAfter(t, p, before)
	garbage := tr.Garbage(tr.Purge, treegen.DefaultPolicy)
	left := 0
	for _, k := range garbage {
		if _, err := os.Lstat(filepath.Join(root, k)); err == nil {
			left++
		}
	}
	if left > 0 {
		t.Errorf("rm -rf %s through the mount (%v) left %d of its %d garbage files while nobody's folder is dark:\n%s\n%s",
			tr.Purge, rmErr, left, len(garbage), out, firstLines(p.logText(), 5))
	}
}

// TestRedteamSharedAreaPremadeByNobody (ops deployment: the store root is a world-writable 1777
// export, as Flink's users share it; --shared is turned on later). Before the first --shared mount,
// nobody makes the store's .ckguard folder beside the mount (mode 0777, nobody's). The mount creates
// .ckguard/v1 (root's, 0700) inside it and pins live there. An operator pins an old retained
// checkpoint to restore a job from it. nobody, who may not read v1, still owns .ckguard: it renames
// v1 away and puts an empty v1 of its own in its place. At the next sync the pin is gone on every
// mount, and the Flink user's cleanup deletes the pinned checkpoint (a wrong "yes"). Defended: the
// mount refuses (or never uses) a shared area it does not own that others may write, naming it; or
// the pin stays in force.
func TestRedteamSharedAreaPremadeByNobody(t *testing.T) {
	mntRequire(t)
	base, tr := unprivStore(t, "ckguard-redteam-sharedarea-")
	root := tr.Root
	if err := os.Chmod(root, 0o1777); err != nil {
		t.Fatal(err)
	}
	p := sharedProc(t, base, root)
	if err := os.Chmod(base, 0o711); err != nil { // nobody reaches the store beside the mount
		t.Fatal(err)
	}
	if out, code := asNobody(t, "/usr/bin/python3", "-c", `
import os, sys
os.umask(0)
os.mkdir(os.path.join(sys.argv[1], ".ckguard"), 0o777)
`, root); code != 0 {
		t.Fatalf("as nobody: exit %d\n%s", code, out)
	}
	refusesSharedArea(t, p, filepath.Join(root, ".ckguard"), "owned by uid")
}

// TestRedteamOverwriteLiveMetadata: in a store where every folder and file is writable by everyone
// (matrixStore), nobody tries, through the mount, to turn the protected newest `_metadata` of the
// Flink user's running job into a
// "damaged" one (which protects nothing but itself) by writing over it in place (no truncation), by
// O_TRUNC, and by renaming a file of its own over it. Defended: each is refused (a live checkpoint's
// `_metadata` is protected), the `_metadata` is unchanged, and its referenced file is still refused.
func TestRedteamOverwriteLiveMetadata(t *testing.T) {
	mntRequire(t)
	base, root, ref := matrixStore(t, "ckguard-redteam-overwrite-")
	p := sharedMount(t, base, root)
	waitSyncAfter(t, p, time.Now())
	// The running job's newest checkpoint: protected (an unlink is refused). An older one that an
	// unlink may remove may also be written over: that is no more than its deletion.
	meta := "checkpoints/" + treegen.IncidentTwoNewJob + "/chk-352/_metadata"
	buf := make([]byte, 64)
	if n, err := syscall.Getxattr(p.m(meta), "user.ckguard.state", buf); err != nil || string(buf[:n]) != "protected-by-policy" {
		t.Fatalf("state of %s: %q %v, want protected-by-policy", meta, buf[:n], err)
	}
	before, err := os.ReadFile(filepath.Join(root, meta))
	if err != nil {
		t.Fatal(err)
	}
	res := unprivAttempts(t, `
def inplace():
    fd = os.open(sys.argv[1], os.O_WRONLY)
    try:
        os.pwrite(fd, b"\0" * 64, 0)
    finally:
        os.close(fd)
def trunc():
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC)
    os.close(fd)
def over():
    with open(sys.argv[2], "wb") as f:
        f.write(b"junk")
    os.rename(sys.argv[2], sys.argv[1])
attempt("inplace", inplace)
attempt("trunc", trunc)
attempt("over", over)
`, p.m(meta), p.m(filepath.Dir(meta)+"/junk"))
	after, _ := os.ReadFile(filepath.Join(root, meta))
	if string(after) != string(before) || res["inplace"] == "OK" || res["trunc"] == "OK" || res["over"] == "OK" {
		t.Errorf("as nobody on live %s: write in place %s, O_TRUNC %s, rename over %s (want all refused); content unchanged %v",
			meta, res["inplace"], res["trunc"], res["over"], string(after) == string(before))
	}
	waitSyncAfter(t, p, time.Now())
	elsewhereDecided(t, p, ref, "after the attempts on "+meta)
}

// TestRedteamUnknownForgedAtFirstBuild: the same plant as TestRedteamUnknownUnconfinedByForgedMetadata
// (nobody's copy of a real `_metadata` in scratch/mine/chk-1, nobody's mode-700 scratch/dark), present
// when the index is built (a new index folder, a rebuild after an upgrade or a damaged index: a rebuild
// keeps no tombstones, so every unknown entry counts as never read). The unconfined entry then refuses
// every deletion in the store ("a `_metadata` never read may lie in"), until nobody chooses to make
// its folder readable. Defended: unrelated old garbage elsewhere is deleted, the referenced file refused.
func TestRedteamUnknownForgedAtFirstBuild(t *testing.T) {
	mntRequire(t)
	real := realFlinkMetadata(t)
	base, root, ref := matrixStore(t, "ckguard-redteam-forged-build-")
	// What nobody made earlier through the mount (as TestRedteamUnknownUnconfinedByForgedMetadata
	// shows it can), made here beside it and given to nobody.
	for _, d := range []string{"scratch/mine/chk-1", "scratch/dark/inner"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "scratch/mine/chk-1/_metadata"), real, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "scratch/dark/inner/f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"scratch/mine", "scratch/dark"} {
		if out, err := exec.Command("chown", "-R", nobodyUID+":"+nobodyUID, filepath.Join(root, d)).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v %s", err, out)
		}
	}
	if err := os.Chmod(filepath.Join(root, "scratch/dark"), 0o700); err != nil {
		t.Fatal(err)
	}
	p := sharedProc(t, base, root)
	p.wrap = []string{"setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-dac_override,-dac_read_search", "--"}
	p.start("--allow-other")
	waitSyncAfter(t, p, time.Now())
	waitSyncAfter(t, p, time.Now())
	s := p.stats()
	if len(s.UnknownSubtrees) != 1 || s.UnknownSubtrees[0].Key != "scratch/dark" {
		t.Fatalf("unknown subtrees %+v, want scratch/dark\n%s", s.UnknownSubtrees, firstLines(p.logText(), 20))
	}
	t.Logf("scratch/dark: confined %v, last readable %s", s.UnknownSubtrees[0].Confined, s.UnknownSubtrees[0].LastReadable)
	elsewhereDecided(t, p, ref, "nobody's forged _metadata and unreadable folder at the index's first build")
}

// TestRedteamSharedAreaSymlink (ops deployment: the store root is a 1777 export): before the first
// --shared mount, nobody makes the store's .ckguard a symlink to a folder of root's outside the store
// that nobody may not even read. The daemon, root, follows it: it makes its shared state folders and
// records there (its MkdirAll and writes follow symlinks), so a local user picks where root creates
// folders and files. Defended: the mount refuses a .ckguard that is a symlink (or not its own), naming
// it, and writes nothing through it. (The quarantine folder has this check: localquarantine/local.go
// ownFolder, TestUnprivPlantedQuarantineFolder.) A fix that makes the mount refuse to start needs this
// test (and TestRedteamSharedAreaPremadeByNobody) to expect the early exit: p.start fails the test
// when the mount exits.
func TestRedteamSharedAreaSymlink(t *testing.T) {
	mntRequire(t)
	base, tr := unprivStore(t, "ckguard-redteam-sharedlink-")
	root := tr.Root
	if err := os.Chmod(root, 0o1777); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(base, "root-only")
	if err := os.Mkdir(elsewhere, 0o700); err != nil {
		t.Fatal(err)
	}
	p := sharedProc(t, base, root)
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	if out, code := asNobody(t, "/usr/bin/python3", "-c", `
import os, sys
os.symlink(sys.argv[2], os.path.join(sys.argv[1], ".ckguard"))
`, root, elsewhere); code != 0 {
		t.Fatalf("as nobody: exit %d\n%s", code, out)
	}
	refusesSharedArea(t, p, filepath.Join(root, ".ckguard"), "not a folder of ckguard's")
	var made []string
	filepath.WalkDir(elsewhere, func(q string, d os.DirEntry, err error) error {
		if err == nil && q != elsewhere {
			made = append(made, strings.TrimPrefix(q, elsewhere+"/"))
		}
		return nil
	})
	if len(made) > 0 {
		t.Errorf("through nobody's symlink .ckguard -> %s the root daemon made %d entries there, e.g. %v", elsewhere, len(made), made[:min(len(made), 5)])
	}
}

// TestRedteamHoldFolderRenameLeaksFlag (--hold, local): the hook that clears a flag before the
// mount's own change (BeforeChange) looks up the changed key only, and a pass releases a flag by the
// key it set it at. A checkpoint is retired through the mount (its `_metadata` deleted): its files
// are no longer protected but still flagged until the next pass. Its folder is then renamed through
// the mount (allowed: nothing in it is referenced; the kernel renames a folder whatever its files'
// flags). The pass after that finds nothing at the old keys and forgets them: the files keep
// FS_IMMUTABLE_FL at their new names forever, so the Flink user's rm -rf of that garbage through the
// mount fails (EPERM from the filesystem, the guard having allowed it) until root runs chattr -i.
// Defended: after the next sync no flag is left on an unreferenced file, and rm -rf removes it.
func TestRedteamHoldFolderRenameLeaksFlag(t *testing.T) {
	mntRequire(t)
	base, tr := immutableStore(t)
	args := []string{"--allow-other", "--hold", "required", "--sync-interval", "1h", "--max-staleness", "3h"}
	p := sharedMount(t, base, tr.Root, args[1:]...)
	prot := protectedSet(tr)
	waitFlags(t, p, tr, tr.AllFiles(), prot, "first pass")
	state := func(key string) string {
		buf := make([]byte, 64)
		n, err := syscall.Getxattr(p.m(key), "user.ckguard.state", buf)
		if err != nil {
			return err.Error()
		}
		return string(buf[:n])
	}
	var metas []string
	for m := range tr.Live {
		metas = append(metas, m)
	}
	sort.Strings(metas)
	meta := ""
	for _, m := range metas {
		if state(m) == "deletable" {
			meta = m
			break
		}
	}
	if meta == "" {
		t.Fatalf("no deletable live checkpoint among %v", metas)
	}
	chk := filepath.ToSlash(filepath.Dir(meta))
	var own []string
	for _, k := range tr.AllFiles() {
		if strings.HasPrefix(k, chk+"/") && k != meta && immutable(t, tr, k) {
			own = append(own, k)
		}
	}
	if len(own) == 0 {
		t.Fatalf("no flagged file in %s besides its _metadata", chk)
	}
	if err := os.Remove(p.m(meta)); err != nil {
		t.Fatalf("rm %s through the mount: %v", meta, err)
	}
	if !immutable(t, tr, own[0]) {
		t.Skipf("%s released at once (a pass ran): the window this test needs is gone", own[0])
	}
	moved := chk + "-moved"
	if err := os.Rename(p.m(chk), p.m(moved)); err != nil {
		t.Fatalf("mv %s %s through the mount: %v (state of %s: %s)", chk, moved, err, own[0], state(own[0]))
	}
	// The next sync and pass (a restart: the sync interval is an hour).
	p.stop()
	p.start(args...)
	var out []byte
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Second) {
		if out, err = exec.Command("rm", "-rf", p.m(moved)).CombinedOutput(); err == nil || time.Now().After(deadline) {
			break
		}
	}
	var left []string
	for _, k := range own {
		nk := moved + strings.TrimPrefix(k, chk)
		if _, serr := os.Lstat(filepath.Join(tr.Root, nk)); serr == nil && immutable(t, tr, nk) {
			left = append(left, nk)
		}
	}
	if len(left) > 0 || err != nil {
		t.Errorf("after retiring %s and renaming its folder through the mount, then a restart and its pass: rm -rf %s through the mount (retried for 20 s): %v; %d file(s) still immutable, e.g. %v\n%s",
			meta, moved, err, len(left), left[:min(len(left), 3)], firstLines(string(out), 5))
	}
}

// refusesSharedArea: a --shared mount of p's store refuses to start, naming the shared state folder
// dir that is not its own and why (want), and leaves no mount.
func refusesSharedArea(t *testing.T, p *mntProc, dir, want string) {
	t.Helper()
	out, code := mntRun(t, "", "timeout", "60", mntBinary(t), "mount", "--store", p.store, "--index", p.index, "--foreground",
		"--allow-other", "--shared", p.mnt)
	if code == 0 || !strings.Contains(out, dir) || !strings.Contains(out, want) {
		t.Fatalf("mount --shared with another user's %s: exit %d, want a refusal naming it (%q)\n%s", dir, code, want, out)
	}
}
