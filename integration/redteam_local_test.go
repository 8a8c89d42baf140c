package integration

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// TestRedteamLocalQuarantineOddFiles: an unprivileged user on an --allow-other local mount served by
// root with the quarantine on stages what they may change in their own folder, and nothing of it costs
// the store's filesystem more than the user's own files do or stalls the quarantine:
//   - a sparse file of 512 MiB holding a few bytes, truncated to 0: its staged copy keeps the holes (a
//     dense copy would let `truncate -s 10T f; : > f` make root fill the filesystem);
//   - a fifo and a socket deleted, also under 255-byte names: staged as they are, listed (nothing opens
//     them, so nothing blocks on the fifo), and restored;
//   - a hard link of their own file: deleting one name stages it; the remaining name, which shares its
//     content with the staged entry, is then refused a truncation (two names).
func TestRedteamLocalQuarantineOddFiles(t *testing.T) {
	mntRequire(t)
	base, tr := unprivStore(t, "ckguard-redteam-odd-")
	nobodyOwns(t, tr.Root)
	p := sharedMount(t, base, tr.Root, "--grace", "0s") // the user's files are young
	mine := path.Join(tr.Purge, "mallory")
	long := strings.Repeat("L", 251)
	script := `m, mine, long = sys.argv[1:4]
M = lambda rel: os.path.join(m, mine, rel)
os.mkdir(os.path.join(m, mine))
with open(M("sparse"), "w") as f:
    f.write("x")
os.truncate(M("sparse"), 512 << 20)
attempt("truncate-sparse", lambda: os.truncate(M("sparse"), 0))
os.mkfifo(M("fifo"))
os.mkfifo(M(long + "fifo"))
os.chdir(M("."))
for name in ("sock", "sock2"):
    s = socket.socket(socket.AF_UNIX)
    s.bind(name)
    s.close()
attempt("rename-sock-long", lambda: os.rename("sock2", long + "sock")) # bind takes at most 107 bytes
attempt("rm-fifo", lambda: os.unlink(M("fifo")))
attempt("rm-fifo-long", lambda: os.unlink(M(long + "fifo")))
attempt("rm-sock", lambda: os.unlink(M("sock")))
attempt("rm-sock-long", lambda: os.unlink(M(long + "sock")))
open(M("a"), "w").write("content shared by two names")
attempt("link", lambda: os.link(M("a"), M("b")))
attempt("rm-link", lambda: os.unlink(M("b")))
attempt("truncate-other-name", lambda: os.truncate(M("a"), 0))
`
	got := unprivAttempts(t, script, p.mnt, mine, long)
	t.Logf("results (errno or OK): %v", got)
	for k, v := range map[string]string{
		"truncate-sparse": "OK", "rm-fifo": "OK", "rm-fifo-long": "OK", "rm-sock": "OK", "rm-sock-long": "OK",
		"rename-sock-long": "OK", "link": "OK", "rm-link": "OK", "truncate-other-name": errnoOf(syscall.EPERM),
	} {
		if got[k] != v {
			t.Errorf("%s as uid %s: %q, want %s", k, nobodyUID, got[k], v)
		}
	}

	// As root: the quarantine's files take about the space of what was staged.
	qdir := filepath.Join(tr.Root, store.QuarantineDir)
	names, err := os.ReadDir(qdir)
	if err != nil {
		t.Fatal(err)
	}
	var blocks int64
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(qdir, n.Name()), &st); err != nil {
			t.Fatal(err)
		}
		blocks += st.Blocks
	}
	if blocks*512 > 4<<20 {
		t.Errorf("the quarantine takes %d KiB after staging a sparse file of 512 MiB with 1 byte in it (and a few empty files)", blocks/2)
	}
	es := qList(t, p) // returns: no entry is opened, a fifo blocks nothing
	byPath := map[string]quarantine.Entry{}
	for _, e := range es {
		byPath[e.Path] = e
	}
	if e, ok := byPath[mine+"/sparse"]; !ok || e.Change() != quarantine.OpTruncate || e.Size != 512<<20 {
		t.Errorf("staged sparse file: %+v (present %v), want a truncate entry of 512 MiB", e, ok)
	}
	for _, name := range []string{"fifo", long + "fifo", "sock", long + "sock", "b"} {
		if _, ok := byPath[mine+"/"+name]; !ok {
			t.Errorf("%s not staged (entries %d)", name, len(es))
		}
	}
	for _, name := range []string{"fifo", long + "fifo", "sock"} {
		if out, code := qcli(p, "restore", mine+"/"+name); code != 0 {
			t.Errorf("restore %s: exit %d\n%s", name, code, out)
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(tr.Root, mine, name), &st); err != nil || st.Mode&unix.S_IFMT == unix.S_IFREG {
			t.Errorf("restored %s: %v, mode %o, want it back as it was", name, err, st.Mode)
		}
	}
	if _, err := os.ReadDir(p.m(mine)); err != nil {
		t.Fatalf("the mount does not answer after the attempts: %v\n%s", err, p.logText())
	}
}
