package shared

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ckguard/ckguard/internal/fsync"
)

// Local is the CAS of a local or NFS store: a record is a folder <name>.rec below Dir/Version whose
// files are its generations, named by their number (zero-padded to 20 digits). The current version
// is the highest generation. A write of generation g+1 is a temporary file, fsync'ed, then link(2)ed
// to its generation's name: link never replaces, so of two writers conditional on g exactly one
// succeeds (EEXIST for the other: ErrConflict), and a reader sees a generation whole or not at all.
// On NFS a link whose reply was lost and retransmitted answers EEXIST although it was applied: the
// name's inode is then the temporary file's, which Put checks.
//
// Old generations are removed by the writer of a newer one, keeping the last keepGens, in order, and
// only a generation whose successor is older than gcAge by the store's clock (the new file's mtime): a
// writer conditional on g links g+1, which must not have been removed meanwhile. Update reads right
// before it writes, so that holds unless a process stops for gcAge between the two (then its link
// could land as a generation below the newest, which no reader takes: the change is lost, never
// applied over another). On NFS a listing may be cached (acdirmax): Get probes the generations above
// the newest listed by name, which the server answers.
type Local struct {
	base    string           // <store root>/.ckguard/v1
	folders []folderIdentity // Dir, Version and .tmp as NewLocal checked them
}

// folderIdentity is one of the area's folders as NewLocal found it: every operation checks that the
// path still names that folder (see Local.check).
type folderIdentity struct {
	path     string
	dev, ino uint64
}

const (
	recSuffix = ".rec"
	keepGens  = 8
	gcAge     = time.Hour
)

// NewLocal opens (creating) the shared area of the local store at root.
//
// The area's folders must be ckguard's alone: every one of them (Dir, Version, .tmp) is a real folder,
// not a symlink, owned by the user running ckguard and writable by no one else; one is made (0700)
// where it is missing. Otherwise NewLocal refuses, naming the folder: another user who made or replaced
// one (in a store whose root everyone may write, a 1777 NFS export) could forge or drop pins and
// leases, or, through a symlink, choose where root creates files. Below them only ckguard creates
// anything, so the path operations that follow act on its own folders.
func NewLocal(root string) (*Local, error) {
	base := filepath.Join(root, Dir, Version)
	l := &Local{base: base}
	for _, d := range []string{filepath.Join(root, Dir), base, filepath.Join(base, ".tmp")} {
		if err := ownFolder(d); err != nil {
			return nil, err
		}
		fi, err := os.Lstat(d)
		if err != nil {
			return nil, fmt.Errorf("shared state folder %s: %w", d, err)
		}
		st := fi.Sys().(*syscall.Stat_t) // ownFolder checked it is one
		l.folders = append(l.folders, folderIdentity{path: d, dev: uint64(st.Dev), ino: st.Ino})
	}
	return l, nil
}

