package s3mount_test

import (
	"os"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestIoctlsRefused: no ioctl reaches anything through the S3 mount, on a read handle or on a write handle
// (whose data lives in a spool file of the daemon's): a filesystem-wide one (FITRIM) and a harmless read of
// the flags both get ENOTTY, as on a file without ioctls.
func TestIoctlsRefused(t *testing.T) {
	e := setup(t, newChecker(), nil)
	e.put(t, "job/shared/a.sst", "data")
	ioctl := func(f *os.File, cmd uintptr) syscall.Errno {
		var buf [64]byte
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), cmd, uintptr(unsafe.Pointer(&buf[0])))
		return errno
	}
	r, err := os.Open(e.path("job/shared/a.sst"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	e.put(t, "job/shared/b.sst", "data")
	w, err := os.OpenFile(e.path("job/shared/b.sst"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, c := range []struct {
		name string
		f    *os.File
		cmd  uintptr
	}{
		{"FITRIM on a read handle", r, 0xc0185879},
		{"FITRIM on a write handle", w, 0xc0185879},
		{"FS_IOC_GETFLAGS on a read handle", r, unix.FS_IOC_GETFLAGS},
		{"FS_IOC_GETFLAGS on a write handle", w, unix.FS_IOC_GETFLAGS},
	} {
		if errno := ioctl(c.f, c.cmd); errno != syscall.ENOTTY {
			t.Errorf("%s: errno %d (%v), want ENOTTY", c.name, errno, errno)
		}
	}
}
