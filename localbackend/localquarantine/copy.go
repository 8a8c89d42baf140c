package localquarantine

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// A truncation destroys content without removing a name, so it cannot be staged by a rename: the old
// content is copied into the folder first (Prepare, a copy that may take long and therefore runs
// before the enforcer's lock), and the copy becomes an entry right before the truncation, under the
// lock (Prepared.Commit, a stat, one record write and one rename). The copy is taken only if the file
// did not change while it was copied and until the commit (Source: inode, size, mtime and ctime; any
// write moves the ctime), so the staged bytes are exactly those the truncation then destroys.
//
// Crash safety, the same invariant as MoveAt (never lost, never in both places):
//   - before the commit the copy is named <id>.stage: no entry (List skips it, Tidy removes it);
//   - between the commit and the truncation the content is at its key and in the folder: the entry's
//     Source still matches the file at the key, which List takes as "the truncation never happened"
//     (no entry; Tidy removes the copy);
//   - after the truncation the file's ctime has moved: the entry is an entry.

func sourceOf(st *unix.Stat_t) quarantine.Source {
	return quarantine.Source{Dev: uint64(st.Dev), Ino: st.Ino, Size: st.Size,
		MtimeNsec: st.Mtim.Nano(), CtimeNsec: st.Ctim.Nano()}
}

// ErrChanged is returned by Prepare and Commit when the file changed while (or since) its content was
// copied: the copy is not what a truncation would destroy. The caller copies again.
var ErrChanged = errors.New("the file changed while its content was being staged")

// stageSuffix ends the name of a copy that is not committed yet.
const stageSuffix = ".stage"

// Prepared is a copy of a file's content in the folder, not yet an entry. It holds its own duplicate of
// the folder's descriptor, so the copy runs without the area's lock: a Tidy or Close waiting for that
// lock never waits for a copy, and neither does an unlink's staging queued behind them.
type Prepared struct {
	l   *Local
	key string
	src int // the caller's descriptor of the file (readable)
	st  unix.Stat_t
	id  string
	dir int              // the quarantine folder (this copy's own duplicate), open until Commit, Abort or Undo
	fd  int              // the copy, open until Commit or Abort
	e   quarantine.Entry // the entry Commit made
}

// Prepare copies the regular file src (a readable descriptor, the caller's: it stays open) whose store
// key is key into the folder, with the file's mode, owner (when root) and times. It must not run under
// the enforcer's lock: the copy takes as long as the file is large (a reflink where the filesystem has
// them, copy_file_range otherwise, server-side on NFS 4.2).
func (l *Local) Prepare(src int, key string) (*Prepared, error) {
	k, err := store.CleanKey(key)
	if err != nil || k == "" || store.InQuarantine(k) {
		return nil, fmt.Errorf("quarantine %q: not a store key outside the quarantine folder", key)
	}
	p := &Prepared{l: l, key: k, src: src, dir: -1, fd: -1}
	if err := unix.Fstat(src, &p.st); err != nil {
		return nil, fmt.Errorf("quarantine /%s: %w", k, err)
	}
	if p.st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("quarantine /%s: %w", k, unix.EINVAL)
	}
	if err := p.open(); err != nil {
		return nil, fmt.Errorf("quarantine /%s: create the copy of its content: %w", k, err)
	}
	if err := p.copy(); err != nil {
		p.abort()
		if err == ErrChanged {
			return nil, err
		}
		return nil, fmt.Errorf("quarantine /%s: copy its content before the truncation (nothing was truncated): %w", k, err)
	}
	var now unix.Stat_t
	if err := unix.Fstat(src, &now); err != nil || sourceOf(&now) != sourceOf(&p.st) {
		p.abort()
		return nil, ErrChanged
	}
	return p, nil
}

