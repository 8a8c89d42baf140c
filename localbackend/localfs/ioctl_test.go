package localfs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctlScript opens argv[1] (read-write) and issues the ioctls named in argv[2:] on it, printing a JSON
// object name -> errno (0: it succeeded) and, for getflags, the flags read.
const ioctlScript = `
import fcntl, json, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
donor = os.open(sys.argv[1], os.O_RDWR)
out = {}
def call(name, cmd, buf):
    try:
        fcntl.ioctl(fd, cmd, buf, True)
        out[name] = 0
    except OSError as e:
        out[name] = e.errno
    return buf
for name in sys.argv[2:]:
    if name == "fitrim":  # _IOWR('X', 121, struct fstrim_range {u64 start, len, minlen})
        call(name, 0xc0185879, bytearray(struct.pack("QQQ", 0, 2**64 - 1, 0)))
    elif name == "move_ext":  # _IOWR('f', 15, struct move_extent): donor fd numbers of the daemon's table
        for d in range(3, 64):
            call(name, 0xc028660f, bytearray(struct.pack("IIQQQQ", 0, d, 0, 0, 1, 0)))
            if out[name] == 0:
                break
    elif name == "getflags":  # FS_IOC_GETFLAGS
        buf = call(name, 0x80086601, bytearray(8))
        out["flags"] = struct.unpack("I", bytes(buf[:4]))[0]
    elif name == "shutdown":  # EXT4_IOC_SHUTDOWN, _IOR('X', 125, __u32); 2 = EXT4_GOING_FLAGS_NOLOGFLUSH
        call(name, 0x8004587d, bytearray(struct.pack("I", 2)))
print(json.dumps(out))
`

// TestIoctlsRefused: an unprivileged user with a file of theirs open through a shared mount cannot make the
// daemon run filesystem ioctls with root's rights (the store is on an ext4 image of the test's own): FITRIM
// and EXT4_IOC_SHUTDOWN (which needs CAP_SYS_ADMIN directly) and EXT4_IOC_MOVE_EXT (whose donor is a
// descriptor number the daemon would resolve in its own table) fail through the mount, and the store's
// filesystem keeps working. Reading the file's flags (lsattr's FS_IOC_GETFLAGS) still works and reads
// the store file's own flags.
func TestIoctlsRefused(t *testing.T) {
	store := ext4Store(t)
	e := mountShared(t, store)
	own := filepath.Join(store, "own.sst")
	if err := os.WriteFile(own, make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	// A file the daemon holds open on the same filesystem (another writer's): a donor MOVE_EXT could reach.
	other, err := os.OpenFile(filepath.Join(e.mnt, "other.sst"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otherData := make([]byte, 64<<10)
	for i := range otherData {
		otherData[i] = 'o'
	}
	if _, err := other.Write(otherData); err != nil {
		t.Fatal(err)
	}
	if err := other.Sync(); err != nil {
		t.Fatal(err)
	}

	out, err := asNobody(t, "/usr/bin/python3", "-c", ioctlScript, filepath.Join(e.mnt, "own.sst"), "getflags", "fitrim", "move_ext", "shutdown")
	if err != nil {
		t.Fatalf("ioctl helper: %v\n%s", err, out)
	}
	var got map[string]int
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("ioctl helper output %q: %v", out, err)
	}
	for _, name := range []string{"fitrim", "move_ext", "shutdown"} {
		if got[name] != int(syscall.ENOTTY) {
			t.Errorf("%s through the mount as uid %s: errno %d (%v), want ENOTTY", name, nobody, got[name], syscall.Errno(got[name]))
		}
	}
	if got["getflags"] != 0 {
		t.Errorf("FS_IOC_GETFLAGS through the mount: errno %d (%v), want it to work", got["getflags"], syscall.Errno(got["getflags"]))
	}
	if want := storeFlags(t, own); got["flags"] != int(want) {
		t.Errorf("FS_IOC_GETFLAGS through the mount = %#x, the store file's flags are %#x", got["flags"], want)
	}

	// The store's filesystem was not shut down, and no data moved between files.
	if err := os.WriteFile(filepath.Join(store, "after"), []byte("still writable"), 0o644); err != nil {
		t.Errorf("the store's filesystem after the ioctls: %v", err)
	}
	back, err := os.ReadFile(filepath.Join(store, "other.sst"))
	if err != nil || string(back) != string(otherData) {
		t.Errorf("another writer's file after MOVE_EXT attempts: %v (changed: %v)", err, string(back) != string(otherData))
	}
}

func storeFlags(t *testing.T, p string) uint32 {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var flags uint32
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.FS_IOC_GETFLAGS, uintptr(unsafe.Pointer(&flags))); errno != 0 {
		t.Fatalf("FS_IOC_GETFLAGS on %s: %v", p, errno)
	}
	return flags
}
