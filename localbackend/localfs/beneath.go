package localfs

import (
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/localbackend/localquarantine"
)

// storeRoot is the store directory, held open for the whole life of the mount, and the one place that
// turns store keys into descriptors.
//
// Every namespace change of the mount (unlink, rmdir, rename, link, create, mkdir, mknod, symlink) and every
// open acts through a descriptor of the parent folder opened beneath this root with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS), then the *at system call on the final name. By absolute path
// the kernel would follow a symlink that someone with direct write access to the store swapped in for a
// folder after the kernel looked the folder up (and after the guard decided about the key): the daemon, often
// root, would then create, write, rename or remove outside the store, or a file elsewhere in the store that
// no decision covered. The kernel resolves the mount's own symlinks itself, so a key handed to
// the daemon never legitimately crosses one: a symlink on the way is refused (ELOOP), an escape too (EXDEV).
//
// Parent descriptors are opened per request and closed at its end, never cached: a cached descriptor would
// follow a folder moved in the store directly and keep acting on it under its old key.
//
// On kernels without openat2 (before 5.6) it falls back to paths below the root, which follow symlinks as
// go-fuse's loopback does. Which of the two applies is probed once, when the mount starts (see
// openStoreRoot), never changed at runtime.
type storeRoot struct {
	path string
	fd   int // O_PATH|O_DIRECTORY of path, closed by close
	// noOpenat2 is set once by the startup probe (the kernel lacks openat2) and only read afterwards.
	noOpenat2 bool
	// sysOpenat2 is unix.Openat2 (tests inject failures).
	sysOpenat2 func(dirfd int, path string, how *unix.OpenHow) (int, error)
	procFd     bool // /proc/self/fd/N reaches the descriptor's file (see onFile)
	closeOnce  sync.Once

	// dev and ino identify the directory fd names; current compares them with what path names now.
	dev, ino uint64
	log      *slog.Logger
	start    time.Time                 // monotonic base of rootCheck.at
	checked  atomic.Pointer[rootCheck] // the last comparison
	// quarantine, when set, receives every file an allowed unlink removes (see removeFile).
	quarantine *localquarantine.Local
}

// rootCheckInterval is how long one comparison of the store path with the root descriptor is trusted. A
// stat of the path costs about a microsecond (more on NFS), as much as a tenth of the daemon's work per
// unlink; once per interval it is a few nanoseconds per operation, even for rm -rf at 100,000 unlinks/s.
// The price is the window: a change acts on the old directory when it comes at most this long after the
// store directory was replaced and after a comparison that still saw the old one.
const rootCheckInterval = 10 * time.Millisecond

// rootCheck is one comparison of the store path with the root descriptor.
type rootCheck struct {
	at  time.Duration // since storeRoot.start
	err *storeChangedError
}

// storeChangedError refuses every operation acting through the root descriptor once the store path no
// longer names the directory the mount started on (or cannot be checked).
type storeChangedError struct {
	msg string
	// replaced: the path names another directory (final: the mount must restart); otherwise stat of the
	// path failed, and the next comparison may clear it.
	replaced bool
}

func (e *storeChangedError) Error() string { return e.msg }

// Unwrap maps the refusal to EIO wherever an errno is made of it (fs.ToErrno): the operation did not
// happen, and the store, not the caller, is at fault.
func (e *storeChangedError) Unwrap() error { return syscall.EIO }

const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openStoreRoot opens the store directory. The store path itself may be (or cross) a symlink: that is the
// operator's choice, made once here.
func openStoreRoot(dir string, log *slog.Logger) (*storeRoot, error) {
	return openStoreRootWith(dir, log, unix.Openat2)
}

