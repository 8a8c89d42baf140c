// Package hdfsquarantine is the quarantine area of an HDFS store: the directory store.QuarantineDir
// at the store root. The staged file itself is moved there by a rename (one NameNode operation: its
// blocks, size and mtime are untouched), under a name that makes it a complete entry:
//
//   - <id>~<op>~<uid>~<gid>~<pid>~<comm>~<key> (comm and key base64url-encoded): the name is the
//     entry record, so a staging is the rename alone. Every key whose name fits in nameLimit bytes.
//   - <id> beside <id>.json, its entry record written (and closed) before the rename, for a longer key:
//     a record is a file written through a DataNode, an order of magnitude dearer than the rename
//     (HDFS has no atomic append a crash could not tear, so one small file per entry, written once).
//
// Invariant, across a crash at any point: a file is at its original key or in the area, never lost and
// never in both, and never in the area without its original key known. A restore renames the file back,
// never replacing anything at the key (ErrOccupied), then removes the record if any; a purge removes the
// file, then the record. A record without its file is no entry (the file is at its key, or purged) and
// is skipped, then removed by Tidy; a file without a readable record is reported as a problem and never
// purged.
package hdfsquarantine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// recordSuffix names an entry record file.
const recordSuffix = ".json"

// maxRecord bounds one entry record read back: a record is a few hundred bytes, and a hostile file in
// the area must not make the reader allocate gigabytes.
const maxRecord = 1 << 20

// Area is the quarantine area of one HDFS store.
type Area struct {
	fs   hdfsclient.FS
	root string // the store root (absolute HDFS path)
	dir  string // root/store.QuarantineDir, as messages name it
	// ref names the folder in every call: its inode path (hdfsclient.InodePath) when the NameNode
	// reports inode ids. A user who can write the store root can rename the folder away and put one of
	// their own at its path while the mount runs; stagings, listings, restores and purges stay in the
	// folder Open checked, wherever it is.
	ref string
	now func() time.Time

	// recs caches records read back, by id: a record is written once and never changed, so the area's
	// listing (after every sync, for the purge and the gauges) reads only the records it has not seen.
	// A cached record is used only while the record file has the size and mtime it had when read.
	mu   sync.Mutex
	recs map[string]cachedRecord
}

type cachedRecord struct {
	size  int64
	mtime time.Time
	e     quarantine.Entry
}

var _ quarantine.Staging = (*Area)(nil)

// Open returns the area of the store whose root directory is root (absolute), creating its directory
// (mode 0700: only the daemon's HDFS user reads what others deleted). now is the clock of deletion
// times (nil: time.Now).
func Open(ctx context.Context, f hdfsclient.FS, root string, now func() time.Time) (*Area, error) {
	if now == nil {
		now = time.Now
	}
	dir := hdfsclient.Join(root, store.QuarantineDir)
	if err := f.Mkdir(ctx, dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create the quarantine folder %s: %w", dir, err)
	}
	fi, err := f.Stat(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("the quarantine folder %s: %w", dir, err)
	}
	if !fi.IsDir || fi.Symlink {
		return nil, fmt.Errorf("the quarantine folder %s is not a directory; move it away (the mount keeps deletions there)", dir)
	}
	a := &Area{fs: f, root: root, dir: dir, ref: dir, now: now, recs: map[string]cachedRecord{}}
	if err := a.ownFolder(ctx, fi); err != nil {
		return nil, err
	}
	// Where the inode path does not resolve to the folder (a router of a federated namespace answers
	// for several NameNodes and knows no inode paths), the folder is named by its path.
	if fi.ID != 0 {
		if ifi, err := f.Stat(ctx, hdfsclient.InodePath(fi.ID)); err == nil && ifi.IsDir && ifi.ID == fi.ID {
			a.ref = hdfsclient.InodePath(fi.ID)
		}
	}
	return a, nil
}

// ByPath says the folder is named by its path, not its inode (the NameNode resolves no inode paths):
// a user who can write the store root could then swap the folder while the mount runs.
func (a *Area) ByPath() bool { return a.ref == a.dir }

