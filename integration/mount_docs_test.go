package integration

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/mountutil"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// docPaths rewrites the documented production paths to this test's directories.
func docPaths(s string, repl map[string]string) string {
	for from, to := range repl {
		s = strings.ReplaceAll(s, from, to)
	}
	return s
}

// systemdExpand expands a unit's command line the way systemd does: ${VAR} is one word, $VAR is split on
// whitespace into several.
func systemdExpand(cmd string, env map[string]string) []string {
	var out []string
	for _, w := range strings.Fields(cmd) {
		if m := regexp.MustCompile(`^\$\{(\w+)\}$`).FindStringSubmatch(w); m != nil {
			out = append(out, env[m[1]])
			continue
		}
		if m := regexp.MustCompile(`^\$(\w+)$`).FindStringSubmatch(w); m != nil {
			out = append(out, strings.Fields(env[m[1]])...)
			continue
		}
		out = append(out, w)
	}
	return out
}

// TestDocsSystemdUnit runs docs/ckguard@.service as written (systemd-analyze verify, then its ExecStartPre and
// ExecStart with the example environment file and a NOTIFY_SOCKET): READY=1 arrives once the mount is usable,
// and SIGTERM (systemctl stop) unmounts cleanly.
func TestDocsSystemdUnit(t *testing.T) {
	mntRequire(t)
	root := mntRepoRoot(t)
	dir := t.TempDir()
	bin := mntBinary(t)
	tr, err := treegen.IncidentTwo(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	repl := map[string]string{
		"/usr/local/bin/ckguard":        bin,
		"/srv/flink/checkpoints":        tr.Root,
		"/var/lib/ckguard/flink":        filepath.Join(dir, "index"),
		"/mnt/flink-checkpoints":        filepath.Join(dir, "mnt"),
		"/etc/ckguard/%i.env":           filepath.Join(dir, "%i.env"),
		"--metrics-addr 127.0.0.1:9477": "--metrics-addr " + freePort(t),
	}
	unitB, err := os.ReadFile(filepath.Join(root, "docs", "ckguard@.service"))
	if err != nil {
		t.Fatal(err)
	}
	envB, err := os.ReadFile(filepath.Join(root, "docs", "ckguard.env.example"))
	if err != nil {
		t.Fatal(err)
	}
	unit := docPaths(string(unitB), repl)
	envText := docPaths(string(envB), repl)
	if err := os.WriteFile(filepath.Join(dir, "test.env"), []byte(envText), 0o644); err != nil {
		t.Fatal(err)
	}
	unitPath := filepath.Join(dir, "ckguard@test.service")
	if err := os.WriteFile(unitPath, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	// The instance's drop-in for a local store (RequiresMountsFor= its paths), as written.
	dropB, err := os.ReadFile(filepath.Join(root, "docs", "ckguard-store.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dropB), "RequiresMountsFor=/srv/flink/checkpoints /var/lib/ckguard/flink") {
		t.Errorf("docs/ckguard-store.conf does not require the store's and the index's mounts:\n%s", dropB)
	}
	if err := os.MkdirAll(unitPath+".d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(unitPath+".d", "store.conf"), []byte(docPaths(string(dropB), repl)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		// verify exits 0 on many warnings (an ignored setting among them): its output must be empty.
		if out, code := mntRun(t, "", "systemd-analyze", "verify", unitPath); code != 0 || strings.TrimSpace(out) != "" {
			t.Errorf("systemd-analyze verify (exit %d): %s", code, out)
		}
	} else if os.Getenv("CI") == "true" {
		t.Error("systemd-analyze missing: CI verifies the shipped unit with it (make setup-test installs systemd)")
	}
	env := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(envText))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, v, _ := strings.Cut(l, "=")
		env[k] = v
	}
	var pre, start string
	for _, l := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStartPre="); ok {
			pre = v
		}
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			start = v
		}
	}
	if out, code := mntRun(t, "", systemdExpand(pre, env)[0], systemdExpand(pre, env)[1:]...); code != 0 {
		t.Fatalf("ExecStartPre: %s", out)
	}
	// systemd's notify socket.
	nsPath := filepath.Join(dir, "notify")
	ns, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: nsPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	argv := systemdExpand(start, env)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+nsPath)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logf, _ := os.Create(filepath.Join(dir, "unit.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	mnt := env["CKGUARD_MOUNTPOINT"]
	t.Cleanup(func() { _ = mountutil.Unmount(mnt, true) })
	// While the first index sync runs the start timeout is extended (a rebuild of a big store may take
	// longer than TimeoutStartSec); then READY=1.
	_ = ns.SetReadDeadline(time.Now().Add(60 * time.Second))
	buf := make([]byte, 4096)
	var msgs []string
	for len(msgs) == 0 || !strings.Contains(msgs[len(msgs)-1], "READY=1") {
		n, err := ns.Read(buf)
		if err != nil {
			b, _ := os.ReadFile(filepath.Join(dir, "unit.log"))
			t.Fatalf("no READY=1 from sd_notify (got %q): %v\n%s", msgs, err, b)
		}
		msgs = append(msgs, string(buf[:n]))
	}
	if !strings.HasPrefix(msgs[0], "EXTEND_TIMEOUT_USEC=") || !strings.Contains(msgs[0], "STATUS=syncing the index") {
		t.Errorf("first sd_notify message %q, want the start timeout extended while the index syncs", msgs[0])
	}
	// READY means usable, and guarded.
	if _, err := os.ReadDir(mnt); err != nil {
		t.Fatalf("mount not usable at READY=1: %v", err)
	}
	if err := os.Remove(filepath.Join(mnt, tr.Referenced()[0])); err == nil {
		t.Errorf("referenced file deletable through the unit's mount")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("no exit within 30s of SIGTERM")
	}
	if mi, _ := mountutil.Lookup(mnt); mi != nil {
		t.Errorf("still mounted after stop")
	}
}

// TestDocsFstab mounts with the documented /etc/fstab line through mount(8) (docs/mount.ckguard installed as
// /sbin/mount.ckguard for the test, an alternative fstab via mount -T) and unmounts with umount(8).
func TestDocsFstab(t *testing.T) {
	mntRequire(t)
	if _, err := exec.LookPath("mount"); err != nil {
		t.Fatal("mount(8) missing")
	}
	root := mntRepoRoot(t)
	helper := "/sbin/mount.ckguard"
	if _, err := os.Stat(helper); err == nil {
		t.Logf("%s already installed; testing the installed copy", helper)
	} else {
		b, err := os.ReadFile(filepath.Join(root, "docs", "mount.ckguard"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(helper, b, 0o755); err != nil {
			t.Fatalf("install %s: %v", helper, err)
		}
		t.Cleanup(func() { os.Remove(helper) })
	}
	dir := t.TempDir()
	tr, err := treegen.IncidentTwo(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	fstabB, err := os.ReadFile(filepath.Join(root, "docs", "fstab.example"))
	if err != nil {
		t.Fatal(err)
	}
	fstab := docPaths(string(fstabB), map[string]string{
		"/srv/flink/checkpoints": tr.Root,
		"/var/lib/ckguard/flink": filepath.Join(dir, "index"),
		"/mnt/flink-checkpoints": mnt,
	})
	fp := filepath.Join(dir, "fstab")
	if err := os.WriteFile(fp, []byte(fstab), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("mount", "-T", fp, mnt)
	cmd.Env = append(os.Environ(), "CKGUARD_BIN="+mntBinary(t))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mount -T fstab: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = mountutil.Unmount(mnt, true) })
	mi, _ := mountutil.Lookup(mnt)
	if mi == nil || mi.FSType != "fuse.ckguard" {
		t.Fatalf("not a ckguard mount after mount(8): %+v", mi)
	}
	if _, err := os.ReadDir(mnt); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, tr.Referenced()[0])); err == nil {
		t.Errorf("referenced file deletable through the fstab mount")
	}
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v %s", err, out)
	}
	if mi, _ := mountutil.Lookup(mnt); mi != nil {
		t.Errorf("still mounted after umount(8)")
	}
}
