package integration

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestUnprivCreateWhenChownFails: a root daemon that cannot give a new file to its creator (a
// root-squashing NFS export; here: a root daemon without CAP_CHOWN) must not leave it the daemon's. An
// unprivileged user creating a set-uid file through the --allow-other mount would otherwise hold, open
// for writing, a set-uid program of the daemon's user. Every creation kind is refused and leaves nothing
// in the store.
func TestUnprivCreateWhenChownFails(t *testing.T) {
	mntRequire(t)
	base, tr := unprivStore(t, "ckguard-unpriv-chown-")
	open := filepath.Join(tr.Root, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	p := sharedProc(t, base, tr.Root)
	p.wrap = []string{"setpriv", "--bounding-set", "-chown", "--inh-caps", "-chown", "--"}
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