// ownFolder refuses a quarantine folder that is not this client's alone. The store root is writable by
// the Flink jobs' HDFS user, who can make the folder before the first mount with --quarantine (or
// rename the daemon's away and make another between two mounts): staged files would then move into a
// folder that user controls (readable, renamable, removable by them), and the names of its entries
// would tell the daemon what to restore where, as which uid. Only a folder owned by the user the
// NameNode sees this client as, and writable by no one else, holds entries.
func (a *Area) ownFolder(ctx context.Context, fi hdfsclient.FileInfo) error {
	if fi.Mode.Perm()&0o022 != 0 {
		return fmt.Errorf("the quarantine folder %s is owned by %s with mode %04o, writable by others: someone else made or changed it, and its entries cannot be trusted; inspect it, move it out of the store, and start again (a new one is made with mode 0700)",
			a.dir, fi.Owner, fi.Mode.Perm())
	}
	if fi.Owner == a.fs.User() {
		return nil
	}
	// The NameNode may map this client's principal to another owner name (auth_to_local): the owner
	// of a file this client creates in the folder is the name it goes by. The probe is named as a
	// record without its file, so a probe a crash leaves behind is no entry and is removed by Tidy.
	probe := a.record(quarantine.NewID(a.now()))
	w, err := a.fs.Create(ctx, probe, 0o600)
	if err != nil {
		return fmt.Errorf("the quarantine folder %s is owned by %s, not by %s who runs ckguard, and cannot be written (%w): someone else made it; inspect it, move it out of the store, and start again",
			a.dir, fi.Owner, a.fs.User(), err)
	}
	cerr := w.Close()
	pfi, serr := a.fs.Stat(ctx, probe)
	_ = a.fs.Remove(context.WithoutCancel(ctx), probe)
	if cerr != nil || serr != nil {
		return fmt.Errorf("the quarantine folder %s: check who owns it with the file %s: %w", a.dir, probe, errors.Join(cerr, serr))
	}
	if pfi.Owner != fi.Owner {
		return fmt.Errorf("the quarantine folder %s is owned by %s, but ckguard runs as %s: someone else made or replaced it, and its entries cannot be trusted. If a mount running as %s made it, run this as that user; else inspect it, move it out of the store, and start again (a new one is made)",
			a.dir, fi.Owner, pfi.Owner, fi.Owner)
	}
	return nil
}

// Dir is the area's absolute HDFS directory.
func (a *Area) Dir() string { return a.dir }

// nameLimit bounds a self-describing entry name: HDFS refuses names longer than
// dfs.namenode.fs-limits.max-component-length (255 bytes by default); a longer key takes a record file.
const nameLimit = 240

// entryName is the self-describing name of e ("" when it does not fit in nameLimit).
func entryName(e quarantine.Entry) string { return quarantine.EntryName(e, nameLimit) }

// parseName reads the entry a self-describing name records (ok false: the name is not one).
func parseName(name string) (quarantine.Entry, bool, error) { return quarantine.ParseEntryName(name) }

// validID reports whether id can name a file of the area.
func validID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\x00") && !strings.HasSuffix(id, recordSuffix)
}

// object and record are the paths of id's file and record in calls; shown is the path messages name.
func (a *Area) object(id string) string  { return a.ref + "/" + id }
func (a *Area) record(id string) string  { return a.ref + "/" + id + recordSuffix }
func (a *Area) shown(name string) string { return a.dir + "/" + name }

// checkKey returns key cleaned, or an error when it is no file key outside the area.
func checkKey(key string) (string, error) {
	k, err := store.CleanKey(key)
	if err != nil || k == "" || k != key || store.InQuarantine(k) {
		return "", fmt.Errorf("quarantine %q: not a store key outside the quarantine folder", key)
	}
	return k, nil
}

// Pending is a staging whose file has not moved yet (its record, when it needs one, is written):
// Commit moves it (one rename, the only step a mount takes under the enforcer's lock), Drop abandons it.
type Pending struct {
	a      *Area
	e      quarantine.Entry
	abs    string
	record bool // a record file was written (a key too long for a self-describing name)
}

