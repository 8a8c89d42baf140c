//go:build hdfs

package hdfsmount_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsmount"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
)

// redteamMount mounts a fresh folder of a real MiniDFSCluster with --allow-other at a mountpoint
// nobody can reach, and returns the mountpoint, the client beside the mount and the folder.
func redteamMount(t *testing.T, o minidfs.Options, ck *guardtest.Checker, quarantined bool) (string, *hdfsclient.Client, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the daemon mounts with allow_other and the test switches to nobody")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv")
	}
	c := minidfs.Start(t, o)
	root := c.Root() + dir
	cl, _ := c.DialSuperuser(t, root)
	if err := cl.MkdirAll(context.Background(), root, 0o777); err != nil {
		t.Fatal(err)
	}
	enf, mnt := redteamEnforcerAndMountpoint(t, ck)
	mo := hdfsmount.Options{FS: cl, Dir: root, Name: c.URI(root), Mountpoint: mnt, Enforcer: enf, AllowOther: true}
	if quarantined {
		a, err := hdfsquarantine.Open(context.Background(), cl, root, nil)
		if err != nil {
			t.Fatal(err)
		}
		mo.Quarantine = a
	}
	m, err := hdfsmount.Mount(context.Background(), mo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			_ = exec.Command("fusermount3", "-uz", mnt).Run()
		}
	})
	return mnt, cl, root
}

// sockets counts the sockets this process (the daemon) holds open.
func sockets(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// TestRedteamOpenStormHoldsNoDataNodeConnections: an unprivileged user of an --allow-other HDFS mount
// opens many files and reads one byte of each, keeping them open. The daemon must not hold a DataNode
// connection per open file in between reads: every such connection is a transfer thread on the
// DataNode (dfs.datanode.max.transfer.threads, 4096 by default, kept up to the DataNode's 8-minute
// write timeout), so a user could otherwise starve the checkpoints being written of transfer threads.
func TestRedteamOpenStormHoldsNoDataNodeConnections(t *testing.T) {
	const files = 60
	mnt, cl, root := redteamMount(t, minidfs.Options{}, guardtest.New(), false)
	for i := range files {
		minidfs.WriteFile(t, cl, fmt.Sprintf("%s/job/f%02d", root, i), strings.Repeat("x", 256<<10))
	}
	before := sockets(t)
	script := `import os, sys
fds = [os.open(os.path.join(sys.argv[1], "job", "f%02d" % i), os.O_RDONLY) for i in range(int(sys.argv[2]))]
for fd in fds:
    assert os.pread(fd, 1, 4096) == b"x"
print("ready", flush=True)
sys.stdin.read()
`
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "/usr/bin/python3", "-c", script, mnt, fmt.Sprint(files))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("nobody's reader: %q %v", line, err)
	}
	held := sockets(t) - before
	t.Logf("%d files open and read one byte each by nobody: the daemon holds %d more sockets", files, held)
	if held > files/10 {
		t.Errorf("the daemon holds %d more sockets with %d files open and read one byte each, want at most %d (no DataNode connection kept per open file)", held, files, files/10)
	}
	stdin.Close()
	if _, err := io.Copy(io.Discard, stdout); err != nil {
		t.Fatal(err)
	}
}

// TestRedteamUnlinkOfFileReplacedByFolder: the kernel still knows a name as a file, and the directory's
// last listing (under 2 s old, which an unlink's decision may use) says so, when beside the mount the
// file is replaced by a folder holding files. With the HDFS trash or a quarantine an allowed unlink is a
// rename of the name; it must never move that folder away with everything in it (the index judges an
// unlink for the one file, not for a tree: a file a live checkpoint references could be in it). The
// unlink is decided on what the name is now, a folder, and fails as one (EISDIR).
func TestRedteamUnlinkOfFileReplacedByFolder(t *testing.T) {
	for _, tc := range []struct {
		name        string
		o           minidfs.Options
		quarantined bool
	}{
		{"trash", minidfs.Options{TrashInterval: time.Hour}, false},
		{"quarantine", minidfs.Options{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mnt, cl, root := redteamMount(t, tc.o, guardtest.New(), tc.quarantined)
			minidfs.WriteFile(t, cl, root+"/job/f", "an unreferenced file")
			minidfs.WriteFile(t, cl, root+"/job/other", "x")
			// A listing through the mount fills the attribute cache; the kernel learns f as a file.
			if _, err := os.ReadDir(filepath.Join(mnt, "job")); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Lstat(filepath.Join(mnt, "job", "f")); err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("f through the mount: %v %v", fi, err)
			}
			// Beside the mount: f becomes a folder holding a file.
			if err := cl.Remove(ctx, root+"/job/f"); err != nil {
				t.Fatal(err)
			}
			minidfs.WriteFile(t, cl, root+"/job/f/inner", "inner")
			err := syscall.Unlink(filepath.Join(mnt, "job", "f"))
			t.Logf("unlink of the name that became a folder: %v", err)
			if b, ok := (realStore{c: cl, root: root}).Get(t, "job/f/inner"); !ok || b != "inner" {
				t.Fatalf("the file in the folder that replaced the file: %q %v (unlink answered %v)", b, ok, err)
			}
			if !errors.Is(err, syscall.EISDIR) {
				t.Errorf("unlink of a name that is a folder: %v, want EISDIR", err)
			}
		})
	}
}
