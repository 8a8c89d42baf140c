//go:build hdfs

package hdfsguardd_test

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestAllowOtherUnprivilegedUser: the daemon mounts as root with allow_other and acts on HDFS as one
// principal for every local user, so nothing an unprivileged user (nobody) asks through the mount may go
// beyond the guard's decision: on a store whose HDFS modes let anyone write (777), nobody deletes an
// unreferenced file but not a referenced one, cannot rename over a referenced file, truncate or rewrite
// it, set flags on it by ioctl, set the guard's or any other xattr, or create special files, symlinks or
// hard links; what HDFS holds afterwards is exactly the tree less the one deleted file.
func TestAllowOtherUnprivilegedUser(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the daemon mounts with allow_other and the test switches to nobody")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)

	c := minidfs.Start(t, minidfs.Options{})
	storeDir := c.Root() + "/store"
	tr, err := treegen.IncidentTwo(t.TempDir(), time.Now(), treegen.Options{URIPrefix: c.URI(storeDir)})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-30 * 24 * time.Hour)
	stray, stray2 := tr.Purge+"/taskowned/stray-a", tr.Purge+"/taskowned/stray-b"
	for _, k := range []string{stray, stray2} {
		if err := tr.Write(k, 64, old); err != nil {
			t.Fatal(err)
		}
	}
	c.Upload(t, tr.Root, storeDir)
	if _, err := c.DFS(t, "-chmod", "-R", "777", storeDir); err != nil {
		t.Fatal(err)
	}
	uri := c.URI(storeDir)
	before := hdfsFiles(t, uri)

	var referenced string
	for _, f := range tr.Survivors(tr.Purge, treegen.DefaultPolicy) {
		if strings.Contains(f, "/shared/") && slices.Contains(tr.Referenced(), f) {
			referenced = f
			break
		}
	}
	if referenced == "" {
		t.Fatal("no referenced shared file in the old job's folder")
	}

	dir := t.TempDir()
	// nobody must reach the mountpoint: t.TempDir's folders are 0700.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mnt, stop := guardMount(t, dir, guardd.Config{StoreDir: uri, Policy: refindex.DefaultPolicy(), AllowOther: true}, opts)
	defer stop()

	m := func(k string) string { return filepath.Join(mnt, k) }
	asNobody := func(name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		cmd.Dir = "/"
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	py := func(code string, args ...string) (string, error) {
		return asNobody("/usr/bin/python3", append([]string{"-c", code}, args...)...)
	}

	// allow_other works: nobody lists and reads through the mount.
	if out, err := asNobody("cat", m(referenced)); err != nil {
		t.Fatalf("nobody reads %s through the mount: %v %s", referenced, err, out)
	}

	refused := []struct {
		name string
		run  func() (string, error)
	}{
		{"unlink a referenced file", func() (string, error) { return asNobody("rm", "-f", m(referenced)) }},
		{"rename over a referenced file", func() (string, error) { return asNobody("mv", "-f", m(stray2), m(referenced)) }},
		{"rename a referenced file away", func() (string, error) { return asNobody("mv", m(referenced), m(tr.Purge+"/taskowned/moved")) }},
		{"truncate a referenced file", func() (string, error) { return asNobody("truncate", "-s", "0", m(referenced)) }},
		{"open a referenced file with O_TRUNC", func() (string, error) {
			return py(`import os, sys; os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC)`, m(referenced))
		}},
		{"overwrite a referenced file in place", func() (string, error) {
			return py(`import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
os.write(fd, b"x")
os.fsync(fd)`, m(referenced))
		}},
		{"ioctl: set the immutable flag", func() (string, error) { return asNobody("chattr", "+i", m(referenced)) }},
		{"ioctl on a read-only descriptor: FS_IOC_SETFLAGS append-only", func() (string, error) {
			return py(`import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.ioctl(fd, 0x40086602, struct.pack("l", 0x20))`, m(referenced))
		}},
		{"ioctl on a read-only descriptor: FICLONE into a referenced file", func() (string, error) {
			return py(`import fcntl, os, sys
src = os.open(sys.argv[2], os.O_RDONLY)
dst = os.open(sys.argv[1], os.O_RDONLY)
fcntl.ioctl(dst, 0x40049409, src)`, m(referenced), m(stray2))
		}},
		{"set the guard's xattr", func() (string, error) {
			return py(`import os, sys; os.setxattr(sys.argv[1], "user.ckguard.state", b"orphan")`, m(referenced))
		}},
		{"set another xattr", func() (string, error) {
			return py(`import os, sys; os.setxattr(sys.argv[1], "user.x", b"1")`, m(referenced))
		}},
		{"backdate a file (mtime decides the grace period)", func() (string, error) {
			return asNobody("touch", "-d", "2001-01-01", m(referenced))
		}},
		{"mkfifo", func() (string, error) { return asNobody("mkfifo", m(tr.Purge+"/fifo")) }},
		{"unix socket", func() (string, error) {
			return py(`import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])`, m(tr.Purge+"/sock"))
		}},
		{"symlink", func() (string, error) { return asNobody("ln", "-s", "/etc/shadow", m(tr.Purge+"/link")) }},
		{"hard link to a referenced file", func() (string, error) { return asNobody("ln", m(referenced), m(tr.Purge+"/hard")) }},
		{"chmod a file", func() (string, error) { return asNobody("chmod", "000", m(referenced)) }},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			out, err := tc.run()
			if err == nil {
				t.Errorf("nobody succeeded: %s", out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			t.Logf("refused: %v: %s", err, lines[len(lines)-1])
		})
	}
	if out, err := asNobody("rm", "-f", m(stray)); err != nil {
		t.Errorf("nobody could not delete the unreferenced %s: %v %s", stray, err, out)
	}
	stop()

	after := hdfsFiles(t, uri)
	var want []string
	for _, k := range before {
		if k != storeDir && k != stray {
			want = append(want, k)
		}
	}
	if strings.Join(after, "\n") != strings.Join(want, "\n") {
		t.Errorf("HDFS after nobody's requests:\n%s\nwant the tree less %s:\n%s", strings.Join(after, "\n"), stray, strings.Join(want, "\n"))
	}
	st, err := c.DFS(t, "-stat", "%b", storeDir+"/"+referenced)
	if err != nil {
		t.Fatal(err)
	}
	if size := strings.TrimSpace(st); size != strconv.FormatInt(tr.Files[referenced].Size, 10) {
		t.Errorf("%s is %s bytes on HDFS, want %d", referenced, size, tr.Files[referenced].Size)
	}
}