// openStoreRootWith is openStoreRoot with the openat2 system call given (tests inject ENOSYS and EPERM).
//
// It probes openat2 once, on the root itself with the flags every later call uses: ENOSYS (Linux before
// 5.6) selects the path fallback for the mount's whole life, logged here; EPERM means a seccomp profile
// (older Docker and container runtime defaults) blocks the call, and the mount refuses to start rather than
// fail every operation with EPERM and no hint, or silently drop the protection. After the probe, an error
// from openat2 (ENOSYS included: a FUSE backend such as fuse-dfs can answer one open with it) is returned
// to the caller, never taken as a reason to fall back.
func openStoreRootWith(dir string, log *slog.Logger, sysOpenat2 func(int, string, *unix.OpenHow) (int, error)) (*storeRoot, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open store root", Path: dir, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat store root", Path: dir, Err: err}
	}
	r := &storeRoot{path: dir, fd: fd, sysOpenat2: sysOpenat2, dev: uint64(st.Dev), ino: uint64(st.Ino), log: log, start: time.Now()}
	r.checked.Store(&rootCheck{})
	r.procFd = unix.Stat(procFdPath(fd), &st) == nil
	pfd, err := r.sysOpenat2(fd, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveBeneath})
	switch err {
	case nil:
		unix.Close(pfd)
	case unix.ENOSYS:
		r.noOpenat2 = true
		log.Warn("the kernel has no openat2 (Linux before 5.6): operations that change the store resolve their path below the store directory and follow symlinks on the way; upgrade the kernel for the resolution beneath the store root without symlinks", "store", dir)
	case unix.EPERM:
		unix.Close(fd)
		return nil, fmt.Errorf("openat2 on the store directory %s is not permitted (%v): a seccomp profile (a container runtime's default) blocks the openat2 system call, which the guard needs to act beneath the store root without following symlinks; allow openat2 (syscall 437) in the profile, or run on the host", dir, err)
	default:
		unix.Close(fd)
		return nil, &os.PathError{Op: "openat2 probe of store root", Path: dir, Err: err}
	}
	return r, nil
}

// current returns nil while the store path still names the directory the root descriptor holds, and a
// *storeChangedError (EIO) once it does not: the directory at the path was replaced (`mv store store.old
// && mkdir store`, a restore tool) or something was mounted over it (an NFS or bind mount that appeared
// after the daemon started, a remount). The index reads the store by path, and go-fuse looks names up by
// path, while every change acts through the descriptor: after such a swap decisions would be taken about
// the new directory and the changes they allow made in the old one. So every change through
// the descriptor is refused from then on, and the mount must be restarted. A stat error of the path
// refuses too, until a later comparison succeeds.
//
// Every resolution beneath the root (dir, open, onFile) passes here; the comparison runs at most once per
// rootCheckInterval, so the steady cost is an atomic load and a monotonic clock read.
func (r *storeRoot) current() error {
	c := r.checked.Load()
	if c.err != nil && c.err.replaced {
		return c.err
	}
	now := time.Since(r.start)
	if now-c.at < rootCheckInterval && c.at != 0 {
		if c.err != nil {
			return c.err
		}
		return nil
	}
	next := &rootCheck{at: now, err: r.compare()}
	if r.checked.CompareAndSwap(c, next) && next.err != nil && (c.err == nil || c.err.msg != next.err.msg) {
		// Logged when it starts or changes, not for every refused operation (rm -rf would repeat it
		// thousands of times); decided operations also carry it in their audit records.
		r.log.Error("refusing every change to the store: "+next.err.msg, "store", r.path)
	}
	if next.err != nil {
		return next.err
	}
	return nil
}

// compare stats the store path (following symlinks, as the open at startup did) and compares it with the
// root descriptor's directory.
func (r *storeRoot) compare() *storeChangedError {
	var st unix.Stat_t
	if err := unix.Stat(r.path, &st); err != nil {
		return &storeChangedError{msg: "cannot stat the store directory " + r.path + " (" + err.Error() +
			") to check that it is still the directory the mount started on; refusing changes until it can"}
	}
	if uint64(st.Dev) == r.dev && uint64(st.Ino) == r.ino {
		return nil
	}
	return &storeChangedError{replaced: true, msg: fmt.Sprintf("the store directory %s was replaced or mounted over since the mount started "+
		"(device %d inode %d then, device %d inode %d now): the index would decide about the new directory while changes "+
		"land in the old one, so every change is refused; restart the mount", r.path, r.dev, r.ino, uint64(st.Dev), uint64(st.Ino))}
}

