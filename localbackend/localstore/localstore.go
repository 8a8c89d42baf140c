// Package localstore implements store.Store for a local directory (also an NFS export or a fuse-dfs
// mount of HDFS used as a local directory).
package localstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/store"
)

// Store is a directory tree seen as a store. Symlinks are reported as objects and never followed (by Walk,
// Stat or Open, neither at the name nor on the way), so a link cannot pull an outside tree into the guarded store.
type Store struct {
	root  string // absolute, cleaned, symlinks of the root itself resolved
	given string // absolute and cleaned as given (symlinks not resolved)
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.RootAliaser = (*Store)(nil)
)

// New opens dir as a store. dir must exist and be a directory.
func New(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("local store %s: %w", dir, err)
	}
	given := abs
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("local store %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("local store %s: not a directory", dir)
	}
	return &Store{root: abs, given: given}, nil
}

// RootAliases returns the directory as given when it differs from Root (a path through a symlink):
// Flink wrote its references through that path (see store.RootAliaser).
func (s *Store) RootAliases() []string {
	if s.given == s.root {
		return nil
	}
	return []string{s.given}
}

// Root returns the absolute directory of the store.
func (s *Store) Root() string { return s.root }

// OSPath returns the local file name of key.
func (s *Store) OSPath(key string) (string, error) {
	k, err := store.CleanKey(key)
	if err != nil {
		return "", err
	}
	return s.osPath(k), nil
}

// osPath joins a clean key to the root (clean too, so no filepath.Join needed).
func (s *Store) osPath(k string) string {
	switch {
	case k == "":
		return s.root
	case s.root == "/":
		return "/" + filepath.FromSlash(k)
	}
	return s.root + "/" + filepath.FromSlash(k)
}

// Stat describes key without following a symlink, neither the final name nor a folder on the way: a
// folder replaced by a symlink makes the key unreachable (an error naming the symlink), as Walk, which
// reports the link itself, and Open see it. Following it would describe a file outside the store, or one
// that no read of the store reaches, to the decision and to verify.
func (s *Store) Stat(ctx context.Context, key string) (store.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return store.ObjectInfo{}, err
	}
	k, err := store.CleanKey(key)
	if err != nil {
		return store.ObjectInfo{}, err
	}
	p := s.osPath(k)
	var st unix.Stat_t
	if err := s.lstatNoSymlinks(k, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return store.ObjectInfo{}, store.NotExist("stat", k)
		}
		if err == unix.EXDEV {
			return store.ObjectInfo{}, fmt.Errorf("stat %s: %w", k, s.mountedErr(k))
		}
		if err == unix.ELOOP {
			return store.ObjectInfo{}, fmt.Errorf("stat %s: a folder on the way is a symlink (the store's files are reached through real folders only; replace the link by the folder): %w", k, &fs.PathError{Op: "lstat", Path: p, Err: err})
		}
		return store.ObjectInfo{}, fmt.Errorf("stat %s: %w", k, &fs.PathError{Op: "lstat", Path: p, Err: err})
	}
	return InfoFromStat(k, &st), nil
}

