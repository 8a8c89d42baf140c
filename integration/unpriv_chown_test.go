package integration

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestUnprivCreateWhenChownFails: a root daemon that cannot give a new file to its creator (a
// root-squashing NFS export; here: a root daemon without CAP_CHOWN) must not leave it the daemon's. An
// unprivileged user creating a set-uid file through the --allow-other mount would otherwise hold, open
// for writing, a set-uid program of the daemon's user. Every creation kind is refused and leaves nothing
// in the store.
func TestUnprivCreateWhenChownFails(t *testing.T) {
	mntRequire(t)
	base, err := os.MkdirTemp("", "ckguard-unpriv-chown-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	tr, err := treegen.IncidentTwo(filepath.Join(base, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(tr.Root, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o700); err != nil {
		t.Fatal(err)
	}
	mdir, err := os.MkdirTemp("", "ckguard-unpriv-chown-mnt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(mdir) })
	if err := os.Chmod(mdir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &mntProc{t: t, store: tr.Root, index: filepath.Join(base, "index"), mnt: filepath.Join(mdir, "mnt"),
		log: filepath.Join(base, "mount.log"), wrap: []string{"setpriv", "--bounding-set", "-chown", "--inh-caps", "-chown", "--"}}
	p.audit, p.sock = filepath.Join(p.index, "audit.jsonl"), filepath.Join(p.index, "ckguard.sock")
	if err := os.Mkdir(p.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	p.start("--allow-other")
	script := `m = sys.argv[1]
M = lambda rel: os.path.join(m, "open", rel)
def create():
    fd = os.open(M("suid"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o4755)
    os.write(fd, b"#!/bin/sh\n")
    os.close(fd)
attempt("create", create)
attempt("mknod", lambda: os.mknod(M("suid-mknod"), 0o104755))
attempt("mkdir", lambda: os.mkdir(M("dir"), 0o2777))
attempt("symlink", lambda: os.symlink("x", M("link")))
attempt("mkfifo", lambda: os.mkfifo(M("fifo")))
`
	got := unprivAttempts(t, script, p.mnt)
	t.Logf("as uid %s (errno or OK): %v", nobodyUID, got)
	for _, k := range []string{"create", "mknod", "mkdir", "symlink", "mkfifo"} {
		if got[k] != errnoOf(syscall.EPERM) {
			t.Errorf("%s as uid %s with a daemon that cannot chown: %q, want EPERM", k, nobodyUID, got[k])
		}
	}
	ents, err := os.ReadDir(open)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, _ := e.Info()
		t.Errorf("left in the store: %s (mode %v, %v)", e.Name(), fi.Mode(), fi.Sys())
	}
	// The daemon's own user still creates as before.
	if err := os.WriteFile(p.m("open/roots"), []byte("r"), 0o644); err != nil {
		t.Errorf("root creating through the mount: %v", err)
	}
}
