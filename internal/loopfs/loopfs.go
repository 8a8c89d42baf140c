// Package loopfs gives tests a real, small filesystem of their own: an ext4 image under the system's
// temp folder, loop-mounted for the test and unmounted and removed by t.Cleanup. It exists for what a
// test cannot get from the machine's own /tmp: a filesystem that fills up (a full store, the
// quarantine's space bound) and one whose inode flags are known (FS_IMMUTABLE_FL; Ramfs gives one without them).
//
// Ext4 needs root (mount(2), a loop device) and mkfs.ext4 (Debian e2fsprogs, installed by
// scripts/setup.sh); without them the test is skipped, saying which is missing. Any other failure
// fails the test: a harness that skips on errors would hide a broken setup as green.
package loopfs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultSize is the image size when Options.Size is 0.
const DefaultSize = 64 << 20

// Options shape the filesystem.
type Options struct {
	// Size of the image in bytes (0: DefaultSize; at least 8 MiB).
	Size int64
	// Reserved is the share of blocks reserved for root, in percent (mkfs.ext4 -m; 0 by default, so
	// statfs's free and available agree and a test's "near full" means what it says).
	Reserved int
	// Prefix names the temp folder (the test's branch or package, for whoever finds it left over).
	Prefix string
}

// Ext4 makes an ext4 image of o.Size, mounts it and returns its mountpoint (an empty filesystem but
// for lost+found, mode 0755, owned by root). It is unmounted (lazily if still busy) and its image
// removed when the test ends.
func Ext4(t testing.TB, o Options) string {
	t.Helper()
	Require(t)
	if o.Size == 0 {
		o.Size = DefaultSize
	}
	if o.Size < 8<<20 {
		t.Fatalf("loopfs: an image of %d bytes is too small for ext4 with a journal (at least 8 MiB)", o.Size)
	}
	if o.Prefix == "" {
		o.Prefix = "ckguard-loopfs-"
	}
	base, err := os.MkdirTemp("", o.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	img, mnt := filepath.Join(base, "ext4.img"), filepath.Join(base, "mnt")
	t.Cleanup(func() { _ = os.RemoveAll(base) }) // runs last: after the unmount below
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(o.Size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("loopfs: image %s: %v", img, err)
	}
	// No lazy init: the kernel thread that zeroes inode tables afterwards would write behind the test's
	// back and make free-space figures drift.
	run(t, "mkfs.ext4", "-q", "-F", "-m", fmt.Sprint(o.Reserved), "-E", "lazy_itable_init=0,lazy_journal_init=0", img)
	run(t, "mount", "-o", "loop", img, mnt)
	t.Cleanup(func() { Unmount(t, mnt) })
	return mnt
}

// Unmount unmounts mnt; a filesystem still busy (a process the test left behind) is detached lazily
// so the loop device is freed once it lets go, and the test is failed for the leak.
func Unmount(t testing.TB, mnt string) {
	t.Helper()
	var err error
	for range 20 {
		if err = unix.Unmount(mnt, 0); err == nil || err == unix.EINVAL {
			return // EINVAL: not mounted (any more)
		}
		if err != unix.EBUSY {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if lerr := unix.Unmount(mnt, unix.MNT_DETACH); lerr != nil && lerr != unix.EINVAL {
		t.Errorf("loopfs: unmount %s: %v (lazy unmount: %v); the loop device stays attached", mnt, err, lerr)
		return
	}
	t.Errorf("loopfs: %s was still busy at the end of the test (%v): detached lazily", mnt, err)
}

// Require skips t unless a loop-mounted filesystem can be made here: root, mkfs.ext4 and a loop
// device (or /dev/loop-control to get one).
func Require(t testing.TB) {
	t.Helper()
	if reason := Unavailable(); reason != "" {
		t.Skipf("loopfs: no loop-mounted ext4 for this test: %s", reason)
	}
}

// Unavailable says why no loop-mounted ext4 can be made ("" when it can).
func Unavailable() string {
	if os.Geteuid() != 0 {
		return "not root (mount(2) and loop devices need root; run the test as root, e.g. in CI's container)"
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		return "mkfs.ext4 not found (Debian package e2fsprogs: scripts/setup.sh test)"
	}
	if _, err := exec.LookPath("mount"); err != nil {
		return "mount(8) not found (util-linux)"
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		if m, _ := filepath.Glob("/dev/loop[0-9]*"); len(m) == 0 {
			return "no loop devices (/dev/loop-control missing: load the loop module, or give the container the loop devices)"
		}
	}
	return ""
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("loopfs: %s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
}

// Ramfs mounts a ramfs for the test (a filesystem without inode flags: FS_IOC_GETFLAGS fails with
// ENOTTY; tmpfs has FS_IMMUTABLE_FL since Linux 6.0) and unmounts it when the test ends. Root only.
func Ramfs(t testing.TB, prefix string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loopfs: a ramfs of the test's own needs root")
	}
	base, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := unix.Mount("ramfs", base, "ramfs", 0, "mode=0755"); err != nil {
		t.Fatalf("loopfs: mount ramfs on %s: %v", base, err)
	}
	t.Cleanup(func() { Unmount(t, base) })
	return base
}
