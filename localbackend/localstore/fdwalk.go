package localstore

import (
	"context"
	"encoding/binary"
	"io/fs"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
)

// The store is walked and resolved through descriptors, never by path: a path longer than PATH_MAX
// (4,096 bytes), which any user who may create folders can make, must not fail a walk or a stat.
//
// Invariants:
//   - every name is resolved relative to an open folder descriptor (openat/openat2/fstatat), never
//     following a symlink (O_NOFOLLOW, RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH), and no single call is
//     given more than maxChunk bytes of path;
//   - one walk holds at most maxOpenDirs folder descriptors plus two (the one being opened and the
//     anchor's chunked chain), however deep the tree: folders deeper than that are read whole when
//     opened (names and their lstat), their descriptor closed at once, and a folder below them is
//     opened from the deepest folder still open, by the relative chain of names (no "..": a clean key
//     has none), in chunks of at most maxChunk bytes. A 1,000-level tree costs O(depth²) name lookups
//     in the kernel past depth maxOpenDirs, and no recursion of the Go stack;
//   - memory is bounded by one getdents buffer per open folder plus the entries of the fully read
//     deep folders on the current chain (a 1 M-entry folder near the top is read in batches).
const (
	maxOpenDirs = 64
	maxChunk    = 3072 // < PATH_MAX with room for the kernel's terminating NUL
	direntBuf   = 32 << 10
)

// openDirHook, when set (tests), is asked before each folder is opened; an error it returns is the
// open's. It can be set by tests to inject an unreadable folder (root bypasses file modes on a
// local file system, so EACCES cannot be made for real by a test running as root).
var openDirHook func(key string) error

// openBeneath opens rel (a clean relative key, "" = dirfd itself) below dirfd with flags, through no
// symlink, in chunks of at most maxChunk bytes so that no call is given a path over PATH_MAX.
func openBeneath(dirfd int, rel string, flags int) (int, error) {
	if rel == "" {
		rel = "."
	}
	cur, owned := dirfd, false
	defer func() {
		if owned {
			unix.Close(cur)
		}
	}()
	for {
		chunk, rest := rel, ""
		if len(rel) > maxChunk {
			i := strings.LastIndexByte(rel[:maxChunk+1], '/')
			if i <= 0 {
				return -1, unix.ENAMETOOLONG
			}
			chunk, rest = rel[:i], rel[i+1:]
		}
		fl := flags
		if rest != "" {
			fl = unix.O_PATH | unix.O_DIRECTORY
		}
		fd, err := openat2(cur, chunk, fl)
		if err != nil {
			return -1, err
		}
		if owned {
			unix.Close(cur)
		}
		if rest == "" {
			owned = false
			return fd, nil
		}
		cur, owned, rel = fd, true, rest
	}
}

