package localquarantine

import (
	"context"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// Restore moves the entry's object back to its original key (creating the folders on the way mode 0700, given the
// object's owner when this process is root) with renameat2(RENAME_NOREPLACE): whatever is at the key
// now is never replaced (ErrOccupied). The record goes after the move.
func (l *Local) Restore(ctx context.Context, id string) (quarantine.Entry, error) {
	if err := l.lock(); err != nil {
		return quarantine.Entry{}, err
	}
	defer l.mu.RUnlock()
	e, err := l.entry(id)
	if err != nil {
		return quarantine.Entry{}, err
	}
	if err := l.restore(e); err != nil {
		return quarantine.Entry{}, err
	}
	l.forget(e.ID)
	return e, nil
}

func (l *Local) restore(e quarantine.Entry) error {
	key, err := quarantine.RestoreKey(e)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(l.dir, e.ID, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
		return quarantine.AlreadyGone(key, e.ID)
	} else if err != nil {
		return fmt.Errorf("restore /%s: %w", key, err)
	}
	dir, name := path.Split(key)
	pfd, err := l.mkdirs(strings.TrimSuffix(dir, "/"), int(st.Uid), int(st.Gid))
	if err != nil {
		return fmt.Errorf("restore /%s: create its folder: %w", key, err)
	}
	defer func() {
		if pfd != l.root {
			unix.Close(pfd)
		}
	}()
	err = l.renameNoReplace(l.dir, e.ID, pfd, name)
	if err == unix.EINVAL {
		// No renameat2 flags on this filesystem: a hard link fails on an existing name, then the
		// quarantine name goes.
		if err = unix.Linkat(l.dir, e.ID, pfd, name, 0); err == nil {
			err = unix.Unlinkat(l.dir, e.ID, 0)
		}
	}
	if err != nil && l.taken(e.ID, pfd, name) {
		return quarantine.AlreadyGone(key, e.ID)
	}
	if err == unix.EEXIST {
		return quarantine.Occupied(key, e.ID)
	}
	if err != nil {
		return fmt.Errorf("restore /%s: %w", key, err)
	}
	// The record stays until Tidy: without its object it is no entry.
	return nil
}

// taken reports whether another restore (or a purge) took the entry id while this one moved it: its
// object is gone from the folder, or is the very file at the key (another restore linked it there and
// has not yet removed its quarantine name, on a filesystem without renameat2 flags).
func (l *Local) taken(id string, pfd int, name string) bool {
	var obj, at unix.Stat_t
	if err := unix.Fstatat(l.dir, id, &obj, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err == unix.ENOENT
	}
	return unix.Fstatat(pfd, name, &at, unix.AT_SYMLINK_NOFOLLOW) == nil && at.Dev == obj.Dev && at.Ino == obj.Ino
}

// mkdirs opens folder key beneath the root, creating what is missing, never following a symlink. A
// created folder is mode 0700 and, when this process is root, owned by the restored object's owner
// (uid/gid): the area keeps no record of the folders' modes, and the folder the object sat in may have
// been 0700, so a folder made any more open would let every user read what its owner had shut away. The
// owner can open it up again with chmod.
// newFolderMode is the mode of a folder a restore creates (see mkdirs).
const newFolderMode = 0o700

func (l *Local) mkdirs(key string, uid, gid int) (int, error) {
	fd := l.root
	if key == "" {
		return fd, nil
	}
	for _, seg := range strings.Split(key, "/") {
		nfd, err := unix.Openat(fd, seg, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT {
			if merr := unix.Mkdirat(fd, seg, newFolderMode); merr != nil && merr != unix.EEXIST {
				err = merr
			} else {
				nfd, err = unix.Openat(fd, seg, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err == nil && merr == nil && os.Geteuid() == 0 {
					giveFolder(nfd, uid, gid)
				}
			}
		}
		if fd != l.root {
			unix.Close(fd)
		}
		if err != nil {
			return -1, fmt.Errorf("%s: %w", seg, err)
		}
		fd = nfd
	}
	return fd, nil
}

// giveFolder gives the folder a restore just created (open as fd) to the restored object's owner. It
// acts on the descriptor, never by name: a user writing in the parent could swap the new name for a
// hard link or another folder between the mkdir and the chown, and root must not chown that. A folder
// that is not root's (another one renamed in meanwhile) is left as it is.
func giveFolder(fd, uid, gid int) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Uid != 0 {
		return
	}
	_ = unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH)
}
