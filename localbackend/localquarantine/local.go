package localquarantine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// Local is the quarantine folder of a local (or NFS) store, reached through a descriptor of the store
// root: every change acts beneath it and never follows a symlink, so neither the mount (root, serving
// many users) nor the CLI is led outside the store by a folder swapped for a link.
type Local struct {
	// mu guards the descriptors against Close: an operation holds it shared, so no descriptor number is
	// used after Close released it (and the kernel may have given the number to another file).
	mu     sync.RWMutex
	closed bool
	root   int // the store root (a duplicate of the caller's descriptor, this area's own)
	dir    int // the quarantine folder, opened beneath root
	// journal is the entry records file, opened O_APPEND: every record is one write(2), so concurrent
	// moves never interleave their records and a crash leaves at most a torn last line (skipped).
	// Tidy rewrites it holding mu exclusively.
	journal *os.File
	// recs are the journal's records by id, read at open and kept up to date by this process (which,
	// while a mount runs, is the only writer: the CLI goes through the mount). recMu guards it.
	recMu sync.Mutex
	recs  map[string]quarantine.Entry
	// named are the self-describing entries (EntryName) by id, each with its key, for Find: read from
	// the folder at open and kept up to date like recs (recMu guards it). An id whose object went is
	// harmless here (Find stats the candidates) and is dropped by Restore, Purge and Tidy.
	named map[string]string
	now   func() time.Time
	// nameMax is the longest entry name the quarantine folder's filesystem takes (its NAME_MAX, read at
	// open: 255 on ext4 and XFS, 143 on eCryptfs): a self-describing name (EntryName) longer than that
	// would make the staging's rename fail, so such an entry takes a plain id and a record instead.
	nameMax int
	// noRenameFlags makes the area act as on a filesystem that refuses renameat2's flags (EINVAL: older
	// NFS), so the conformance suite runs its fallbacks on any filesystem.
	noRenameFlags bool
}

// renameNoReplace is renameat2(RENAME_NOREPLACE): EINVAL where the filesystem lacks the flags.
func (l *Local) renameNoReplace(olddir int, oldname string, newdir int, newname string) error {
	if l.noRenameFlags {
		return unix.EINVAL
	}
	return unix.Renameat2(olddir, oldname, newdir, newname, unix.RENAME_NOREPLACE)
}

// ErrClosed is returned by every operation after Close.
var ErrClosed = errors.New("quarantine folder closed (the mount is shutting down)")