// close closes the root descriptor; only once no request can use it any more (the FUSE server stopped).
func (r *storeRoot) close() {
	r.closeOnce.Do(func() {
		if r.quarantine != nil {
			r.quarantine.Close()
		}
		unix.Close(r.fd)
	})
}

// openat2 opens rel (a key, never "") beneath the root without crossing any symlink, including the final
// component. Only when the startup probe found no openat2 in the kernel, openat from the root with
// O_NOFOLLOW (intermediate symlinks followed: the pre-5.6 behaviour).
func (r *storeRoot) openat2(rel string, flags int, mode uint32) (int, error) {
	if guard.Reserved(rel) { // never reached on a user's behalf (RefuseReserved answered first)
		return -1, unix.ENOENT
	}
	if r.noOpenat2 {
		return unix.Openat(r.fd, rel, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	}
	// A key past PATH_MAX (any user can make one: 18 nested folders of 250 bytes) is resolved in
	// chunks of at most maxKeyChunk bytes, each beneath the folder the previous one opened, with the
	// same resolve flags: no symlink on the way, never above the root.
	at := r.fd
	for len(rel) > maxKeyChunk {
		i := strings.LastIndexByte(rel[:maxKeyChunk+1], '/')
		if i <= 0 {
			return -1, unix.ENAMETOOLONG
		}
		fd, err := r.openat2At(at, rel[:i], unix.O_PATH|unix.O_DIRECTORY, 0)
		if at != r.fd {
			unix.Close(at)
		}
		if err != nil {
			return -1, err
		}
		at, rel = fd, rel[i+1:]
	}
	if at != r.fd {
		defer unix.Close(at)
	}
	return r.openat2At(at, rel, flags, mode)
}

// maxKeyChunk is the longest path one openat2 call is given (PATH_MAX is 4,096 with the NUL).
const maxKeyChunk = 3072

// openat2At is one openat2 call beneath dirfd (a folder at or below the root).
func (r *storeRoot) openat2At(dirfd int, rel string, flags int, mode uint32) (int, error) {
	for try := 0; ; try++ {
		fd, err := r.sysOpenat2(dirfd, rel, &unix.OpenHow{Flags: uint64(flags) | unix.O_CLOEXEC, Mode: uint64(mode), Resolve: resolveBeneath})
		if err == unix.EAGAIN && try < 8 {
			// RESOLVE_BENEATH may ask to retry when a rename raced the lookup of a ".." component (keys
			// have none, so this is only defensive).
			continue
		}
		// Any other error, ENOSYS too, is the answer (fail closed): the kernel has openat2 (the probe
		// said so), so ENOSYS came from the backing filesystem, and falling back to paths here would
		// silently follow symlinks for the rest of the mount's life.
		return fd, err
	}
}

// dir opens folder key ("" = the root itself) as an O_PATH descriptor for the *at calls. Release it with
// r.release.
func (r *storeRoot) dir(key string) (int, error) {
	if err := r.current(); err != nil {
		return -1, err
	}
	if key == "" {
		return r.fd, nil
	}
	return r.openat2(key, unix.O_PATH|unix.O_DIRECTORY, 0)
}

// release closes a descriptor returned by dir or parent (the root's stays open).
func (r *storeRoot) release(fd int) {
	if fd != r.fd && fd >= 0 {
		unix.Close(fd)
	}
}

// parent opens the folder holding key and returns it with key's final name.
func (r *storeRoot) parent(key string) (int, string, error) {
	if guard.Reserved(key) {
		return -1, "", unix.ENOENT
	}
	dir, name := path.Split(key)
	if dir != "" {
		dir = dir[:len(dir)-1]
	}
	fd, err := r.dir(dir)
	return fd, name, err
}

// remove removes key (a file, or with unix.AT_REMOVEDIR an empty folder). unlinkat never follows the final
// name, so a symlink there is removed itself, as unlink(2) does.
func (r *storeRoot) remove(key string, flags int) error {
	fd, name, err := r.parent(key)
	if err != nil {
		return err
	}
	err = unix.Unlinkat(fd, name, flags)
	r.release(fd)
	return err
}

// open opens the file at key (never a symlink; "" = the root) with flags, and with O_CREAT or O_TMPFILE
// creates it with mode's permission bits (the kernel sends the file type along; openat2 rejects it).
func (r *storeRoot) open(key string, flags int, mode uint32) (int, error) {
	if err := r.current(); err != nil {
		return -1, err
	}
	if key == "" {
		key = "."
	}
	if flags&(unix.O_CREAT|unix.O_TMPFILE) == 0 {
		mode = 0
	}
	return r.openat2(key, flags, mode&0o7777)
}

// openRegular opens the regular file at key (never a symlink) with flags, for a FUSE open or a create that
// found the file there: the kernel sends those only for what it knows as a regular file. It cannot block:
// O_NONBLOCK, so a FIFO that took the file's place in the store (nobody at the other end) is not waited
// for, and what was opened is then refused unless it is a regular file, with ESTALE: the kernel's view of
// the file is out of date, and for a path it retries once with a fresh lookup, which finds the FIFO (or
// device) and opens it in the caller's own context, never in the daemon's. A blocked open would hold the
// enforcer's lock for good (opens for writing run under it) and stop every decided operation of the
// mount. O_NONBLOCK stays on the descriptor, where it changes nothing for a regular file.
//
// Where /proc/self/fd works, the file is first taken by an O_PATH descriptor (which opens nothing) and its
// type checked; only a regular file is then opened, through that descriptor, so it is the same inode: a
// device swapped into the store is never opened by the daemon (a device's open can act: rewind a tape,
// take a terminal, wake a driver).
func (r *storeRoot) openRegular(key string, flags int) (int, error) {
	if r.procFd {
		pfd, err := r.open(key, unix.O_PATH|unix.O_NOFOLLOW, 0)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		err = unix.Fstat(pfd, &st)
		if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
			err = unix.ESTALE
		}
		if err != nil {
			unix.Close(pfd)
			return -1, err
		}
		// O_NOFOLLOW would refuse the /proc magic link itself; the O_PATH open above followed no symlink.
		fd, err := unix.Open(procFdPath(pfd), flags&^(unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW)|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		unix.Close(pfd)
		if err != nil {
			return -1, err
		}
		return r.checkRegular(fd)
	}
	fd, err := r.open(key, flags|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err == unix.ENXIO {
		// A FIFO without a reader opened for writing (or a device without its driver): not a regular
		// file, for which open never answers ENXIO.
		return -1, unix.ESTALE
	}
	if err != nil {
		// EWOULDBLOCK too: a lease on the file, which a blocking open would wait (up to
		// /proc/sys/fs/lease-break-time) to break.
		return -1, err
	}
	return r.checkRegular(fd)
}

// checkRegular returns fd if it is a regular file, else closes it: ESTALE (see openRegular).
func (r *storeRoot) checkRegular(fd int) (int, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, unix.ESTALE
	}
	return fd, nil
}

// lstat stats key without following a symlink anywhere on the way or at the end of it.
func (r *storeRoot) lstat(key string, st *syscall.Stat_t) error {
	fd, name, err := r.parent(key)
	if err != nil {
		return err
	}
	_, err = statAt(fd, name, st)
	r.release(fd)
	return err
}

// statAt stats name in folder dirfd without following a final symlink (name "" = dirfd itself) and also
// returns the inode generation go-fuse's loopback derives from the birth time, so nodes made here get the
// same StableAttr as the ones its Lookup makes for the same file.
func statAt(dirfd int, name string, st *syscall.Stat_t) (gen uint64, err error) {
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	var x unix.Statx_t
	if err := unix.Statx(dirfd, name, flags, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &x); err != nil {
		if err != unix.ENOSYS {
			return 0, err
		}
		// Kernels before 4.11: no birth time.
		var ust unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &ust, flags); err != nil {
			return 0, err
		}
		fromStat(st, &ust)
		return 1, nil
	}
	fromStatx(st, &x)
	gen = 1
	if x.Mask&unix.STATX_BTIME != 0 && (x.Btime.Sec != 0 || x.Btime.Nsec != 0) {
		gen = uint64(x.Btime.Sec)*1e9 + uint64(x.Btime.Nsec)
	}
	return gen, nil
}