// check refuses an operation once one of the area's folders is no longer the one NewLocal checked: on
// a store root everyone may write without the sticky bit, another user can rename ckguard's folder
// away while the mount runs and put one of theirs in its place, whose empty pins would read as "no
// pin" and into which records would be written. The paths are checked before each operation (three
// lstats); a swap between the check and the operation's own path walk is not caught (the mount's own
// operations would need to run by descriptor from the checked folder for that).
func (l *Local) check() error {
	for _, f := range l.folders {
		fi, err := os.Lstat(f.path)
		if err != nil {
			return fmt.Errorf("shared state folder %s: %w", f.path, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || !fi.IsDir() || uint64(st.Dev) != f.dev || st.Ino != f.ino {
			return fmt.Errorf("the shared state folder %s is not the one this mount started with: someone moved ckguard's folder away and put something else there, so nothing is read from or written to it. Inspect it, move it out of the store, put ckguard's folder back (or let a restart make a new one) and restart the mount", f.path)
		}
		if err := ownFolder(f.path); err != nil {
			return err
		}
	}
	return nil
}

// ownFolder makes the folder d (0700) if it is missing and checks it is the daemon's own (see NewLocal).
func ownFolder(d string) error {
	if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create the shared state folder %s: %w", d, err)
	}
	fi, err := os.Lstat(d)
	if err != nil {
		return fmt.Errorf("shared state folder %s: %w", d, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	euid := os.Geteuid()
	switch {
	case fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir():
		return fmt.Errorf("the shared state folder %s is not a folder of ckguard's (a %s): someone else put it there; inspect it, move it out of the store, and start again (a new one is made)", d, fi.Mode().Type())
	case !ok:
		return fmt.Errorf("shared state folder %s: no owner to check", d)
	case int(st.Uid) != euid || st.Mode&0o022 != 0:
		return fmt.Errorf("the shared state folder %s is owned by uid %d with mode %04o, but must be owned by uid %d (who runs ckguard) and writable by nobody else: someone else made or replaced it, so its pins and leases cannot be trusted. If ckguard runs as another user on other hosts, run it as that user here; else inspect the folder, move it out of the store, and start again (a new one is made)", d, st.Uid, st.Mode&0o7777, euid)
	}
	return nil
}

// Where implements CAS.
func (l *Local) Where() string { return l.base }

func (l *Local) dir(name string) string {
	return filepath.Join(l.base, filepath.FromSlash(name)+recSuffix)
}

func genName(g uint64) string { return fmt.Sprintf("%020d", g) }

// version is the generation's number.
func version(g uint64) string { return strconv.FormatUint(g, 10) }

func parseVersion(v string) (uint64, error) {
	g, err := strconv.ParseUint(v, 10, 64)
	if err != nil || g == 0 {
		return 0, fmt.Errorf("bad shared record version %q", v)
	}
	return g, nil
}

// newest returns the highest generation of a record folder: the listing's, then probed upwards by
// name (a listing cached by an NFS client may miss the newest).
func newest(dir string) (uint64, error) {
	gs, err := gens(dir)
	if err != nil {
		return 0, err
	}
	if len(gs) == 0 {
		return 0, fs.ErrNotExist
	}
	g := gs[len(gs)-1]
	for {
		if _, err := os.Lstat(filepath.Join(dir, genName(g+1))); err != nil {
			return g, nil
		}
		g++
	}
}

// gens returns the generations present in a record folder, ascending.
func gens(dir string) ([]uint64, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, e := range es {
		if g, err := strconv.ParseUint(e.Name(), 10, 64); err == nil && len(e.Name()) == 20 {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// Get implements CAS.
func (l *Local) Get(ctx context.Context, name string) ([]byte, string, error) {
	if err := ValidName(name); err != nil {
		return nil, "", err
	}
	if err := l.check(); err != nil {
		return nil, "", err
	}
	dir := l.dir(name)
	for try := 0; ; try++ {
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		g, err := newest(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, "", fmt.Errorf("shared record %s: %w", name, fs.ErrNotExist)
		}
		if err != nil {
			return nil, "", fmt.Errorf("shared record %s: %w", name, err)
		}
		b, err := readBounded(filepath.Join(dir, genName(g)))
		if errors.Is(err, fs.ErrNotExist) && try < 3 {
			continue // removed after newer ones were written: read the newest again
		}
		if errors.Is(err, errTooLong) {
			return nil, "", &DamagedError{Record: l.base + "/" + name, Err: err}
		}
		if err != nil {
			return nil, "", fmt.Errorf("shared record %s: %w", name, err)
		}
		return b, version(g), nil
	}
}

var errTooLong = fmt.Errorf("longer than %d bytes, more than a shared record holds", MaxRecordBytes)

// readBounded reads a generation file, at most MaxRecordBytes of it: a file of hostile length is never
// read whole.
func readBounded(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxRecordBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxRecordBytes {
		return nil, errTooLong
	}
	return b, nil
}

// Put implements CAS.
func (l *Local) Put(ctx context.Context, name string, data []byte, prev string) (string, error) {
	if err := ValidName(name); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := l.check(); err != nil {
		return "", err
	}
	next := uint64(1)
	if prev != "" {
		g, err := parseVersion(prev)
		if err != nil {
			return "", err
		}
		next = g + 1
	}
	dir := l.dir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("shared record %s: %w", name, err)
	}
	if next == 1 {
		// Generation 1 is removed once the record is past keepGens: a create must not link it anew
		// under a record that exists (the window to the link is far shorter than gcAge).
		if _, err := newest(dir); err == nil {
			return "", ErrConflict
		}
	}
	tmp, err := os.CreateTemp(filepath.Join(l.base, ".tmp"), "w-")
	if err != nil {
		return "", fmt.Errorf("shared record %s: %w", name, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	var tst os.FileInfo
	if err == nil {
		tst, err = tmp.Stat()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("shared record %s: write %s: %w", name, tmp.Name(), err)
	}
	target := filepath.Join(dir, genName(next))
	if err := os.Link(tmp.Name(), target); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("shared record %s: %w", name, err)
		}
		if st, serr := os.Stat(target); serr != nil || !os.SameFile(st, tst) {
			return "", ErrConflict
		}
		// NFS: our link was applied and its retransmission answered EEXIST.
	}
	_ = fsync.Dir(dir)
	l.collect(dir, next, target)
	return version(next), nil
}

// collect removes old generations of a record after generation n was written (see Local).
func (l *Local) collect(dir string, n uint64, newest string) {
	st, err := os.Stat(newest)
	if err != nil || n <= keepGens {
		return
	}
	now := st.ModTime()
	gs, err := gens(dir)
	if err != nil {
		return
	}
	mtimes := map[uint64]time.Time{}
	for _, g := range gs {
		if fi, err := os.Stat(filepath.Join(dir, genName(g))); err == nil {
			mtimes[g] = fi.ModTime()
		}
	}
	for _, g := range gs {
		if g+keepGens > n {
			break
		}
		succ, ok := mtimes[g+1]
		if !ok || now.Sub(succ) < gcAge {
			break // removed in order: a gap could let a stale writer's link land
		}
		_ = os.Remove(filepath.Join(dir, genName(g)))
	}
}

// List implements CAS.
func (l *Local) List(ctx context.Context, prefix string) ([]Entry, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	var out []Entry
	err := filepath.WalkDir(l.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != l.base && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if !d.IsDir() || p == l.base {
			return nil
		}
		rel, _ := filepath.Rel(l.base, p)
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(rel, ".") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(rel, recSuffix) {
			if !strings.HasPrefix(rel+"/", prefix) && !strings.HasPrefix(prefix, rel+"/") {
				return filepath.SkipDir
			}
			return nil
		}
		name := strings.TrimSuffix(rel, recSuffix)
		if strings.HasPrefix(name, prefix) {
			if g, err := newest(p); err == nil {
				out = append(out, Entry{Name: name, Version: version(g)})
			}
		}
		return filepath.SkipDir
	})
	if err != nil {
		return nil, fmt.Errorf("list the shared state %s: %w", l.base, err)
	}
	return out, nil
}