// lstatNoSymlinks is lstat(2) of key k (clean) beneath the root through no symlink
// (openat2 O_PATH|O_NOFOLLOW, RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, which opens a final symlink itself;
// in chunks below PATH_MAX, so a key of any length is reached: fdwalk.go), into a stack buffer: Stat is
// on the path of every guarded unlink.
func (s *Store) lstatNoSymlinks(k string, st *unix.Stat_t) error {
	if k == "" {
		return retryEINTR(func() error { return unix.Lstat(s.root, st) })
	}
	rfd, err := s.rootFd(unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	fd, err := openBeneath(rfd, k, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fstat(fd, st)
}

// retryEINTR calls f again while it is interrupted (NFS).
func retryEINTR(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}

// InfoFromStat describes key from its lstat(2) result, as Stat does.
func InfoFromStat(key string, st *unix.Stat_t) store.ObjectInfo {
	ft := st.Mode & unix.S_IFMT
	oi := store.ObjectInfo{Path: key, ModTime: time.Unix(st.Mtim.Unix()), IsDir: ft == unix.S_IFDIR, Special: ft != unix.S_IFDIR && ft != unix.S_IFREG,
		UID: st.Uid, HasUID: true, Perm: st.Mode & 0o7777}
	if !oi.IsDir {
		oi.Size = st.Size
	}
	return oi
}

type reader struct {
	*os.File
	size int64
	at   unix.Stat_t // the open file's fstat when opened
}

func (r reader) Size() int64 { return r.size }

// Changed reports whether the open file's size, mtime or ctime (to the nanosecond) differ from when it
// was opened: it was written, truncated or had its times set meanwhile (store.ChangeReporter), so what
// was read may be a mix of two contents.
func (r reader) Changed() (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(r.Fd()), &st); err != nil {
		return false, err
	}
	return st.Size != r.at.Size || st.Mtim != r.at.Mtim || st.Ctim != r.at.Ctim, nil
}

// Open opens a regular file for reading.
func (s *Store) Open(ctx context.Context, key string) (store.Reader, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k, err := store.CleanKey(key)
	if err != nil {
		return nil, err
	}
	// Non-blocking: a FIFO swapped in after a stat must not hang the reader (the index reads under its
	// write lock, a mount under its exclusive lock). Through no symlink at all: the readers run as root
	// (the mount's sync, verify --read, the metadata history, which keeps a copy that restore-metadata
	// writes back world-readable), and a user who can write a job folder could otherwise swap a folder
	// on the way for a link to a directory only root may read.
	f, err := s.openNoSymlinks(k, os.O_RDONLY|syscall.O_NONBLOCK)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, store.NotExist("open", k)
		}
		return nil, fmt.Errorf("open %s: %w", k, err)
	}
	var at unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &at); err != nil {
		f.Close()
		return nil, fmt.Errorf("open %s: %w", k, &fs.PathError{Op: "fstat", Path: s.osPath(k), Err: err})
	}
	if at.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("open %s: not a regular file (mode %#o)", k, at.Mode&unix.S_IFMT)
	}
	return reader{File: f, size: at.Size, at: at}, nil
}

// OpenInode opens the regular file at key beneath the root, through no symlink on the way or at the
// name, read-only and without blocking (O_RDONLY|O_NONBLOCK|O_NOFOLLOW: an O_PATH descriptor cannot
// take an ioctl), for a change of the inode's own attributes (the immutable flag). Anything but a
// regular file is refused: a FIFO or device swapped in is never opened for more than the check.
func (s *Store) OpenInode(key string) (*os.File, error) {
	k, err := store.CleanKey(key)
	if err != nil {
		return nil, err
	}
	f, err := s.openNoSymlinks(k, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, store.NotExist("open", k)
		}
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("open %s: %w", k, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("open %s: not a regular file (mode %#o)", k, st.Mode&unix.S_IFMT)
	}
	return f, nil
}

// openNoSymlinks opens key k (clean) beneath the root without following a symlink on the way or at
// the name (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, in chunks below PATH_MAX: fdwalk.go).
func (s *Store) openNoSymlinks(k string, flags int) (*os.File, error) {
	p := s.osPath(k)
	rfd, err := s.rootFd(unix.O_PATH)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: s.root, Err: err}
	}
	defer unix.Close(rfd)
	fd, err := openBeneath(rfd, k, flags)
	if err == unix.EXDEV {
		return nil, &fs.PathError{Op: "open", Path: p, Err: s.mountedErr(k)}
	}
	if err == unix.ELOOP {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fmt.Errorf("a symlink on the way (the store's files are read through real folders only): %w", err)}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// Walk reports every file and directory strictly below prefix, walking by descriptors (fdwalk.go):
// no path length limit, no symlink followed. A missing prefix is not an error (an S3 prefix with no
// objects does not exist either). A folder or entry that cannot be read is an unknown subtree
// (store.ReportUnknown).
func (s *Store) Walk(ctx context.Context, prefix string, fn func(store.ObjectInfo) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k, err := store.CleanKey(prefix)
	if err != nil {
		return err
	}
	return s.walkFd(ctx, k, fn, false)
}

// ListMetadata reports every regular file named `_metadata` below the root.
func (s *Store) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.walkFd(ctx, "", fn, true)
}

// String is for logs.
func (s *Store) String() string { return "local:" + s.root }