// conv assigns v to *dst whatever integer width the architecture's Stat_t uses for the field.
func conv[T ~int32 | ~int64 | ~uint32 | ~uint64](dst *T, v int64) { *dst = T(v) }

func fromStatx(st *syscall.Stat_t, x *unix.Statx_t) {
	*st = syscall.Stat_t{}
	conv(&st.Dev, int64(unix.Mkdev(x.Dev_major, x.Dev_minor)))
	conv(&st.Ino, int64(x.Ino))
	conv(&st.Nlink, int64(x.Nlink))
	conv(&st.Mode, int64(x.Mode))
	conv(&st.Uid, int64(x.Uid))
	conv(&st.Gid, int64(x.Gid))
	conv(&st.Rdev, int64(unix.Mkdev(x.Rdev_major, x.Rdev_minor)))
	conv(&st.Size, int64(x.Size))
	conv(&st.Blksize, int64(x.Blksize))
	conv(&st.Blocks, int64(x.Blocks))
	st.Atim = syscall.NsecToTimespec(x.Atime.Sec*1e9 + int64(x.Atime.Nsec))
	st.Mtim = syscall.NsecToTimespec(x.Mtime.Sec*1e9 + int64(x.Mtime.Nsec))
	st.Ctim = syscall.NsecToTimespec(x.Ctime.Sec*1e9 + int64(x.Ctime.Nsec))
}

