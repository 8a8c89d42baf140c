package integration

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/refindex/store"
)

// unprivAttempts runs a Python script as uid 65534 that prints one "name result" line per attempt
// (result: OK or the errno) and returns the results by name.
func unprivAttempts(t *testing.T, script string, args ...string) map[string]string {
	t.Helper()
	out, code := asNobody(t, "/usr/bin/python3", append([]string{"-c", unprivPrelude + script}, args...)...)
	if code != 0 {
		t.Fatalf("python as uid %s: exit %d\n%s", nobodyUID, code, out)
	}
	return parseAttempts(out)
}

// parseAttempts reads the "name result" lines of an attempt script.
func parseAttempts(out string) map[string]string {
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 {
			got[f[0]] = f[1]
		}
	}
	return got
}

// errnoOf is how unprivAttempts reports an errno.
func errnoOf(e syscall.Errno) string { return fmt.Sprint(int(e)) }

// TestUnprivLocalMountAttacks: an unprivileged user who owns the job folders (the Flink user, or anyone
// in a shared checkpoint folder) attacks an --allow-other local mount served by root with the quarantine
// on. The daemon must not do for them anything beyond the decision: no hard link to a file they cannot
// reach, no device, no file flags or ioctls with its rights (FS_IOC_SETFLAGS, FICLONE), no guard,
// security or trusted xattrs, no way around a refusal through an O_PATH descriptor, nothing created
// that is root's with a set-id bit, no way into the quarantine folder or its socket. Afterwards the
// store is checked as root: every refused attempt left nothing behind.
func TestUnprivLocalMountAttacks(t *testing.T) {
	mntRequire(t)
	base, tr := unprivStore(t, "ckguard-unpriv-")
	nobodyOwns(t, tr.Root)
	// The store root is root's; a file of root's the user may not read sits in it.
	if err := os.Chown(tr.Root, 0, 0); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(tr.Root, "rootsecret")
	if err := os.WriteFile(secret, []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The sockets sit in a folder the user can reach (the index folder is 0700), so it is the
	// sockets' own mode and peer check that keep the user out.
	sockDir := readableDir(t)
	p := sharedMount(t, base, tr.Root, "--control-socket", filepath.Join(sockDir, "ckguard.sock"))
	p.sock = filepath.Join(sockDir, "ckguard.sock")
	// Something staged, so the quarantine folder and its socket have something to give away.
	out, code := mntRun(t, "", "rm", "-rf", p.m(tr.Purge))
	if staged, _ := os.ReadDir(filepath.Join(tr.Root, store.QuarantineDir)); len(staged) < 2 {
		t.Fatalf("rm -rf %s: exit %d, nothing staged\n%s", tr.Purge, code, out)
	}
	// A file a live checkpoint still references after the cleanup.
	var ref string
	for _, r := range tr.Referenced() {
		if _, err := os.Lstat(filepath.Join(tr.Root, filepath.FromSlash(r))); err == nil {
			ref = r
			break
		}
	}
	if ref == "" {
		t.Fatal("no referenced file left after the cleanup")
	}
	want, _ := os.ReadFile(filepath.Join(tr.Root, ref))
	mine := path.Join(path.Dir(ref), "mallory") // a folder of the user's own, beside the referenced file
	qsock := filepath.Join(sockDir, control.QuarantineSocketName)

	script := `m, ref, mine, qsock, qdir = sys.argv[1:6]
M = lambda rel: os.path.join(m, rel)
os.mkdir(M(mine))
own = M(mine + "/own")
open(own, "w").write("mine")
attempt("link-root-file", lambda: os.link(M("rootsecret"), M(mine + "/alias")))
attempt("mknod-chr", lambda: os.mknod(M(mine + "/null"), 0o20666, os.makedev(1, 3)))
attempt("mknod-blk", lambda: os.mknod(M(mine + "/disk"), 0o60666, os.makedev(7, 0)))
attempt("mkfifo", lambda: os.mkfifo(M(mine + "/fifo")))
attempt("mknod-suid", lambda: os.mknod(M(mine + "/suid-mknod"), 0o104755))
attempt("create-suid", lambda: os.close(os.open(M(mine + "/suid-create"), os.O_CREAT | os.O_WRONLY, 0o6755)))
attempt("mkdir-sgid", lambda: os.mkdir(M(mine + "/sgid"), 0o2777))
FS_IOC_SETFLAGS, FS_NODUMP_FL, FICLONE = 0x40086602, 0x40, 0x40049409
def setflags(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("l", FS_NODUMP_FL))
    finally:
        os.close(fd)
attempt("setflags-own", lambda: setflags(own))
attempt("setflags-ref", lambda: setflags(M(ref)))
def ficlone():
    src = os.open(M(ref), os.O_RDONLY)
    dst = os.open(M(mine + "/clone"), os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        fcntl.ioctl(dst, FICLONE, src)
    finally:
        os.close(src); os.close(dst)
attempt("ficlone", ficlone)
attempt("xattr-guard", lambda: os.setxattr(own, "user.ckguard.state", b"deletable"))
attempt("xattr-guard-ref", lambda: os.setxattr(M(ref), "user.ckguard.refs", b""))
attempt("rmxattr-guard-ref", lambda: os.removexattr(M(ref), "user.ckguard.state"))
attempt("xattr-security", lambda: os.setxattr(own, "security.evil", b"x"))
attempt("xattr-capability", lambda: os.setxattr(own, "security.capability", struct.pack("<IIIII", 0x02000001, 0xffffffff, 0, 0xffffffff, 0)))
attempt("xattr-trusted", lambda: os.setxattr(own, "trusted.evil", b"x"))
opath = os.open(M(ref), os.O_PATH)
proc = "/proc/self/fd/%d" % opath
attempt("opath-truncate", lambda: os.truncate(proc, 0))
attempt("opath-xattr", lambda: os.setxattr(proc, "user.ckguard.state", b"deletable"))
attempt("opath-open-trunc", lambda: os.close(os.open(proc, os.O_WRONLY | os.O_TRUNC)))
attempt("opath-link", lambda: os.link(proc, M(mine + "/alias-ref"), follow_symlinks=True))
attempt("opath-alias-truncate", lambda: os.truncate(M(mine + "/alias-ref"), 0))
attempt("q-stat-slash", lambda: os.stat(M(qdir) + "/"))
attempt("q-stat-dotdot", lambda: os.stat(M(os.path.dirname(ref) + "/../" * ref.count("/") + qdir)))
attempt("q-mkdir-inside", lambda: os.mkdir(M(qdir + "/x")))
attempt("q-rename-into", lambda: os.rename(own, M(qdir + "/" + "x")))
attempt("q-rename-dir", lambda: os.rename(M(mine), M(qdir)))
attempt("q-symlink", lambda: os.symlink("/", M(qdir)))
def qconnect():
    s = socket.socket(socket.AF_UNIX)
    s.connect(qsock)
attempt("q-socket", qconnect)
print("listed", int(qdir in os.listdir(m)))
`
	got := unprivAttempts(t, script, p.mnt, ref, mine, qsock, store.QuarantineDir)
	expect := map[string]string{
		"link-root-file": errnoOf(syscall.EPERM), // the kernel's protected_hardlinks, before the daemon
		"mknod-chr":      errnoOf(syscall.EPERM), "mknod-blk": errnoOf(syscall.EPERM),
		"setflags-own": errnoOf(syscall.ENOTTY), "setflags-ref": errnoOf(syscall.ENOTTY),
		"xattr-guard": errnoOf(syscall.EPERM), "xattr-guard-ref": errnoOf(syscall.EPERM), "rmxattr-guard-ref": errnoOf(syscall.EPERM),
		"xattr-security": errnoOf(syscall.EPERM), "xattr-capability": errnoOf(syscall.EPERM), "xattr-trusted": errnoOf(syscall.EPERM),
		"opath-truncate": errnoOf(syscall.EPERM), "opath-xattr": errnoOf(syscall.EPERM), "opath-open-trunc": errnoOf(syscall.EPERM),
		"q-stat-slash": errnoOf(syscall.ENOENT), "q-stat-dotdot": errnoOf(syscall.ENOENT), "q-mkdir-inside": errnoOf(syscall.ENOENT),
		"q-rename-into": errnoOf(syscall.ENOENT), // The store root is root's 0755 here, so the kernel refuses a new name in it first
		// (TestMountQuarantineHiddenFromUsers has the guard refuse it in a root writable by everyone).
		"q-rename-dir": errnoOf(syscall.EACCES), "q-symlink": errnoOf(syscall.EACCES),
		"q-socket": errnoOf(syscall.EACCES), "listed": "0",
		// Allowed: harmless, and what a user may do on the store itself.
		"mkfifo": "OK", "mknod-suid": "OK", "create-suid": "OK", "mkdir-sgid": "OK",
	}
	t.Logf("results (errno or OK): %v", got)
	for k, v := range expect {
		if got[k] != v {
			t.Errorf("%s as uid %s: %q, want %s", k, nobodyUID, got[k], v)
		}
	}
	// A clone is never made: the kernel has no clone for FUSE files, and the daemon gets no ioctl
	// carrying a descriptor number of the caller's.
	if got["ficlone"] == "OK" {
		t.Errorf("FICLONE through the mount succeeded as uid %s", nobodyUID)
	}
	// A second name of a referenced file (if the index lets the link through) gives no way around it.
	if got["opath-alias-truncate"] == "OK" {
		t.Errorf("truncating a hard link made through an O_PATH descriptor of a referenced file succeeded")
	}

	// As root, in the store: the referenced file and root's file are intact, nothing refused was made.
	if b, err := os.ReadFile(filepath.Join(tr.Root, ref)); err != nil || string(b) != string(want) {
		t.Errorf("referenced %s damaged: %v", ref, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(secret, &st); err != nil || st.Nlink != 1 {
		t.Errorf("root's file %s: %v, %d links, want 1", secret, err, st.Nlink)
	}
	sdir := filepath.Join(tr.Root, filepath.FromSlash(mine))
	for _, name := range []string{"alias", "null", "disk"} {
		if _, err := os.Lstat(filepath.Join(sdir, name)); err == nil {
			t.Errorf("%s exists in the store after a refused attempt", name)
		}
	}
	// What the user created is theirs: nothing root's with a set-id bit.
	for _, name := range []string{"suid-mknod", "suid-create", "sgid", "fifo", "own"} {
		if err := unix.Lstat(filepath.Join(sdir, name), &st); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fmt.Sprint(st.Uid) != nobodyUID {
			t.Errorf("%s: owner %d, want %s (mode %o)", name, st.Uid, nobodyUID, st.Mode)
		}
	}
	fd, err := unix.Open(filepath.Join(sdir, "own"), unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		t.Fatal(err)
	}
	flags, ferr := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	unix.Close(fd)
	if ferr == nil && flags&0x40 != 0 {
		t.Errorf("the no-dump flag was set on the user's file through the mount (flags %#x)", flags)
	}
	for _, x := range []string{"user.ckguard.state", "security.evil", "security.capability", "trusted.evil"} {
		if _, err := unix.Lgetxattr(filepath.Join(sdir, "own"), x, make([]byte, 256)); err == nil {
			t.Errorf("xattr %s set on the user's file through the mount", x)
		}
	}
	if fi, err := os.Stat(qsock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("quarantine socket %s: %v %v, want mode 0600", qsock, fi, err)
	}
	if _, err := os.ReadDir(p.mnt); err != nil {
		t.Fatalf("the mount does not answer after the attempts: %v\n%s", err, p.logText())
	}
}