// Prepare readies staging the file at key with decision d; observed is what the caller saw of it (nil:
// it is stat'ed; the listing of the area reports the staged file's own size and mtime in any case).
// Nothing moves yet. A key too long for a self-describing name gets its record file written here:
// until Commit, the record alone is no entry.
func (a *Area) Prepare(ctx context.Context, key string, observed *hdfsclient.FileInfo, d quarantine.Decision) (*Pending, error) {
	k, err := checkKey(key)
	if err != nil {
		return nil, err
	}
	abs := hdfsclient.Join(a.root, k)
	var fi hdfsclient.FileInfo
	if observed != nil {
		fi = *observed
	} else if fi, err = a.fs.Stat(ctx, abs); err != nil {
		return nil, fmt.Errorf("quarantine /%s: %w", k, err)
	}
	if fi.IsDir || fi.Symlink {
		return nil, fmt.Errorf("quarantine /%s: a directory holds no content to stage: %w", k, fs.ErrInvalid)
	}
	now := a.now()
	e := quarantine.Entry{ID: quarantine.NewID(now), Path: k, Size: fi.Size, ModTime: fi.ModTime, Mode: uint32(fi.Mode.Perm()), DeletedAt: now.UTC(), Decision: d}
	if !utf8.ValidString(k) {
		e.PathBytes = []byte(k)
	}
	if name := entryName(e); name != "" {
		e.ID = name
		return &Pending{a: a, e: e, abs: abs}, nil
	}
	if err := a.writeRecord(ctx, e); err != nil {
		return nil, fmt.Errorf("quarantine /%s: %w (nothing was deleted)", k, err)
	}
	return &Pending{a: a, e: e, abs: abs, record: true}, nil
}

// Commit moves the file into the area. A rename whose answer was lost may still have happened: the
// record is removed only once the area is seen not to hold the file (otherwise it stays, an entry if
// the file arrived, else no entry until Tidy), and a file found moved is a committed staging.
func (p *Pending) Commit(ctx context.Context) (quarantine.Entry, error) {
	err := p.a.fs.Rename(ctx, p.abs, p.a.object(p.e.ID))
	if err == nil {
		return p.e, nil
	}
	cctx := context.WithoutCancel(ctx)
	if _, serr := p.a.fs.Stat(cctx, p.a.object(p.e.ID)); serr == nil {
		return p.e, nil
	} else if errors.Is(serr, fs.ErrNotExist) {
		p.Drop(cctx)
	}
	return quarantine.Entry{}, fmt.Errorf("quarantine /%s: move it to %s: %w (nothing was deleted)", p.e.Path, p.a.shown(p.e.ID), err)
}

// Drop removes the record of a staging that is not committed (a refused or failed change). A record
// left behind (the removal failing) is no entry; Tidy removes it.
func (p *Pending) Drop(ctx context.Context) {
	if p.record {
		_ = p.a.fs.Remove(ctx, p.a.record(p.e.ID))
	}
}

// Entry is the entry the staging records.
func (p *Pending) Entry() quarantine.Entry { return p.e }

// Stage moves the file at key into the area (Prepare, then Commit).
func (a *Area) Stage(ctx context.Context, key string, d quarantine.Decision) (quarantine.Entry, error) {
	p, err := a.Prepare(ctx, key, nil, d)
	if err != nil {
		return quarantine.Entry{}, err
	}
	return p.Commit(ctx)
}

// Restage stages the file at key again (a restored `_metadata` the index could not record).
func (a *Area) Restage(ctx context.Context, key string, d quarantine.Decision) (quarantine.Entry, error) {
	return a.Stage(ctx, key, d)
}

// writeRecord creates e's record file; it is complete once Close returned (a torn record has no file
// moved under it).
func (a *Area) writeRecord(ctx context.Context, e quarantine.Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	w, err := a.fs.Create(ctx, a.record(e.ID), 0o600)
	if err != nil {
		return fmt.Errorf("write the entry record %s: %w", a.shown(e.ID+recordSuffix), err)
	}
	_, werr := w.Write(b)
	if cerr := w.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = a.fs.Remove(context.WithoutCancel(ctx), a.record(e.ID))
		return fmt.Errorf("write the entry record %s: %w", a.shown(e.ID+recordSuffix), werr)
	}
	return nil
}