// open duplicates the folder's descriptor and creates the uncommitted copy in it (holding the area's
// lock only for this).
func (p *Prepared) open() error {
	if err := p.l.lock(); err != nil {
		return err
	}
	defer p.l.mu.RUnlock()
	dir, err := unix.FcntlInt(uintptr(p.l.dir), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	p.id = quarantine.NewID(p.l.now())
	fd, err := unix.Openat(dir, p.id+stageSuffix, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		unix.Close(dir)
		return err
	}
	p.dir, p.fd = dir, fd
	return nil
}

// fchown is unix.Fchown (a test replaces it to fail as a full quota does).
var fchown = unix.Fchown

// copy fills the copy with src's content and gives it src's owner (when root), mode and times. The owner
// comes first and must succeed: the mode then never makes a copy that is root's with the user's set-id
// bits, which a restore would put back as a root set-uid program with the user's content, nor does a
// restore give a user's file to root.
func (p *Prepared) copy() error {
	if p.st.Size > 0 && unix.IoctlFileClone(p.fd, p.src) != nil {
		if err := copyData(p.fd, p.src, p.st.Size); err != nil {
			return err
		}
	}
	if os.Geteuid() == 0 {
		if err := fchown(p.fd, int(p.st.Uid), int(p.st.Gid)); err != nil {
			return fmt.Errorf("give the copy the file's owner (uid %d, gid %d; a full quota?): %w", p.st.Uid, p.st.Gid, err)
		}
	}
	if err := unix.Fchmod(p.fd, p.st.Mode&0o7777); err != nil {
		return err
	}
	if err := copyACL(p.fd, p.src); err != nil {
		return err
	}
	return unix.UtimesNanoAt(p.dir, p.id+stageSuffix, []unix.Timespec{p.st.Atim, p.st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
}

// aclXattr holds a file's access ACL.
const aclXattr = "system.posix_acl_access"

// copyACL gives dst src's access ACL, after the mode: a mode alone turns the ACL's mask into the owning
// group's permissions, so a copy without the ACL (and the file a restore puts back from it) could be
// readable by a group the ACL shut out. A file system without ACLs has none to copy.
func copyACL(dst, src int) error {
	buf := make([]byte, 4096)
	n, err := unix.Fgetxattr(src, aclXattr, buf)
	if err == unix.ERANGE {
		if n, err = unix.Fgetxattr(src, aclXattr, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Fgetxattr(src, aclXattr, buf)
		}
	}
	switch {
	case err == unix.ENODATA || err == unix.ENOTSUP:
		return nil
	case err != nil:
		return fmt.Errorf("read the file's ACL: %w", err)
	}
	if err := unix.Fsetxattr(dst, aclXattr, buf[:n], 0); err != nil {
		return fmt.Errorf("give the copy the file's ACL: %w", err)
	}
	return nil
}

// copyData copies the first size bytes of src to dst, the data extents only (SEEK_DATA/SEEK_HOLE): a
// hole of src stays a hole of dst. Invariant: a copy takes no more space than its source. Anyone who can
// truncate a file through an --allow-other mount makes a file of terabytes that takes no space in an
// instant (truncate -s 10T); copied byte for byte (copy_file_range and read/write write every zero), its
// truncation would make the daemon fill the store's filesystem, root's reserved blocks included, for as
// long as the quarantine keeps entries. src's file offset moves (the caller's descriptor is its own open).
func copyData(dst, src int, size int64) error {
	if err := unix.Ftruncate(dst, size); err != nil {
		return err
	}
	for off := int64(0); off < size; {
		data, err := unix.Seek(src, off, unix.SEEK_DATA)
		switch {
		case err == unix.ENXIO:
			return nil // no data past off (or src shrank: Prepare's second stat says so)
		case err == unix.EINVAL || err == unix.EOPNOTSUPP:
			return copyRange(dst, src, off, size) // no hole reporting: everything is data
		case err != nil:
			return err
		}
		if data >= size {
			return nil
		}
		hole, err := unix.Seek(src, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		end := min(hole, size)
		if err := copyRange(dst, src, data, end); err != nil {
			return err
		}
		off = end
	}
	return nil
}

// copyRange copies the bytes [off, size) of src to dst with copy_file_range (in-kernel, server-side on NFS 4.2),
// or read and write where the filesystems cannot. A file shorter than size is ErrChanged.
func copyRange(dst, src int, off, size int64) error {
	for off < size {
		in, out := off, off
		n, err := unix.CopyFileRange(src, &in, dst, &out, int(min(size-off, 1<<30)), 0)
		if err == unix.EXDEV || err == unix.EINVAL || err == unix.ENOSYS || err == unix.EOPNOTSUPP {
			return copyRW(dst, src, off, size)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrChanged
		}
		off += int64(n)
	}
	return nil
}

func copyRW(dst, src int, off, size int64) error {
	buf := make([]byte, 1<<20)
	for off < size {
		n, err := unix.Pread(src, buf[:min(int64(len(buf)), size-off)], off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrChanged
		}
		for w := 0; w < n; {
			m, err := unix.Pwrite(dst, buf[w:n], off+int64(w))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			w += m
		}
		off += int64(n)
	}
	return nil
}

// abort removes the uncommitted copy and releases the descriptors.
func (p *Prepared) abort() {
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
	if p.dir >= 0 {
		_ = unix.Unlinkat(p.dir, p.id+stageSuffix, 0)
		p.release()
	}
}

func (p *Prepared) release() {
	if p.dir >= 0 {
		unix.Close(p.dir)
		p.dir = -1
	}
}

// Abort removes an uncommitted copy (the change was refused or failed before the commit).
func (p *Prepared) Abort() {
	if p != nil {
		p.abort()
	}
}

// Commit makes the copy an entry staged by the change d (OpTruncate, OpAllocate), if the file is still the one
// copied (else ErrChanged, and the copy is removed): the record, then the rename to the entry's name.
// It is quick (no copy): it runs under the enforcer's lock right before the truncation. If the
// truncation then fails, Undo drops the entry; else Done releases the descriptor.
func (p *Prepared) Commit(d quarantine.Decision) (quarantine.Entry, error) {
	if err := p.l.lock(); err != nil {
		p.abort()
		return quarantine.Entry{}, err
	}
	defer p.l.mu.RUnlock()
	var st unix.Stat_t
	if err := unix.Fstat(p.src, &st); err != nil || sourceOf(&st) != sourceOf(&p.st) {
		p.abort()
		return quarantine.Entry{}, ErrChanged
	}
	unix.Close(p.fd)
	p.fd = -1
	src := sourceOf(&p.st)
	e := quarantine.Entry{ID: p.id, Path: p.key, Size: p.st.Size, ModTime: time.Unix(p.st.Mtim.Unix()), Mode: p.st.Mode,
		DeletedAt: p.l.now().UTC(), Decision: d, Source: &src}
	if !utf8.ValidString(p.key) {
		e.PathBytes = []byte(p.key)
	}
	if err := p.l.writeRecord(e); err != nil {
		p.abort()
		return quarantine.Entry{}, err
	}
	if err := unix.Renameat(p.dir, p.id+stageSuffix, p.dir, p.id); err != nil {
		p.abort()
		return quarantine.Entry{}, fmt.Errorf("quarantine /%s: %w", p.key, err)
	}
	p.e = e
	return e, nil
}

// Undo drops a committed entry whose truncation failed (the content is still at its key).
func (p *Prepared) Undo() {
	if p.dir >= 0 {
		_ = unix.Unlinkat(p.dir, p.id, 0)
	}
	p.release()
}

// Done releases a committed entry's descriptor once its change happened. A change that left the file's
// Source as it was (a hole punched or a range zeroed keeps the size, and a ctime within the clock tick
// of the file's last change does not move) would make the entry look like a change that never
// happened, and Tidy would remove the only copy of the destroyed bytes: its record is written again
// without the Source, so it is an entry whatever the file looks like. (A crash before that rewrite, in
// the same tick, is the one case left: the entry is then hidden.)
func (p *Prepared) Done() error {
	defer p.release()
	var st unix.Stat_t
	if p.e.Source == nil || unix.Fstat(p.src, &st) != nil || sourceOf(&st) != *p.e.Source {
		return nil
	}
	if err := p.l.lock(); err != nil {
		return err
	}
	defer p.l.mu.RUnlock()
	e := p.e
	e.Source = nil
	if err := p.l.writeRecord(e); err != nil {
		return fmt.Errorf("quarantine /%s: the change left the file's size and times as they were, and its entry %s could not be marked as applied (a later tidy would take it for a change that never happened): %w", p.key, p.id, err)
	}
	return nil
}

// unchanged reports whether the file at e's key is still the content e's truncation copied (the
// truncation never happened: a crash between the commit and the truncation).
func (l *Local) unchanged(e quarantine.Entry) bool {
	if e.Source == nil {
		return false
	}
	k := e.Key()
	i := strings.LastIndexByte(k, '/')
	dir, name := "", k
	if i >= 0 {
		dir, name = k[:i], k[i+1:]
	}
	fd, err := l.openDirLocked(dir)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	return sourceOf(&st) == *e.Source
}