// openat2 opens name below dirfd through no symlink and across no mount point (RESOLVE_NO_XDEV:
// EXDEV, decided in the kernel's path walk without a request to the mounted file system: mounts.go);
// a kernel without openat2 (before 5.6) gets openat(2) of each name with O_NOFOLLOW (mount points
// then are kept out by the walk's mount table only).
func openat2(dirfd int, name string, flags int) (int, error) {
	var fd int
	err := retryEINTR(func() (err error) {
		fd, err = unix.Openat2(dirfd, name, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV})
		return err
	})
	if err != unix.ENOSYS {
		return fd, err
	}
	segs := strings.Split(name, "/")
	cur := dirfd
	for i, s := range segs {
		fl := unix.O_PATH | unix.O_DIRECTORY
		if i == len(segs)-1 {
			fl = flags
		}
		err = retryEINTR(func() (err error) {
			fd, err = unix.Openat(cur, s, fl|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
			return err
		})
		if cur != dirfd {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}

// rootFd opens the store root as a folder.
func (s *Store) rootFd(flags int) (int, error) {
	var fd int
	err := retryEINTR(func() (err error) {
		fd, err = unix.Open(s.root, flags|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	})
	return fd, err
}

type dent struct {
	name string
	typ  uint8
	st   *unix.Stat_t // lstat, for folders read whole (their descriptor is closed)
	err  error        // the lstat's error, likewise
}

// lstatEntry is lstat(2) of name in the folder dirfd. A folder (or an entry of unknown type) is
// described through an O_PATH descriptor opened with RESOLVE_NO_XDEV, so a file system mounted on it
// since the walk read the mount table is answered EXDEV by the kernel and never asked (a plain
// fstatat of a mount point is a getattr on the mounted file system's root: mounts.go).
func lstatEntry(dirfd int, name string, typ uint8, st *unix.Stat_t) error {
	if typ == unix.DT_DIR || typ == unix.DT_UNKNOWN {
		fd, err := openat2(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Fstat(fd, st)
	}
	return retryEINTR(func() error { return unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW) })
}

type dirFrame struct {
	key    string
	uid    uint32 // the folder's owner (hasUID), the owner given for a mount point in it
	hasUID bool
	fd     int // -1 once read whole and closed
	buf    []byte
	ents   []dent
	eof    bool
}

// readBatch reads the next getdents batch of f.
func (f *dirFrame) readBatch() error {
	if f.buf == nil {
		f.buf = make([]byte, direntBuf)
	}
	var n int
	err := retryEINTR(func() (err error) {
		n, err = unix.Getdents(f.fd, f.buf)
		return err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		f.eof = true
		return nil
	}
	// Sorted within a batch: a folder that fits one batch (hundreds of names) is walked in name
	// order, as filepath.WalkDir did, so walks are reproducible; a larger one batch by batch.
	n0 := len(f.ents)
	f.ents = parseDirents(f.buf[:n], f.ents)
	sort.Slice(f.ents[n0:], func(i, j int) bool { return f.ents[n0+i].name < f.ents[n0+j].name })
	return nil
}

// parseDirents appends the entries of a linux_dirent64 buffer (name, d_type), "." and ".." left out.
func parseDirents(b []byte, out []dent) []dent {
	for len(b) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < 19 || reclen > len(b) {
			break
		}
		typ := b[18]
		name := b[19:reclen]
		if i := indexNUL(name); i >= 0 {
			name = name[:i]
		}
		if s := string(name); s != "." && s != ".." {
			out = append(out, dent{name: s, typ: typ})
		}
		b = b[reclen:]
	}
	return out
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

func joinKey(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// walkFd walks the folder at clean key base, reporting every entry below it (only regular
// `_metadata` when metaOnly) to fn. An entry that cannot be read is reported by
// store.ReportUnknown (the walk goes on when the caller takes unknown subtrees).
func (s *Store) walkFd(ctx context.Context, base string, fn func(store.ObjectInfo) error, metaOnly bool) error {
	rfd, err := s.rootFd(unix.O_PATH)
	if err != nil {
		return store.ReportUnknown(ctx, store.UnknownSubtree{Key: "", Err: &fs.PathError{Op: "open", Path: s.root, Err: err}})
	}
	defer unix.Close(rfd)
	// The mount points below the root are never opened, stated nor listed (mounts.go). A mount table
	// that cannot be read leaves RESOLVE_NO_XDEV as the only guard (folders and their opens).
	mounts, _ := mountsBelow(rfd)
	w := &fdWalk{s: s, ctx: ctx, rfd: rfd, base: base, mounts: mounts, fn: fn, metaOnly: metaOnly}
	defer w.closeAll()
	if done, err := w.start(); done || err != nil {
		return err
	}
	visited := 0
	for len(w.stack) > 0 {
		top := w.stack[len(w.stack)-1]
		if len(top.ents) == 0 {
			if err := w.refill(top); err != nil {
				return err
			}
			continue
		}
		e := top.ents[0]
		top.ents = top.ents[1:]
		if visited++; visited%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := w.visit(top, e); err != nil {
			return err
		}
	}
	return nil
}

// fdWalk is one walk of walkFd: a stack of folder frames, the deepest maxOpenDirs of them holding a
// descriptor, each folder opened relative to the deepest open frame above it (never by full path).
type fdWalk struct {
	s        *Store
	ctx      context.Context
	rfd      int    // the store root, O_PATH
	base     string // the folder walked ("" = the root)
	mounts   map[string]mountPoint
	fn       func(store.ObjectInfo) error
	metaOnly bool
	stack    []*dirFrame
	open     int // frames holding a descriptor
}

func (w *fdWalk) closeAll() {
	for _, f := range w.stack {
		if f.fd >= 0 {
			unix.Close(f.fd)
		}
	}
}

// unknown reports key as an unknown subtree (err is why it cannot be walked).
func (w *fdWalk) unknown(key string, err error, st *unix.Stat_t) error {
	u := store.UnknownSubtree{Key: key, Err: &fs.PathError{Op: "walk", Path: w.s.osPath(key), Err: err}}
	if st != nil {
		u.UID, u.HasUID = st.Uid, true
	}
	return store.ReportUnknown(w.ctx, u)
}

// mounted reports the mount point key, found in folder f, without touching it: owned by who
// mounted it when an unprivileged user did (mountPoint), else by the owner of its folder f.
func (w *fdWalk) mounted(key string, f *dirFrame) error {
	u := store.UnknownSubtree{Key: key, Err: &mountError{mp: w.s.osPath(key)}}
	if m := w.mounts[key]; m.hasUID {
		u.UID, u.HasUID = m.uid, true
	} else if f != nil && f.hasUID {
		u.UID, u.HasUID = f.uid, true
	}
	return store.ReportUnknown(w.ctx, u)
}

// start pushes the walk's first folder: the root, or base below it. done is true when there is
// nothing to walk (base is missing, not a folder, or a mount point reported as unknown).
func (w *fdWalk) start() (done bool, err error) {
	base := w.base
	if base == "" {
		fd, err := w.s.rootFd(unix.O_RDONLY)
		if err != nil {
			return true, w.unknown("", err, nil)
		}
		f := &dirFrame{key: "", fd: fd}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			f.uid, f.hasUID = st.Uid, true
		}
		w.stack = append(w.stack, f)
		w.open++
		return false, nil
	}
	if mp := mountAt(w.mounts, base); mp != "" {
		return true, store.ReportUnknown(w.ctx, store.UnknownSubtree{Key: base, Err: &mountError{mp: w.s.osPath(mp)}})
	}
	var st unix.Stat_t
	fd, err := openBeneath(w.rfd, base, unix.O_PATH)
	if err == unix.ENOENT || err == unix.ENOTDIR {
		return true, nil // a missing prefix is no error (an S3 prefix with no objects does not exist either)
	}
	if err == nil {
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
	}
	if err != nil {
		return true, w.unknown(base, err, nil)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return true, nil
	}
	return false, w.push(base, &st)
}

// push opens the folder key (its lstat st, if known) relative to the deepest open frame.
func (w *fdWalk) push(key string, st *unix.Stat_t) error {
	anchor, akey := w.rfd, ""
	for i := len(w.stack) - 1; i >= 0; i-- {
		if w.stack[i].fd >= 0 {
			anchor, akey = w.stack[i].fd, w.stack[i].key
			break
		}
	}
	rel := key
	if akey != "" {
		rel = key[len(akey)+1:]
	}
	if openDirHook != nil {
		if err := openDirHook(key); err != nil {
			return w.unknown(key, err, st)
		}
	}
	fd, err := openBeneath(anchor, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK)
	if err == unix.EXDEV {
		var parent *dirFrame
		if len(w.stack) > 0 {
			parent = w.stack[len(w.stack)-1]
		}
		return w.mounted(key, parent) // mounted since the walk read the mount table
	}
	switch {
	case err == unix.ENOENT:
		return nil // removed meanwhile
	case (err == unix.ENOTDIR || err == unix.ELOOP) && !strings.Contains(rel, "/"):
		return nil // replaced by a file or a symlink meanwhile: no subtree (a symlink is never followed)
	case err != nil:
		if key == w.base && w.base != "" && (err == unix.ENOTDIR || err == unix.ENOENT) {
			return nil
		}
		return w.unknown(key, err, st)
	}
	f := &dirFrame{key: key, fd: fd}
	if st != nil {
		f.uid, f.hasUID = st.Uid, true
	}
	if w.open < maxOpenDirs {
		w.open++
		w.stack = append(w.stack, f)
		return nil
	}
	return w.pushClosed(f, st)
}

// pushClosed pushes a folder too deep to keep open: read whole, with the lstat of each entry, and
// closed.
func (w *fdWalk) pushClosed(f *dirFrame, st *unix.Stat_t) error {
	for !f.eof {
		if err := f.readBatch(); err != nil {
			unix.Close(f.fd)
			f.fd = -1
			w.stack = append(w.stack, f) // what was read is still reported
			return w.unknown(f.key, err, st)
		}
	}
	sort.Slice(f.ents, func(i, j int) bool { return f.ents[i].name < f.ents[j].name })
	for i := range f.ents {
		if _, ok := w.mounts[joinKey(f.key, f.ents[i].name)]; ok {
			continue // reported as a mount point when its turn comes, never stated
		}
		var est unix.Stat_t
		if err := lstatEntry(f.fd, f.ents[i].name, f.ents[i].typ, &est); err != nil {
			f.ents[i].err = err
		} else {
			f.ents[i].st = &est
		}
	}
	unix.Close(f.fd)
	f.fd = -1
	f.buf = nil
	w.stack = append(w.stack, f)
	return nil
}

// refill reads the next batch of the top frame's entries, or pops it when it is read to the end.
func (w *fdWalk) refill(top *dirFrame) error {
	if top.eof || top.fd < 0 {
		if top.fd >= 0 {
			unix.Close(top.fd)
			w.open--
		}
		w.stack = w.stack[:len(w.stack)-1]
		return nil
	}
	top.ents = top.ents[:0]
	if err := top.readBatch(); err != nil {
		top.eof = true
		return w.unknown(top.key, err, nil)
	}
	return nil
}

// visit reports the entry e of folder top to the walk's fn and pushes it when it is a folder.
func (w *fdWalk) visit(top *dirFrame, e dent) error {
	key := joinKey(top.key, e.name)
	if top.key == "" && store.ReservedName(e.name) && (e.typ == unix.DT_DIR || e.typ == unix.DT_UNKNOWN) {
		// Staged deletions are not store data (store.QuarantineDir). A file of that name is
		// skipped too: it is no checkpoint data either.
		return nil
	}
	isMeta := e.name == flinklayout.MetadataName
	if w.metaOnly && e.typ != unix.DT_DIR && e.typ != unix.DT_UNKNOWN && !(isMeta && e.typ == unix.DT_REG) {
		return nil
	}
	if _, ok := w.mounts[key]; ok {
		return w.mounted(key, top)
	}
	st, serr := e.st, e.err
	if st == nil && serr == nil {
		var est unix.Stat_t
		serr = lstatEntry(top.fd, e.name, e.typ, &est)
		if serr == nil {
			st = &est
		}
	}
	switch {
	case serr == unix.EXDEV:
		return w.mounted(key, top) // mounted since the walk read the mount table
	case serr == unix.ENOENT:
		return nil // removed between readdir and lstat: simply gone
	case serr != nil:
		return w.unknown(key, serr, nil)
	}
	oi := InfoFromStat(key, st)
	if !w.metaOnly || store.IsCheckpointFile(oi) {
		if err := w.fn(oi); err != nil {
			return err
		}
	}
	if oi.IsDir {
		return w.push(key, st)
	}
	return nil
}
