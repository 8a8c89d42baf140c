package localfs

import (
	"context"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

var _ fs.NodeIoctler = (*node)(nil)

// iocRead is the direction field of an _IOR command on this architecture (FS_IOC_GETFLAGS is one).
const iocRead = unix.FS_IOC_GETFLAGS &^ 0x1fffffff

// fsIocFsgetxattr is FS_IOC_FSGETXATTR, _IOR('X', 31, struct fsxattr) (28 bytes); x/sys/unix lacks it.
const fsIocFsgetxattr = iocRead | 28<<16 | 'X'<<8 | 31

// readOnlyIoctls are the only ioctls the mount passes on to the store, with the size of what each writes:
// they read a file's attribute flags (lsattr, and the kernel's own fileattr calls), change nothing, and
// take no argument but the buffer the daemon supplies.
var readOnlyIoctls = map[uint32]int{
	unix.FS_IOC_GETFLAGS: 4, // the kernel's fileattr path and ext4 both use an int, whatever the command's size says
	fsIocFsgetxattr:      28,
}

// Ioctl refuses every ioctl (ENOTTY, as for a file that has none) except readOnlyIoctls. go-fuse's loopback
// passes any ioctl on to the store's file, run with the daemon's rights (often root) and undecided: FITRIM
// or EXT4_IOC_SHUTDOWN against the store's whole filesystem, EXT4_IOC_MOVE_EXT with a donor descriptor
// number resolved in the daemon's own descriptor table, and whatever a filesystem adds later. An allowed
// one runs on the handle's own descriptor with a buffer of the daemon's; nothing of the caller's argument
// but the output size reaches the store.
func (n *node) Ioctl(ctx context.Context, f fs.FileHandle, cmd uint32, arg uint64, input []byte, output []byte) (int32, syscall.Errno) {
	size, ok := readOnlyIoctls[cmd]
	if !ok {
		return 0, syscall.ENOTTY
	}
	fd, ok := handleFd(f)
	if !ok {
		return 0, syscall.ENOTTY
	}
	var buf [32]byte // room for every allowed ioctl's output
	res, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(cmd), uintptr(unsafe.Pointer(&buf[0])))
	if errno != 0 {
		return 0, errno
	}
	copy(output, buf[:min(size, len(output))])
	return int32(res), 0
}

// handleFd is the store descriptor behind a handle the mount made (none for a handle it did not).
func handleFd(f fs.FileHandle) (int, bool) {
	switch h := f.(type) {
	case *fs.LoopbackFile:
		return h.PassthroughFd()
	case *file:
		return h.PassthroughFd()
	case *orderedDir:
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.fd, h.fd >= 0
	}
	return -1, false
}
