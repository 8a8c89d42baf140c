package localfs

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStoreRoot covers storeRoot's resolution directly, with openat2 and with the pre-5.6 fallback: keys
// below the root work, the root itself works, and a symlink at the final name is never followed.
func TestStoreRoot(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		t.Run("fallback="+strconv.FormatBool(fallback), func(t *testing.T) {
			dir := t.TempDir()
			outside := t.TempDir()
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
			must(os.WriteFile(filepath.Join(dir, "a/b/f"), []byte("f"), 0o644))
			must(os.WriteFile(filepath.Join(outside, "v"), []byte("v"), 0o644))
			must(os.Symlink(filepath.Join(outside, "v"), filepath.Join(dir, "a/ln")))
			sys := unix.Openat2
			if fallback {
				sys = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
			}
			r, err := openStoreRootWith(dir, slog.Default(), sys)
			must(err)
			defer r.close()
			if r.noOpenat2 != fallback {
				t.Fatalf("noOpenat2 = %v after the probe, want %v", r.noOpenat2, fallback)
			}

			fd, err := r.open("a/b/f", unix.O_RDONLY, 0)
			must(err)
			unix.Close(fd)
			fd, err = r.open("", unix.O_RDONLY|unix.O_DIRECTORY, 0)
			must(err)
			unix.Close(fd)
			if _, err := r.open("a/ln", unix.O_WRONLY|unix.O_TRUNC, 0); !errors.Is(err, unix.ELOOP) {
				t.Errorf("open of a final symlink: %v, want ELOOP", err)
			}
			var st syscall.Stat_t
			must(r.lstat("a/ln", &st))
			if st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
				t.Errorf("lstat followed the symlink: mode %o", st.Mode)
			}
			must(r.rename("a/b/f", "g", 0))
			must(r.rename("g", "a/g", unix.RENAME_NOREPLACE))
			must(r.rename("a/g", "a/h", 0)) // within one folder: one descriptor
			must(r.rename("a/h", "top", 0))
			must(r.rename("top", "top2", unix.RENAME_NOREPLACE)) // within the root
			if _, err := os.Stat(filepath.Join(dir, "top2")); err != nil {
				t.Errorf("renames within the root: %v", err)
			}
			must(r.remove("top2", 0))
			must(r.remove("a/ln", 0))
			must(r.remove("a/b", unix.AT_REMOVEDIR))
			if b, err := os.ReadFile(filepath.Join(outside, "v")); err != nil || string(b) != "v" {
				t.Errorf("outside file: %q %v", b, err)
			}
			if ents, _ := os.ReadDir(filepath.Join(dir, "a")); len(ents) != 0 {
				t.Errorf("left in a/: %v", ents)
			}
		})
	}
}