func (l *Local) lock() error {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// JournalName is the entry records file in the quarantine folder (JSON lines, one Entry each); every
// other name in the folder is an object, named by its entry's id.
const JournalName = "entries.jsonl"

// defaultNameMax is NAME_MAX of most Linux filesystems, the limit assumed when the quarantine
// folder's filesystem does not report its own (folderNameMax).
const defaultNameMax = 255

// folderNameMax is the longest name the filesystem of the folder fd takes (statfs f_namelen; what
// fpathconf(_PC_NAME_MAX) answers on Linux). A filesystem that does not say gets defaultNameMax; one
// that reports less than a plain entry id could hold is an error (no entry could be named there).
func folderNameMax(fd int) (int, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil || st.Namelen <= 0 {
		return defaultNameMax, nil
	}
	n := int(st.Namelen)
	if n < minNameMax {
		return 0, fmt.Errorf("the quarantine folder %s is on a filesystem whose names are at most %d bytes, too short for an entry id (%d bytes)", store.QuarantineDir, n, minNameMax)
	}
	return n, nil
}

// minNameMax is the length of a plain entry id (NewID), the name every entry can fall back to.
const minNameMax = 19 + 1 + 16

// OpenLocalAt opens (creating it, mode 0700) the quarantine folder of the store whose root directory
// rootFD is; rootFD stays the caller's (the area works on its own duplicate). now is the clock of
// deletion times (nil: time.Now).
func OpenLocalAt(rootFD int, now func() time.Time) (*Local, error) {
	if now == nil {
		now = time.Now
	}
	err := unix.Mkdirat(rootFD, store.QuarantineDir, 0o700)
	if err != nil && err != unix.EEXIST {
		return nil, fmt.Errorf("create the quarantine folder %s in the store: %w", store.QuarantineDir, err)
	}
	made := err == nil
	fd, err := unix.Openat(rootFD, store.QuarantineDir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the quarantine folder %s in the store (it must be a folder, not a symlink): %w", store.QuarantineDir, err)
	}
	if err := ownFolder(fd, made); err != nil {
		unix.Close(fd)
		return nil, err
	}
	rfd, err := unix.FcntlInt(uintptr(rootFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("quarantine: duplicate the store root descriptor: %w", err)
	}
	l := &Local{root: rfd, dir: fd, now: now}
	l.nameMax, err = folderNameMax(fd)
	if err == nil {
		l.journal, err = l.openJournal()
	}
	if err == nil {
		l.recs, _, err = l.records()
	}
	if err == nil {
		l.named, err = l.namedEntries()
	}
	if err != nil {
		if l.journal != nil {
			l.journal.Close()
		}
		unix.Close(fd)
		unix.Close(rfd)
		return nil, err
	}
	return l, nil
}

// ownFolder refuses a quarantine folder that is not this process's alone. The store root is often
// writable by the Flink user, who can make the folder before the first mount or rename the daemon's
// away and make another between two mounts: staged files would then move into a folder that user
// controls (readable, renamable, deletable by them), and their entry records would tell the daemon,
// root, what to restore where. Only a folder owned by this process's user and writable by nobody else
// holds entries.
// made says this open has just made the folder.
func ownFolder(fd int, made bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat the quarantine folder %s in the store: %w", store.QuarantineDir, err)
	}
	euid := os.Geteuid()
	if made && int(st.Uid) != euid {
		return fmt.Errorf("the quarantine folder %s that ckguard just made in the store is owned by uid %d, not by uid %d who runs ckguard: the file system maps this user to another (an NFS export with root_squash?), so the folder would not be ckguard's alone; run ckguard as the store's owner, or without the quarantine",
			store.QuarantineDir, st.Uid, euid)
	}
	if int(st.Uid) != euid || st.Mode&0o022 != 0 {
		return fmt.Errorf("the quarantine folder %s in the store is owned by uid %d with mode %04o, but must be owned by uid %d (who runs ckguard) and writable by nobody else: someone else made or replaced it, and its entries cannot be trusted. If a mount running as uid %d made it, run this as that user; else inspect it, move it out of the store, and start again (a new one is made)",
			store.QuarantineDir, st.Uid, st.Mode&0o7777, euid, st.Uid)
	}
	return nil
}

func (l *Local) openJournal() (*os.File, error) {
	jfd, err := unix.Openat(l.dir, JournalName, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the quarantine journal %s/%s: %w", store.QuarantineDir, JournalName, err)
	}
	return os.NewFile(uintptr(jfd), JournalName), nil
}

// OpenLocal opens the quarantine folder of the store directory dir (creating it), for the CLI.
func OpenLocal(dir string, now func() time.Time) (*Local, error) {
	rfd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	defer unix.Close(rfd)
	l, err := OpenLocalAt(rfd, now)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", dir, err)
	}
	return l, nil
}

// Close releases the descriptors, once every operation under way has finished; later operations return
// ErrClosed.
func (l *Local) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		l.journal.Close()
		unix.Close(l.dir)
		unix.Close(l.root)
	}
	return nil
}

// MoveAt stages the deletion of name in the folder dirfd (the store key key) with renameat2
// (RENAME_NOREPLACE) into the quarantine folder. Its entry is self-describing (EntryName: the name in
// the folder is the record) whenever the name fits; then the rename is the whole staging, and a crash
// leaves the object at its key or in the folder under a name that says where it came from. A longer key
// gets a plain id and its record appended to the journal first, so a crash in between leaves the object
// at its key (the record alone is no entry). The records are not fsync'ed (as the audit log's records
// are not, between its periodic fsyncs): a kill -9 loses nothing; a power failure can at worst leave an
// object in the folder without its record, which List reports as such (never purged unasked).
func (l *Local) MoveAt(dirfd int, name, key string, d quarantine.Decision) (quarantine.Entry, error) {
	return l.MoveAtStat(dirfd, name, key, nil, d)
}

