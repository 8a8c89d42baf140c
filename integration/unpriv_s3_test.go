package integration

import (
	"context"
	"os"
	"path"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestUnprivS3QuarantineMount attacks the quarantine area of an --allow-other S3 mount (root's, with
// --quarantine) on versitygw. As an unprivileged user: the area is not listed and no spelling of it
// reaches it (trailing slash, "..", the entry's own name); nothing can be created, renamed, deleted or
// tagged anywhere (S3 objects are the mount owner's, and the kernel checks every caller against that).
// As the mount's owner, the only user who can write: no name makes or enters the area, while names that
// only look like it (case, a zero-width space, the same name in a subfolder) are ordinary keys and
// stay visible. Afterwards the area holds exactly what the mount staged.
func TestUnprivS3QuarantineMount(t *testing.T) {
	e := s3Start(t)
	tr := e.tree(t, incident{"IncidentTwo", treegen.IncidentTwo}, s3Root)
	base, err := os.MkdirTemp("", "ckguard-unpriv-s3-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	p := sharedMount(t, base, s3Root, e.mountArgs("--quarantine", "24h", "--grace", "0s")...)
	// Something staged, so the area has entries to find.
	mntRun(t, "", "rm", "-rf", p.m(tr.Purge))
	deadline := time.Now().Add(2 * time.Minute)
	// The staging follows in the delete queue's rounds: wait until the count holds still.
	var es []string
	for prev := -1; ; {
		es = es[:0]
		for _, en := range qList(t, p) {
			es = append(es, en.ID)
		}
		if len(es) > 0 && len(es) == prev || time.Now().After(deadline) {
			break
		}
		prev = len(es)
		time.Sleep(time.Second)
	}
	if len(es) == 0 {
		t.Fatalf("nothing staged by rm -rf %s", tr.Purge)
	}
	c := e.client(t, e.srv.Endpoint)
	areaKeys := func() []string {
		var ks []string
		for _, k := range e.keys(t) {
			if store.InQuarantine(strings.TrimPrefix(k, s3Prefix+"/")) {
				ks = append(ks, k)
			}
		}
		return ks
	}
	before := areaKeys()
	if len(before) == 0 {
		t.Fatalf("no keys below %s on the server", store.QuarantineDir)
	}
	ref := ""
	for _, r := range tr.Referenced() {
		if _, err := os.Lstat(p.m(r)); err == nil {
			ref = r
			break
		}
	}
	if ref == "" {
		t.Fatal("no referenced file left")
	}

	script := `m, qdir, entry, ref = sys.argv[1:5]
M = lambda rel: os.path.join(m, rel)
print("listed", int(qdir in os.listdir(m)))
attempt("stat", lambda: os.stat(M(qdir)))
attempt("stat-slash", lambda: os.stat(M(qdir) + "/"))
attempt("stat-dotdot", lambda: os.stat(M(os.path.dirname(ref) + "/../" * ref.count("/") + qdir)))
attempt("stat-entry", lambda: os.stat(M(qdir + "/" + entry)))
attempt("read-entry", lambda: open(M(qdir + "/" + entry)).read())
attempt("mkdir-area", lambda: os.mkdir(M(qdir)))
attempt("create-in-area", lambda: open(M(qdir + "/planted"), "x").close())
attempt("create-root", lambda: open(M("planted"), "x").close())
attempt("mkdir-upper", lambda: os.mkdir(M(qdir.upper())))
attempt("rename-ref", lambda: os.rename(M(ref), M(qdir)))
attempt("unlink-ref", lambda: os.unlink(M(ref)))
attempt("open-write-ref", lambda: os.close(os.open(M(ref), os.O_WRONLY)))
attempt("truncate-ref", lambda: os.truncate(M(ref), 0))
attempt("xattr-ref", lambda: os.setxattr(M(ref), "user.ckguard.state", b"deletable"))
attempt("read-ref", lambda: open(M(ref), "rb").read())
`
	got := unprivAttempts(t, script, p.mnt, store.QuarantineDir, es[0], ref)
	t.Logf("as uid %s (errno or OK): %v", nobodyUID, got)
	expect := map[string]string{
		"listed": "0", "stat": errnoOf(syscall.ENOENT), "stat-slash": errnoOf(syscall.ENOENT), "stat-dotdot": errnoOf(syscall.ENOENT),
		"stat-entry": errnoOf(syscall.ENOENT), "read-entry": errnoOf(syscall.ENOENT),
		"mkdir-area": errnoOf(syscall.EACCES), "create-in-area": errnoOf(syscall.ENOENT), "create-root": errnoOf(syscall.EACCES),
		"mkdir-upper": errnoOf(syscall.EACCES), "rename-ref": errnoOf(syscall.EACCES), "unlink-ref": errnoOf(syscall.EACCES),
		"open-write-ref": errnoOf(syscall.EACCES), "truncate-ref": errnoOf(syscall.EACCES), "xattr-ref": errnoOf(syscall.EACCES),
		"read-ref": "OK", // objects read as 0644: reading is what the mount is for
	}
	for k, v := range expect {
		if got[k] != v {
			t.Errorf("%s as uid %s: %q, want %s", k, nobodyUID, got[k], v)
		}
	}

	// As the mount's owner (root here).
	rootScript := `m, qdir, entry = sys.argv[1:4]
M = lambda rel: os.path.join(m, rel)
open(M("victim"), "w").write("v")
attempt("mkdir-area", lambda: os.mkdir(M(qdir)))
attempt("create-area", lambda: open(M(qdir), "x").close())
attempt("create-in-area", lambda: open(M(qdir + "/" + entry), "x").close())
attempt("rename-into-area", lambda: os.rename(M("victim"), M(qdir + "/" + entry)))
attempt("rename-onto-area", lambda: os.rename(M("victim"), M(qdir)))
attempt("symlink-area", lambda: os.symlink("victim", M(qdir)))
attempt("mkdir-upper", lambda: os.mkdir(M(qdir.upper())))
attempt("mkdir-zwsp", lambda: os.mkdir(M(qdir + "\u200b")))
attempt("mkdir-nested", lambda: os.mkdir(M("victimdir")) or os.mkdir(M("victimdir/" + qdir)))
attempt("create-long", lambda: open(M("x" * 255), "x").close())
attempt("create-too-long", lambda: open(M("x" * 256), "x").close())
names = os.listdir(m)
print("listed-upper", int(qdir.upper() in names))
print("listed-zwsp", int(qdir + "\u200b" in names))
print("listed-nested", int(qdir in os.listdir(M("victimdir"))))
`
	out, code := mntRun(t, "", "/usr/bin/python3", "-c", unprivPrelude+rootScript, p.mnt, store.QuarantineDir, es[0])
	if code != 0 {
		t.Fatalf("python as root: exit %d\n%s", code, out)
	}
	got = parseAttempts(out)
	t.Logf("as the mount's owner (errno or OK): %v", got)
	expect = map[string]string{
		"mkdir-area": errnoOf(syscall.EPERM), "create-area": errnoOf(syscall.EPERM), "create-in-area": errnoOf(syscall.ENOENT),
		"rename-into-area": errnoOf(syscall.ENOENT), "rename-onto-area": errnoOf(syscall.EPERM), "symlink-area": "",
		"mkdir-upper": "OK", "mkdir-zwsp": "OK", "mkdir-nested": "OK", "create-long": "OK",
		"listed-upper": "1", "listed-zwsp": "1", "listed-nested": "1",
	}
	for k, v := range expect {
		if v == "" {
			if got[k] == "OK" {
				t.Errorf("%s as the mount's owner succeeded", k)
			}
			continue
		}
		if got[k] != v {
			t.Errorf("%s as the mount's owner: %q, want %s", k, got[k], v)
		}
	}
	// A 256-byte name is a legal S3 key, but the mount makes none longer than NAME_MAX.
	if got["create-too-long"] != errnoOf(syscall.ENAMETOOLONG) {
		t.Errorf("create of a 256-byte name as the mount's owner: %q, want %s", got["create-too-long"], errnoOf(syscall.ENAMETOOLONG))
	}
	after := areaKeys()
	if strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("the area changed through the attempts:\nbefore %v\nafter  %v", before, after)
	}
	// The look-alike names are ordinary keys on the server, outside the area.
	ctx := context.Background()
	for _, k := range []string{strings.ToUpper(store.QuarantineDir) + "/", store.QuarantineDir + "\u200b/", path.Join("victimdir", store.QuarantineDir) + "/"} {
		if _, err := c.Head(ctx, k); err != nil {
			t.Errorf("look-alike folder marker %q not on the server: %v", k, err)
		}
	}
	if b, err := os.ReadFile(p.m(ref)); err != nil || len(b) == 0 {
		t.Errorf("referenced %s: %v", ref, err)
	}
}

// unprivPrelude is the attempt() helper of the Python scripts.
const unprivPrelude = `import os, sys, fcntl, struct, socket
def attempt(name, f):
    try:
        f()
        print(name, "OK")
    except OSError as e:
        print(name, e.errno)
`
