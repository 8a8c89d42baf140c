package localstore

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/store"
)

// CreateExclusive writes data at key only if nothing is there, with modification time mtime and, when
// uid is set, that owner (the checkpoint's, so it competes with its job's other checkpoints as before).
// The file is written under a temporary name and linked into place, so a crash never leaves a torn file
// at key and an existing one is never replaced (link(2) fails with EEXIST).
//
// The daemon or the operator running this is normally root, in folders other users may write. So the
// folders on the way are opened one by one beneath the store root without following any symlink (a
// symlink anywhere on the way, even one pointing inside the store, fails the restore: it would put a
// checkpoint's `_metadata` into another job's folder), and the new file's owner and times are set
// through its own descriptor, never by name: a name swapped meanwhile cannot make root chown or
// backdate another file. The file linked into place is checked to be the one written.
func (s *Store) CreateExclusive(ctx context.Context, key string, data []byte, mtime time.Time, uid *uint32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k, err := store.CleanKey(key)
	if err != nil {
		return err
	}
	if k == "" {
		return fmt.Errorf("create %q: %w", key, store.ErrInvalidPath)
	}
	rfd, err := unix.Open(s.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("create %s: open the store root %s: %w", k, s.root, err)
	}
	defer unix.Close(rfd)
	dir, name := path.Split(k)
	dfd, err := mkdirsBeneath(rfd, strings.TrimSuffix(dir, "/"))
	if err != nil {
		return fmt.Errorf("create %s: its folder (a symlink on the way is refused: the restore writes only into real folders of the store): %w", k, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		return fmt.Errorf("create %s: %w", k, fs.ErrExist)
	}
	tmp := fmt.Sprintf(".ckguard-restore-%d-%d", os.Getpid(), time.Now().UnixNano())
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", k, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	defer f.Close()
	defer unix.Unlinkat(dfd, tmp, 0)
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err == nil && uid != nil {
		err = unix.Fchown(fd, int(*uid), -1)
	}
	if err == nil {
		err = futimens(fd, mtime)
	}
	var want unix.Stat_t
	if err == nil {
		err = unix.Fstat(fd, &want)
	}
	if err == nil {
		err = unix.Linkat(dfd, tmp, dfd, name, 0)
	}
	if err == unix.EEXIST {
		return fmt.Errorf("create %s: %w: never overwritten", k, fs.ErrExist)
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", k, err)
	}
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Dev != want.Dev || st.Ino != want.Ino {
		return fmt.Errorf("create %s: the file linked into place is not the one written (its temporary name %s was replaced meanwhile by someone writing in that folder); check the file at %s and restore again after removing it", k, tmp, k)
	}
	return nil
}

// mkdirsBeneath opens (O_PATH) folder key below the directory rfd, creating missing folders (mode 0755),
// one segment at a time, never following a symlink.
func mkdirsBeneath(rfd int, key string) (int, error) {
	fd, err := unix.FcntlInt(uintptr(rfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil || key == "" {
		return fd, err
	}
	for _, seg := range strings.Split(key, "/") {
		nfd, err := unix.Openat(fd, seg, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT {
			if err = unix.Mkdirat(fd, seg, 0o755); err == nil || err == unix.EEXIST {
				nfd, err = unix.Openat(fd, seg, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("%s: %w", seg, err)
		}
		fd = nfd
	}
	return fd, nil
}

// futimens sets the access and modification times of the open file fd to t (utimensat with no path
// acts on the descriptor itself).
func futimens(fd int, t time.Time) error {
	ts := [2]unix.Timespec{unix.NsecToTimespec(t.UnixNano()), unix.NsecToTimespec(t.UnixNano())}
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