// MoveAtStat is MoveAt for a caller that has just stat'ed name through dirfd (st, not following a
// symlink; the stat its decision judged). A nil st is stat'ed here. The decision judged st's file, so
// only that file may be staged under it: the name can have been replaced since (another unlink of it
// and a create or mkdir, neither serialized with this one), so the staged object is stat'ed once moved
// and, unless it is st's file unchanged (sameFile), moved back and ErrReplaced returned (nothing
// deleted). The entry's size, times and mode are the staged object's.
func (l *Local) MoveAtStat(dirfd int, name, key string, st *unix.Stat_t, d quarantine.Decision) (quarantine.Entry, error) {
	if err := l.lock(); err != nil {
		return quarantine.Entry{}, err
	}
	defer l.mu.RUnlock()
	if st == nil {
		st = new(unix.Stat_t)
		if err := unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return quarantine.Entry{}, err
		}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return quarantine.Entry{}, unix.EISDIR
	}
	now := l.now()
	e := quarantine.Entry{ID: quarantine.NewID(now), Path: key, Size: st.Size, ModTime: time.Unix(st.Mtim.Unix()), Mode: st.Mode, DeletedAt: now.UTC(), Decision: d}
	if !utf8.ValidString(key) {
		e.PathBytes = []byte(key)
	}
	named := false
	if n := quarantine.EntryName(e, l.nameMax); n != "" {
		e.ID, named = n, true
		// What the name holds, as ListAll reads it back.
		e.Decision = quarantine.Decision{Op: d.Op, Reason: "allowed", UID: d.UID, GID: d.GID, PID: d.PID, Comm: d.Comm}
	} else if err := l.writeRecord(e); err != nil {
		return quarantine.Entry{}, err
	}
	err := l.renameNoReplace(dirfd, name, l.dir, e.ID)
	if err == unix.EINVAL {
		// The filesystem lacks renameat2 flags (older NFS): the name is fresh and random, a plain rename
		// replaces nothing.
		err = unix.Renameat(dirfd, name, l.dir, e.ID)
	}
	if err != nil {
		// A record stays in the journal; without its object it is no entry (Tidy drops it).
		if err == unix.EXDEV {
			return quarantine.Entry{}, fmt.Errorf("quarantine /%s: it is on another filesystem than the store root's quarantine folder, so it cannot be moved there; nothing was deleted (mount the store without --quarantine, or with the folder on each filesystem): %w", key, err)
		}
		return quarantine.Entry{}, err
	}
	var got unix.Stat_t
	serr := unix.Fstatat(l.dir, e.ID, &got, unix.AT_SYMLINK_NOFOLLOW)
	if serr == nil && !sameFile(&got, st) {
		// Not the decided file: it goes back where it was, never replacing what is there now.
		if berr := unix.Renameat2(l.dir, e.ID, dirfd, name, unix.RENAME_NOREPLACE); berr != nil { // no flags: it stays staged
			l.remember(named, e)
			return quarantine.Entry{}, fmt.Errorf("quarantine /%s: %w, and it could not be moved back (%v): it stays in quarantine as entry %s", key, ErrReplaced, berr, e.ID)
		}
		return quarantine.Entry{}, fmt.Errorf("quarantine /%s: %w; nothing was deleted", key, ErrReplaced)
	}
	l.remember(named, e)
	if serr == nil {
		e.Size, e.ModTime, e.Mode = got.Size, time.Unix(got.Mtim.Unix()), got.Mode
	}
	return e, nil
}

// sameFile reports whether got (the staged object) is the file st describes, unchanged: same device,
// inode, type, size and mtime. The inode number alone is not enough: tmpfs and ext4 hand a freed number
// to the next file made. A file replaced by one with the same inode number, size and mtime (set back
// with utimensat) is not told apart: that needs the birth time, which a Stat_t lacks.
func sameFile(got, st *unix.Stat_t) bool {
	return got.Dev == st.Dev && got.Ino == st.Ino && got.Mode&unix.S_IFMT == st.Mode&unix.S_IFMT &&
		got.Mode&unix.S_IFMT != unix.S_IFDIR && got.Size == st.Size && got.Mtim == st.Mtim
}

// ErrReplaced: the name to stage no longer held the file its decision judged.
var ErrReplaced = fmt.Errorf("the file was replaced between its decision and its staging: %w", unix.ESTALE)