// readRecord reads the record of id listed as fi (the cached copy while the file is unchanged).
func (a *Area) readRecord(ctx context.Context, id string, fi hdfsclient.FileInfo) (quarantine.Entry, error) {
	a.mu.Lock()
	c, ok := a.recs[id]
	a.mu.Unlock()
	if ok && c.size == fi.Size && c.mtime.Equal(fi.ModTime) {
		return c.e, nil
	}
	if fi.Size > maxRecord {
		return quarantine.Entry{}, fmt.Errorf("entry record %s is %d bytes, more than %d: not a record of ours", a.shown(id+recordSuffix), fi.Size, maxRecord)
	}
	r, err := a.fs.Open(ctx, a.record(id))
	if err != nil {
		return quarantine.Entry{}, err
	}
	defer r.Close()
	b := make([]byte, r.Size())
	if int64(len(b)) > maxRecord {
		return quarantine.Entry{}, fmt.Errorf("entry record %s is more than %d bytes: not a record of ours", a.shown(id+recordSuffix), maxRecord)
	}
	if n, err := r.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && n == len(b)) {
		return quarantine.Entry{}, fmt.Errorf("entry record %s: %w", a.shown(id+recordSuffix), err)
	}
	var e quarantine.Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return quarantine.Entry{}, fmt.Errorf("entry record %s: %w", a.shown(id+recordSuffix), err)
	}
	if e.ID != id {
		return quarantine.Entry{}, fmt.Errorf("entry record %s names id %q", a.shown(id+recordSuffix), e.ID)
	}
	a.mu.Lock()
	a.recs[id] = cachedRecord{size: fi.Size, mtime: fi.ModTime, e: e}
	a.mu.Unlock()
	return e, nil
}

// listing is the area's directory: files by id, records by id.
type listing struct {
	objs map[string]hdfsclient.FileInfo
	recs map[string]hdfsclient.FileInfo
	dirs []hdfsclient.FileInfo // nothing of ours is a directory
}

func (a *Area) list(ctx context.Context) (listing, error) {
	l := listing{objs: map[string]hdfsclient.FileInfo{}, recs: map[string]hdfsclient.FileInfo{}}
	err := a.fs.List(ctx, a.ref, func(page []hdfsclient.FileInfo) error {
		for _, fi := range page {
			switch {
			case fi.IsDir || fi.Symlink:
				l.dirs = append(l.dirs, fi)
			case strings.HasSuffix(fi.Name, recordSuffix):
				l.recs[strings.TrimSuffix(fi.Name, recordSuffix)] = fi
			default:
				l.objs[fi.Name] = fi
			}
		}
		return nil
	})
	if err != nil {
		return listing{}, fmt.Errorf("list the quarantine folder %s: %w", a.dir, err)
	}
	return l, nil
}

// ListAll returns every entry (a file in the area with its record), oldest first, and a problem for
// every file without a readable record. A record without its file is no entry.
func (a *Area) ListAll(ctx context.Context) ([]quarantine.Entry, []quarantine.Problem, error) {
	l, err := a.list(ctx)
	if err != nil {
		return nil, nil, err
	}
	var es []quarantine.Entry
	var probs []quarantine.Problem
	for id, ofi := range l.objs {
		if e, ok, err := parseName(id); ok {
			if err != nil {
				probs = append(probs, quarantine.Problem{ID: id, Size: ofi.Size, Detail: err.Error() + "; inspect " + a.shown(id) + " in HDFS"})
				continue
			}
			e.Size, e.ModTime = ofi.Size, ofi.ModTime
			es = append(es, e)
			continue
		}
		rfi, ok := l.recs[id]
		if !ok {
			probs = append(probs, quarantine.Problem{ID: id, Size: ofi.Size, Detail: "file without an entry record (its original path is unknown); inspect " + a.shown(id) + " in HDFS"})
			continue
		}
		e, err := a.readRecord(ctx, id, rfi)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			probs = append(probs, quarantine.Problem{ID: id, Size: ofi.Size, Detail: err.Error() + "; inspect " + a.shown(id) + " in HDFS"})
			continue
		}
		// The staged file is the truth about the content (a file replaced between the record and the
		// rename is the one moved).
		e.Size, e.ModTime = ofi.Size, ofi.ModTime
		es = append(es, e)
	}
	for _, fi := range l.dirs {
		probs = append(probs, quarantine.Problem{ID: fi.Name, Detail: "not a file of ckguard's; inspect " + a.shown(fi.Name) + " in HDFS"})
	}
	quarantine.SortEntries(es)
	return es, probs, nil
}

// List returns every entry, oldest first.
func (a *Area) List(ctx context.Context) ([]quarantine.Entry, error) {
	es, _, err := a.ListAll(ctx)
	return es, err
}

// Find returns the newest entry staged from key.
func (a *Area) Find(ctx context.Context, key string) (quarantine.Entry, bool, error) {
	es, err := a.List(ctx)
	if err != nil {
		return quarantine.Entry{}, false, err
	}
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].Key() == key {
			return es[i], true, nil
		}
	}
	return quarantine.Entry{}, false, nil
}