func fromStat(st *syscall.Stat_t, u *unix.Stat_t) {
	*st = syscall.Stat_t{}
	conv(&st.Dev, int64(u.Dev))
	conv(&st.Ino, int64(u.Ino))
	conv(&st.Nlink, int64(u.Nlink))
	conv(&st.Mode, int64(u.Mode))
	conv(&st.Uid, int64(u.Uid))
	conv(&st.Gid, int64(u.Gid))
	conv(&st.Rdev, int64(u.Rdev))
	conv(&st.Size, u.Size)
	conv(&st.Blksize, int64(u.Blksize))
	conv(&st.Blocks, u.Blocks)
	st.Atim = syscall.Timespec(u.Atim)
	st.Mtim = syscall.Timespec(u.Mtim)
	st.Ctim = syscall.Timespec(u.Ctim)
}

// rename renames key from to key to (flags as renameat2(2); 0 is a plain renameat) between the two parent
// folders, each opened beneath the root.
func (r *storeRoot) rename(from, to string, flags uint32) error {
	ofd, oname, err := r.parent(from)
	if err != nil {
		return err
	}
	defer r.release(ofd)
	nfd, nname := ofd, path.Base(to)
	if path.Dir(from) != path.Dir(to) {
		// Another folder: opened on its own (one descriptor serves a rename within a folder, as Flink's
		// _metadata commit is).
		if nfd, nname, err = r.parent(to); err != nil {
			return err
		}
		defer r.release(nfd)
	}
	if flags == 0 {
		return unix.Renameat(ofd, oname, nfd, nname)
	}
	return unix.Renameat2(ofd, oname, nfd, nname, uint(flags))
}

// onFile runs fn on a /proc/self/fd path of key itself (a symlink too, not followed), opened beneath the
// root with O_PATH. It serves setxattr/removexattr and the setattr of what cannot be opened (symlinks,
// sockets, devices, files the daemon may not open): the calls by path follow symlinks on the way, and
// f*xattr, fchmod and futimens do not accept O_PATH descriptors. The proc path is a magic link: the call reaches the
// opened inode itself and never follows a symlink from there (user.* attributes of a symlink are refused,
// as on the store directly). Without /proc it falls back to the path (intermediate symlinks followed).
func (r *storeRoot) onFile(key string, fn func(path string) error) error {
	if !r.procFd {
		if err := r.current(); err != nil {
			return err
		}
		return fn(filepath.Join(r.path, filepath.FromSlash(key)))
	}
	fd, err := r.open(key, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	err = fn(procFdPath(fd))
	unix.Close(fd)
	return err
}

func procFdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