// remember records a self-describing entry just staged, for Find.
func (l *Local) remember(named bool, e quarantine.Entry) {
	if named {
		l.recMu.Lock()
		l.named[e.ID] = e.Key()
		l.recMu.Unlock()
	}
}

// namedEntries reads the self-describing entries' ids and keys from the folder's names.
func (l *Local) namedEntries() (map[string]string, error) {
	names, err := l.names()
	if err != nil {
		return nil, fmt.Errorf("list the quarantine folder: %w", err)
	}
	m := map[string]string{}
	for _, n := range names {
		if e, ok, err := quarantine.ParseEntryName(n); ok && err == nil {
			m[n] = e.Key()
		}
	}
	return m, nil
}

// forget drops id from the self-describing entries (its object was restored or purged).
func (l *Local) forget(id string) {
	l.recMu.Lock()
	delete(l.named, id)
	l.recMu.Unlock()
}

// List returns every entry, oldest first. Objects in the folder that are no entry are ignored; ListAll
// reports them.
func (l *Local) List(ctx context.Context) ([]quarantine.Entry, error) {
	es, _, err := l.ListAll(ctx)
	return es, err
}

// ListAll returns every entry, oldest first, and every object in the folder that is no complete entry.
// An entry is an object in the folder with its record; a record without its object is none.
func (l *Local) ListAll(ctx context.Context) ([]quarantine.Entry, []quarantine.Problem, error) {
	if err := l.lock(); err != nil {
		return nil, nil, err
	}
	defer l.mu.RUnlock()
	names, err := l.names()
	if err != nil {
		return nil, nil, fmt.Errorf("list the quarantine folder: %w", err)
	}
	staged := func(yield func(string, *unix.Stat_t) bool) {
		for _, n := range names {
			if n == JournalName || strings.HasSuffix(n, tmpSuffix) || strings.HasSuffix(n, stageSuffix) {
				continue // the journal being rewritten, a copy not committed yet
			}
			st := new(unix.Stat_t)
			if unix.Fstatat(l.dir, n, st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue // restored or purged meanwhile
			}
			if !yield(n, st) {
				return
			}
		}
	}
	return quarantine.Pair(ctx, staged, quarantine.Pairing[*unix.Stat_t]{
		Named:  true,
		Record: func(_ *unix.Stat_t, id string) (quarantine.Entry, bool, error) { return l.recordOf(id) },
		Complete: func(st *unix.Stat_t, e quarantine.Entry, named bool) (quarantine.Entry, bool) {
			if named {
				return fromStat(e, st), true
			}
			// A truncation that never happened is no entry: its content is at its key (Tidy removes the copy).
			return e, !l.unchanged(e)
		},
		Problem: func(st *unix.Stat_t, id, detail string) quarantine.Problem {
			return quarantine.Problem{ID: id, Size: st.Size, Detail: detail + "; inspect " + store.QuarantineDir + "/" + id + " in the store"}
		},
	})
}

// fromStat completes the self-describing entry e with what its object says: size, mtime and mode
// (a rename keeps them).
func fromStat(e quarantine.Entry, st *unix.Stat_t) quarantine.Entry {
	e.Size, e.ModTime, e.Mode = st.Size, time.Unix(st.Mtim.Unix()), st.Mode
	return e
}

// tmpSuffix ends the name of the journal being rewritten by Tidy.
const tmpSuffix = ".tmp"

// recordOf is id's record (EntryOf's record: the records are in memory, never unreadable).
func (l *Local) recordOf(id string) (quarantine.Entry, bool, error) {
	l.recMu.Lock()
	defer l.recMu.Unlock()
	e, ok := l.recs[id]
	return e, ok, nil
}

