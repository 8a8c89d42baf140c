package integration

import (
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// nobodyUID is the unprivileged user the test acts as (present on every Debian/Ubuntu system).
const nobodyUID = "65534"

// asNobody runs a command as uid/gid 65534 with no supplementary groups.
func asNobody(t *testing.T, name string, args ...string) (string, int) {
	t.Helper()
	if _, err := exec.LookPath("setpriv"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("setpriv (util-linux) is required")
		}
		t.Skip("setpriv not installed")
	}
	full := append([]string{"--reuid=" + nobodyUID, "--regid=" + nobodyUID, "--clear-groups", "--", name}, args...)
	return mntRun(t, "/", "setpriv", full...)
}

// unprivStore generates IncidentTwo in <base>/store, base a fresh folder below the system's temp
// folder (removed at the end), and returns both. The tree is root's; nobodyOwns gives it to the user.
func unprivStore(t *testing.T, prefix string) (base string, tr *treegen.Tree) {
	t.Helper()
	base, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	tr, err = treegen.IncidentTwo(filepath.Join(base, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return base, tr
}

// nobodyOwns gives everything below root to uid/gid 65534, as the checkpoints belong to the
// (unprivileged) Flink user in production.
func nobodyOwns(t *testing.T, root string) {
	t.Helper()
	if out, err := exec.Command("chown", "-R", nobodyUID+":"+nobodyUID, root).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
}

// TestMountNonRootCannotBypass: with --allow-other, an unprivileged user who owns the checkpoint files can
// clean up through the mount like root (garbage goes, referenced files stay), but has no way around the
// guard: the store itself is out of reach, and every trick that would destroy referenced data through the
// mount is refused. The control socket refuses them too.
func TestMountNonRootCannotBypass(t *testing.T) {
	mntRequire(t)
	// base is 0700 root (sharedMount makes it so): the store below it is reachable only through the mount.
	base, tr := unprivStore(t, "ckguard-users-")
	nobodyOwns(t, tr.Root)
	// Root's own files the user may neither read nor list (go-fuse used to show mode 0 as
	// 0644/0755, and the kernel checked the user against that).
	if err := os.WriteFile(filepath.Join(tr.Root, "secret000"), []byte("root only"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tr.Root, "private000", "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(tr.Root, "private000"), 0); err != nil {
		t.Fatal(err)
	}
	// The mountpoint must be reachable by the user: a 0755 directory outside base.
	p := sharedMount(t, base, tr.Root)

	ref := tr.Referenced()[0]
	refM := p.m(ref)
	// Each bypass attempt as the user; all must fail and leave the referenced file intact.
	attempts := []struct {
		name string
		argv []string
	}{
		{"rm through the mount", []string{"rm", "-f", refM}},
		{"truncate through the mount", []string{"truncate", "-s", "0", refM}},
		{"overwrite through the mount", []string{"sh", "-c", "echo x > " + refM}},
		{"rename away then delete", []string{"mv", refM, p.m("stolen")}},
		{"hard link then truncate", []string{"sh", "-c", "ln " + refM + " " + p.m("alias") + " && truncate -s 0 " + p.m("alias")}},
		{"forge the guard's xattr", []string{"setfattr", "-n", "user.ckguard.state", "-v", "deletable", refM}},
		{"rm in the store directly", []string{"rm", "-f", filepath.Join(tr.Root, ref)}},
		{"truncate in the store directly", []string{"truncate", "-s", "0", filepath.Join(tr.Root, ref)}},
		{"unmount the guard", []string{"fusermount3", "-u", p.mnt}},
		{"read a mode 000 file of root's", []string{"cat", p.m("secret000")}},
		{"list a mode 000 folder of root's", []string{"ls", p.m("private000")}},
		{"query the control socket", []string{"/usr/bin/python3", "-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])", p.sock}},
	}
	want, _ := os.ReadFile(filepath.Join(tr.Root, ref))
	for _, a := range attempts {
		out, code := asNobody(t, a.argv[0], a.argv[1:]...)
		if code == 0 {
			t.Errorf("%s: succeeded as uid %s (%s)", a.name, nobodyUID, strings.TrimSpace(out))
		}
		got, err := os.ReadFile(filepath.Join(tr.Root, ref))
		if err != nil || string(got) != string(want) {
			al, _ := os.ReadFile(p.audit)
			t.Fatalf("%s: referenced %s damaged (%v)\naudit:\n%s\nlog:\n%s", a.name, ref, err, al, p.logText())
		}
	}
	// The socket attempt must fail at the socket (connect: EACCES), not earlier: a pyenv shim in PATH is
	// not executable by the user and would make it fail for the wrong reason.
	if out, _ := asNobody(t, "/usr/bin/python3", "-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])", p.sock); !strings.Contains(out, "PermissionError") {
		t.Errorf("connecting to the control socket as uid %s: %q, want PermissionError from connect", nobodyUID, out)
	}
	if st, err := os.Stat(p.sock); err != nil || st.Mode().Perm() != 0o600 || st.Sys() == nil {
		t.Errorf("control socket %s: %v %v, want mode 0600", p.sock, st.Mode(), err)
	}
	for _, extra := range []string{"secret000", "private000"} {
		if err := os.RemoveAll(filepath.Join(tr.Root, extra)); err != nil {
			t.Fatal(err)
		}
	}
	// The user's own cleanup works through the mount exactly as root's does.
	asNobody(t, "rm", "-rf", p.m(tr.Purge))
	p.stop()
	mntSameSet(t, "after the user's rm -rf through the mount", mntFiles(t, tr.Root), expectedAfter(tr, mntCleanups[0], treegen.DefaultPolicy))
	var uids = map[uint32]bool{}
	for _, r := range p.auditRecords() {
		uids[r.UID] = true
	}
	if !uids[65534] {
		t.Errorf("audit log does not attribute decisions to uid 65534: %v", uids)
	}
}

// TestMountRestoreWithCpA: restoring checkpoints owned by the Flink user into the store with
// `cp -a` as root works through the mount. cp creates each file and folder owner-only as root, then gives
// it its owner, mode and times; by then the restored _metadata has made the files referenced (a decided
// chown of a folder holding them was refused, leaving it root's), and the files are in grace (setting
// their old mtimes was refused).
func TestMountRestoreWithCpA(t *testing.T) {
	mntRequire(t)
	dir := t.TempDir()
	backup, err := treegen.IncidentOne(filepath.Join(dir, "backup"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	nobodyOwns(t, backup.Root)
	store := filepath.Join(dir, "store")
	if err := os.Mkdir(store, 0o755); err != nil {
		t.Fatal(err)
	}
	p := mntStart(t, store, "")
	if out, code := mntRun(t, "", "cp", "-a", backup.Root, p.m("restored")); code != 0 {
		var refused []string
		for _, r := range p.auditRecords() {
			if r.Decision == "refuse" {
				refused = append(refused, r.Op+" "+r.Path+" ("+r.Reason+")")
			}
		}
		t.Fatalf("cp -a of checkpoints owned by uid %s into the mount: exit %d\n%s\nrefused: %v", nobodyUID, code, out, refused)
	}
	p.stop()
	n := 0
	err = filepath.WalkDir(filepath.Join(store, "restored"), func(path string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			return err
		}
		if st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("%s: owner %d:%d after cp -a, want %s:%s", path, st.Uid, st.Gid, nobodyUID, nobodyUID)
		}
		// cp -a sets each file's old mtime right after writing it: the mount lets the process that created
		// a file backdate it.
		if rel, _ := filepath.Rel(filepath.Join(store, "restored"), path); d.Type().IsRegular() {
			var src syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(backup.Root, rel), &src); err == nil && src.Mtim != st.Mtim {
				t.Errorf("%s: mtime %v after cp -a, want the backup's %v", path, st.Mtim, src.Mtim)
			}
		}
		n++
		return nil
	})
	if err != nil || n < 10 {
		t.Fatalf("restored tree: %d entries, %v", n, err)
	}
}