// BenchmarkStoreRootRemove is the daemon's own work per unlink (the part issue 4's rm -rf target pays on
// top of go-fuse's loopback): open the parent beneath the root, unlinkat, close.
func BenchmarkStoreRootRemove(b *testing.B) {
	dir := b.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "job/shared/d000"), 0o755); err != nil {
		b.Fatal(err)
	}
	r, err := openStoreRoot(dir, slog.Default())
	if err != nil {
		b.Fatal(err)
	}
	defer r.close()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		k := "job/shared/d000/f" + strconv.Itoa(i)
		fd, err := unix.Open(filepath.Join(dir, k), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
		b.StartTimer()
		if err := r.remove(k, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// TestOpenat2Probe: openat2 is probed once when the mount starts. ENOSYS there selects the
// path fallback and says so in the log; EPERM (a seccomp profile) refuses to start with the reason; and
// after a successful probe an ENOSYS from one call (a FUSE backing filesystem can answer one open with it)
// is that call's error, never a switch to the symlink-following fallback for the rest of the mount.
func TestOpenat2Probe(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "a/ln")); err != nil {
		t.Fatal(err)
	}
	failing := func(errno unix.Errno) func(int, string, *unix.OpenHow) (int, error) {
		return func(int, string, *unix.OpenHow) (int, error) { return -1, errno }
	}

	t.Run("ENOSYS at startup", func(t *testing.T) {
		var logs bytes.Buffer
		r, err := openStoreRootWith(dir, slog.New(slog.NewTextHandler(&logs, nil)), failing(unix.ENOSYS))
		if err != nil {
			t.Fatal(err)
		}
		defer r.close()
		if !r.noOpenat2 || !strings.Contains(logs.String(), "no openat2") {
			t.Errorf("fallback %v, log %q: want the fallback, logged at startup", r.noOpenat2, logs.String())
		}
		fd, err := r.dir("a/b")
		if err != nil {
			t.Fatalf("fallback open: %v", err)
		}
		r.release(fd)
	})

	t.Run("EPERM at startup", func(t *testing.T) {
		r, err := openStoreRootWith(dir, slog.Default(), failing(unix.EPERM))
		if err == nil {
			r.close()
			t.Fatal("started although openat2 is blocked")
		}
		if !strings.Contains(err.Error(), "seccomp") || !strings.Contains(err.Error(), dir) {
			t.Errorf("error %q should name the store and the seccomp profile", err)
		}
	})

	t.Run("ENOSYS at runtime", func(t *testing.T) {
		var fail atomic.Bool
		sys := func(dirfd int, p string, how *unix.OpenHow) (int, error) {
			if fail.Load() {
				return -1, unix.ENOSYS
			}
			return unix.Openat2(dirfd, p, how)
		}
		r, err := openStoreRootWith(dir, slog.Default(), sys)
		if err != nil {
			t.Fatal(err)
		}
		defer r.close()
		fail.Store(true)
		if fd, err := r.dir("a/b"); err != unix.ENOSYS {
			r.release(fd)
			t.Fatalf("open while openat2 answers ENOSYS: %v, want ENOSYS (fail closed)", err)
		}
		fail.Store(false)
		if r.noOpenat2 {
			t.Fatal("one ENOSYS switched the mount to the fallback")
		}
		// Still resolved without symlinks: the fallback would follow a/ln into outside.
		if fd, err := r.dir("a/ln"); !errors.Is(err, unix.ELOOP) {
			r.release(fd)
			t.Errorf("open through a symlinked folder after a runtime ENOSYS: %v, want ELOOP", err)
		}
	})
}

// BenchmarkStoreRootCurrent is the replaced-store check as every unlink pays it: the cached
// answer (an atomic load and a monotonic clock read) and, separately, the stat of the store path and the
// comparison it makes at most once per rootCheckInterval. Per unlink it costs the first plus the second
// divided by the unlinks in one interval.
func BenchmarkStoreRootCurrent(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "var/lib/flink/checkpoints")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	r, err := openStoreRoot(dir, slog.Default())
	if err != nil {
		b.Fatal(err)
	}
	defer r.close()
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if err := r.current(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stat", func(b *testing.B) {
		for b.Loop() {
			if err := r.compare(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestOpenRegularNeverOpensADevice: a device swapped into the store where the kernel still knows a
// regular file is refused (ESTALE) without the daemon opening it: a device's open can act (rewind a
// tape, take a terminal), and the daemon would do it with its rights. inotify's IN_OPEN shows an open.
func TestOpenRegularNeverOpensADevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod of a device needs root")
	}
	dir := t.TempDir()
	dev := filepath.Join(dir, "f")
	if err := unix.Mknod(dev, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil { // /dev/null's numbers
		t.Skipf("mknod: %v", err)
	}
	r, err := openStoreRoot(dir, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if !r.procFd {
		t.Skip("no /proc/self/fd: openRegular falls back to opening and checking after")
	}
	in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, dev, unix.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	for _, flags := range []int{unix.O_RDONLY, unix.O_WRONLY, unix.O_RDWR | unix.O_TRUNC} {
		if fd, err := r.openRegular("f", flags); err != unix.ESTALE {
			if err == nil {
				unix.Close(fd)
			}
			t.Errorf("openRegular(device, %#x) = %v, want ESTALE", flags, err)
		}
	}
	buf := make([]byte, 4096)
	if n, err := unix.Read(in, buf); err != unix.EAGAIN {
		t.Errorf("the device was opened by openRegular (inotify read %d bytes, %v)", n, err)
	}
	// The watch itself works: an open of the device is seen.
	fd, err := unix.Open(dev, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if n, err := unix.Read(in, buf); err != nil || n == 0 {
		t.Errorf("inotify did not see a real open of the device (%d, %v): the check above proves nothing", n, err)
	}
}