// Tidy rewrites the journal without the records whose object is not in the folder (the object is at its
// key again, or was purged: see the package comment) once they are older than minAge, so that a record
// written just before its move is never taken away from it. The new journal is written and fsync'ed
// beside the old one and renamed over it: a crash leaves one or the other, whole.
func (l *Local) Tidy(ctx context.Context, minAge time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	names, err := l.names()
	if err != nil {
		return err
	}
	now := l.now()
	have := make(map[string]bool, len(names))
	for _, n := range names {
		if id, ok := strings.CutSuffix(n, stageSuffix); ok {
			// A copy whose truncation was refused, failed or interrupted by a crash before its commit.
			if now.Sub(quarantine.IDTime(id)) >= minAge {
				_ = unix.Unlinkat(l.dir, n, 0)
			}
			continue
		}
		have[n] = true
	}
	l.recMu.Lock()
	for id, e := range l.recs {
		if have[id] && now.Sub(quarantine.IDTime(id)) >= minAge && l.unchanged(e) {
			// A crash between a truncation's commit and the truncation: the content is still at its key.
			if unix.Unlinkat(l.dir, id, 0) == nil {
				delete(have, id)
			}
		}
	}
	defer l.recMu.Unlock()
	for id := range l.named {
		if !have[id] {
			delete(l.named, id)
		}
	}
	keep := make([]quarantine.Entry, 0, len(l.recs))
	for id, e := range l.recs {
		if have[id] || now.Sub(quarantine.IDTime(id)) < minAge {
			keep = append(keep, e)
		}
	}
	if len(keep) == len(l.recs) {
		return nil
	}
	return l.rewriteJournal(keep)
}

// entry returns id's entry: its object in the folder and its record.
func (l *Local) entry(id string) (quarantine.Entry, error) {
	if !validID(id) {
		return quarantine.Entry{}, fmt.Errorf("%w: %q", quarantine.ErrNoEntry, id)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(l.dir, id, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return quarantine.Entry{}, fmt.Errorf("%w: %s", quarantine.ErrNoEntry, id)
	}
	e, named, problem := quarantine.EntryOf(id, l.recordOf)
	switch {
	case problem != "":
		return quarantine.Entry{}, fmt.Errorf("%w: %s: %s", quarantine.ErrNoEntry, id, problem)
	case named:
		return fromStat(e, &st), nil
	}
	return e, nil
}

// Purge destroys the entry's object, then its record.
func (l *Local) Purge(ctx context.Context, id string) error {
	if err := l.lock(); err != nil {
		return err
	}
	defer l.mu.RUnlock()
	e, err := l.entry(id)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(l.dir, e.ID, 0); err == unix.ENOENT {
		return fmt.Errorf("purge /%s: %w: entry %s was restored or purged by another request meanwhile", e.Path, quarantine.ErrNoEntry, e.ID)
	} else if err != nil {
		return fmt.Errorf("purge /%s (entry %s): %w", e.Path, e.ID, err)
	}
	l.forget(e.ID)
	return nil
}

var _ quarantine.Staging = (*Local)(nil)

// Restage is MoveKey (Staging).
func (l *Local) Restage(_ context.Context, key string, d quarantine.Decision) (quarantine.Entry, error) {
	return l.MoveKey(key, d)
}

// MoveKey is MoveAt for the store key key, its folder opened beneath the root without following a
// symlink (and never created).
func (l *Local) MoveKey(key string, d quarantine.Decision) (quarantine.Entry, error) {
	k, err := store.CleanKey(key)
	if err != nil || k == "" || store.InQuarantine(k) {
		return quarantine.Entry{}, fmt.Errorf("quarantine %q: not a store key outside the quarantine folder", key)
	}
	dir, name := path.Split(k)
	pfd, err := l.openDir(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return quarantine.Entry{}, fmt.Errorf("quarantine /%s: %w", k, err)
	}
	defer unix.Close(pfd)
	return l.MoveAt(pfd, name, k, d)
}

// openDir opens folder key beneath the root (O_PATH), never following a symlink.
func (l *Local) openDir(key string) (int, error) {
	if err := l.lock(); err != nil {
		return -1, err
	}
	defer l.mu.RUnlock()
	return l.openDirLocked(key)
}

// openDirLocked is openDir for a caller holding mu.
func (l *Local) openDirLocked(key string) (int, error) {
	fd, err := unix.FcntlInt(uintptr(l.root), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil || key == "" {
		return fd, err
	}
	for _, seg := range strings.Split(key, "/") {
		nfd, err := unix.Openat(fd, seg, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("%s: %w", seg, err)
		}
		fd = nfd
	}
	return fd, nil
}

var _ quarantine.Spacer = (*Local)(nil)