// entry returns id's entry: its file in the area and its record.
func (a *Area) entry(ctx context.Context, id string) (quarantine.Entry, error) {
	if !validID(id) {
		return quarantine.Entry{}, fmt.Errorf("%w: %q", quarantine.ErrNoEntry, id)
	}
	ofi, err := a.fs.Stat(ctx, a.object(id))
	if errors.Is(err, fs.ErrNotExist) {
		return quarantine.Entry{}, fmt.Errorf("%w: %s", quarantine.ErrNoEntry, id)
	}
	if err != nil {
		return quarantine.Entry{}, err
	}
	if ofi.IsDir || ofi.Symlink {
		return quarantine.Entry{}, fmt.Errorf("%w: %s (not a file)", quarantine.ErrNoEntry, id)
	}
	if e, ok, err := parseName(id); ok {
		if err != nil {
			return quarantine.Entry{}, fmt.Errorf("%w: %v", quarantine.ErrNoEntry, err)
		}
		e.Size, e.ModTime = ofi.Size, ofi.ModTime
		return e, nil
	}
	rfi, err := a.fs.Stat(ctx, a.record(id))
	if errors.Is(err, fs.ErrNotExist) {
		return quarantine.Entry{}, fmt.Errorf("%w: %s (the file has no entry record)", quarantine.ErrNoEntry, id)
	}
	if err != nil {
		return quarantine.Entry{}, err
	}
	e, err := a.readRecord(ctx, id, rfi)
	if err != nil {
		return quarantine.Entry{}, err
	}
	e.Size, e.ModTime = ofi.Size, ofi.ModTime
	return e, nil
}

// Restore renames the entry's file back to its original key (creating the folders on the way), never
// replacing anything there (ErrOccupied), then removes the record.
func (a *Area) Restore(ctx context.Context, id string) (quarantine.Entry, error) {
	e, err := a.entry(ctx, id)
	if err != nil {
		return quarantine.Entry{}, err
	}
	key, err := checkKey(e.Key())
	if err != nil {
		return quarantine.Entry{}, fmt.Errorf("restore %s: the entry's original path %q is not a store key outside the quarantine folder", id, e.Key())
	}
	abs := hdfsclient.Join(a.root, key)
	if parent := path.Dir(abs); parent != a.root {
		if err := a.fs.MkdirAll(ctx, parent, 0o755); err != nil {
			return quarantine.Entry{}, fmt.Errorf("restore /%s: create its folder: %w", key, err)
		}
	}
	if err := a.fs.Rename(ctx, a.object(id), abs); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return quarantine.Entry{}, fmt.Errorf("restore /%s: %w: something is there now, and a restore never replaces it; move it away first (entry %s stays in quarantine)", key, quarantine.ErrOccupied, id)
		}
		return quarantine.Entry{}, fmt.Errorf("restore /%s: %w", key, err)
	}
	// Without its file the record is no entry: a failure to remove it leaves it for Tidy.
	if !strings.Contains(id, quarantine.NameSep) {
		_ = a.fs.Remove(context.WithoutCancel(ctx), a.record(id))
	}
	a.forget(id)
	return e, nil
}

// Purge removes the entry's file for good (never to the HDFS trash: the quarantine is the trash), then
// its record.
func (a *Area) Purge(ctx context.Context, id string) error {
	e, err := a.entry(ctx, id)
	if err != nil {
		return err
	}
	if err := a.fs.Remove(ctx, a.object(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("purge /%s (entry %s): %w", e.Path, id, err)
	}
	if !strings.Contains(id, quarantine.NameSep) {
		_ = a.fs.Remove(context.WithoutCancel(ctx), a.record(id))
	}
	a.forget(id)
	return nil
}

func (a *Area) forget(id string) {
	a.mu.Lock()
	delete(a.recs, id)
	a.mu.Unlock()
}

// Tidy removes the records without their file (a staging that never moved its file, a restore or purge
// stopped before its record went) once their id is older than minAge, so that the record of a staging
// under way is never taken from it.
func (a *Area) Tidy(ctx context.Context, minAge time.Duration) error {
	l, err := a.list(ctx)
	if err != nil {
		return err
	}
	now := a.now()
	for id := range l.recs {
		if _, ok := l.objs[id]; ok {
			continue
		}
		if t := quarantine.IDTime(id); t.IsZero() || now.Sub(t) < minAge {
			continue // not ours, or a staging may be under way
		}
		if err := a.fs.Remove(ctx, a.record(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the leftover entry record %s: %w", a.shown(id+recordSuffix), err)
		}
		a.forget(id)
	}
	return nil
}
