package localhold

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// fsImmutableFL is FS_IMMUTABLE_FL (linux/fs.h; golang.org/x/sys does not name it), read and written
// through FS_IOC_GETFLAGS/FS_IOC_SETFLAGS: the ioctls take a pointer to an int (the
// kernel reads and writes 32 bits, whatever the ioctl number says).
const fsImmutableFL = 0x00000010

// flags reads the inode flags of the file open as fd.
func flags(fd int) (int, error) {
	v, err := unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return 0, fmt.Errorf("FS_IOC_GETFLAGS: %w", err)
	}
	return v, nil
}

// setImmutable sets or clears FS_IMMUTABLE_FL on the file open as fd, leaving every other flag as it
// is; changed reports whether the flag was different before.
func setImmutable(fd int, on bool) (changed bool, err error) {
	v, err := flags(fd)
	if err != nil {
		return false, err
	}
	want := v &^ fsImmutableFL
	if on {
		want = v | fsImmutableFL
	}
	if want == v {
		return false, nil
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, want); err != nil {
		return false, fmt.Errorf("FS_IOC_SETFLAGS: %w", err)
	}
	return true, nil
}

// Immutable reports whether the file open as f has FS_IMMUTABLE_FL (for tests and `hold status`).
func Immutable(f *os.File) (bool, error) {
	v, err := flags(int(f.Fd()))
	return v&fsImmutableFL != 0, err
}

// Probe checks that the immutable flag works in dir (the store root) for this process: a file made
// there (unnamed where the filesystem can: O_TMPFILE), the flag set, read back and cleared, the file
// removed. NFS, ramfs and FUSE filesystems (tmpfs before Linux 6.0) refuse the ioctl (ENOTTY, EOPNOTSUPP, EINVAL); a process
// without CAP_LINUX_IMMUTABLE gets EPERM. The error says which and what to do.
func Probe(dir string) error {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	name := ""
	if err != nil {
		name = filepath.Join(dir, ".ckguard-immutable-probe."+strconv.Itoa(os.Getpid()))
		_ = unix.Unlink(name)
		fd, err = unix.Open(name, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("create a probe file in %s: %w", dir, err)
		}
	}
	defer func() {
		_, _ = setImmutable(fd, false)
		unix.Close(fd)
		if name != "" {
			_ = unix.Unlink(name)
		}
	}()
	if _, err := setImmutable(fd, true); err != nil {
		return explain(dir, err)
	}
	v, err := flags(fd)
	if err != nil {
		return explain(dir, err)
	}
	if v&fsImmutableFL == 0 {
		return fmt.Errorf("the filesystem of %s accepted FS_IMMUTABLE_FL but does not report it set: it cannot protect files", dir)
	}
	if _, err := setImmutable(fd, false); err != nil {
		return fmt.Errorf("clear the immutable flag of the probe file in %s: %w", dir, err)
	}
	return nil
}

func explain(dir string, err error) error {
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("setting the immutable flag in %s was refused (%w): the mount needs CAP_LINUX_IMMUTABLE (run it as root, or grant it with CAP_FOWNER and CAP_DAC_READ_SEARCH for files of other users: AmbientCapabilities=CAP_LINUX_IMMUTABLE CAP_FOWNER CAP_DAC_READ_SEARCH)", dir, err)
	case errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		var st unix.Statfs_t
		kind := ""
		if unix.Statfs(dir, &st) == nil {
			kind = fmt.Sprintf(" (filesystem type %#x)", st.Type)
		}
		return fmt.Errorf("the filesystem of %s%s has no immutable flag (%w): ext4, XFS, btrfs (and tmpfs since Linux 6.0) have it; NFS, ramfs and FUSE filesystems do not", dir, kind, err)
	}
	return fmt.Errorf("probe the immutable flag in %s: %w", dir, err)
}
