// Package hdfsquarantine is the quarantine area of an HDFS store: the directory store.QuarantineDir
// at the store root. The staged file itself is moved there by a rename (one NameNode operation: its
// blocks, size and mtime are untouched), into the shard folder <hour>/<minute> of its id's UTC time
// (see shardOf), under a name that makes it a complete entry:
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
// purged. Entries of areas from before the shard folders (flat, directly in the area folder) are
// listed, restored, purged and tidied as before.
package hdfsquarantine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// recordSuffix names an entry record file.
const recordSuffix = ".json"

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
	// owner is the area folder's owner (ownFolder checked it is this client); every shard folder must
	// be its too.
	owner string
	// shards caches the shard folders stagings were made in, checked, by shard (shardOf).
	shards map[string]place
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
	a := &Area{fs: f, root: root, dir: dir, ref: dir, now: now, recs: map[string]cachedRecord{}, owner: fi.Owner, shards: map[string]place{}}
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
	probe := a.recordOf(a.top(), quarantine.NewID(a.now()))
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

// validID reports whether id can name a file of the area.
func validID(id string) bool {
	return quarantine.FileName(id) && !strings.HasSuffix(id, recordSuffix)
}

// Shard folders. An HDFS directory holds at most dfs.namenode.fs-limits.max-directory-items entries
// (1,048,576 by default), and a local user can create and delete files through the mount as fast as
// the NameNode serves them: in one flat folder they would fill it, and every deletion through the mount
// would then fail (closed, but a denial of service). Each entry goes into the folder <hour>/<minute>
// (UTC, YYYYMMDDHH/MM) of its id's time instead, so one folder holds one minute's stagings: filling it
// takes 17,500 deletions a second for a whole minute, each several NameNode calls through the mount,
// beyond what a NameNode serves. The area folder holds hour folders (and the flat entries of areas from
// before the shards), an hour folder at most 60 minute folders; Tidy removes the empty ones of the past.
const (
	hourLayout   = "2006010215"
	minuteLayout = "04"
	shardDepth   = 2 // the area folder is depth 0, an hour folder 1, a minute folder 2
)

// shardOf is the shard folder of id relative to the area ("" for an id without a time: none of ours).
func shardOf(id string) string {
	t := quarantine.IDTime(id)
	if t.IsZero() {
		return ""
	}
	t = t.UTC()
	return t.Format(hourLayout) + "/" + t.Format(minuteLayout)
}

// shardName reports whether name is a shard folder's at depth (1 an hour, 2 a minute) below parent
// (the parent's rel), and when the shard's time span ends.
func shardName(parent, name string, depth int) (time.Time, bool) {
	switch depth {
	case 1:
		t, err := time.Parse(hourLayout, name)
		if err != nil || t.Format(hourLayout) != name {
			return time.Time{}, false
		}
		return t.Add(time.Hour), true
	case 2:
		t, err := time.Parse(hourLayout+minuteLayout, parent+name)
		if err != nil || len(name) != 2 || t.Format(minuteLayout) != name {
			return time.Time{}, false
		}
		return t.Add(time.Minute), true
	}
	return time.Time{}, false
}

// place is a folder of the area: ref names it in calls, shown in messages, rel relative to the area
// ("" for the area folder itself).
type place struct{ ref, shown, rel string }

func (a *Area) top() place                         { return place{ref: a.ref, shown: a.dir} }
func (p place) file(name string) string            { return p.ref + "/" + name }
func (p place) show(name string) string            { return p.shown + "/" + name }
func (p place) relName(name string) string         { return path.Join(p.rel, name) }
func (a *Area) recordOf(p place, id string) string { return p.file(id + recordSuffix) }

// child is the place of the folder name (listed or stat'ed as fi) in p. Where the NameNode resolves
// inode paths it is named by its inode, as the area folder is: what was checked is what is used.
func (a *Area) child(p place, name string, fi hdfsclient.FileInfo) place {
	c := place{ref: p.file(name), shown: p.show(name), rel: p.relName(name)}
	if !a.ByPath() && fi.ID != 0 {
		c.ref = hdfsclient.InodePath(fi.ID)
	}
	return c
}

// checkFolder refuses a shard folder that is not the area's own: a directory (no symlink) owned by the
// area folder's owner and writable by no one else. In the 0700 area folder only this client's user
// makes one; where the NameNode checks no permissions, or the superuser gave one away, a folder of
// someone else's would hand them the staged files and let them plant entries a restore puts back.
func (a *Area) checkFolder(fi hdfsclient.FileInfo, shown string) error {
	if !fi.IsDir || fi.Symlink {
		return fmt.Errorf("the quarantine folder %s is not a directory: not a folder of ckguard's", shown)
	}
	if fi.Owner != a.owner || fi.Mode.Perm()&0o022 != 0 {
		return fmt.Errorf("the quarantine folder %s is owned by %s with mode %04o, not by %s alone: someone else made or changed it, and its entries cannot be trusted",
			shown, fi.Owner, fi.Mode.Perm(), a.owner)
	}
	return nil
}

// shardPlace returns the checked shard folder shard. For a staging (create) its folders are made
// (mode 0700) and cached for the stagings of the same minute, as the area folder is checked once at
// Open; a lookup (restore, purge) checks them every time, as a listing does.
func (a *Area) shardPlace(ctx context.Context, shard string, create bool) (place, error) {
	if create {
		a.mu.Lock()
		p, ok := a.shards[shard]
		a.mu.Unlock()
		if ok {
			return p, nil
		}
	}
	p := a.top()
	for _, name := range strings.Split(shard, "/") {
		if create {
			if err := a.fs.Mkdir(ctx, p.file(name), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return place{}, fmt.Errorf("create the quarantine folder %s: %w", p.show(name), err)
			}
		}
		fi, err := a.fs.Stat(ctx, p.file(name))
		if err != nil {
			return place{}, fmt.Errorf("the quarantine folder %s: %w", p.show(name), err)
		}
		if err := a.checkFolder(fi, p.show(name)); err != nil {
			return place{}, err
		}
		p = a.child(p, name, fi)
	}
	if create {
		a.mu.Lock()
		if len(a.shards) >= 4 { // only the current minute's is staged into
			clear(a.shards)
		}
		a.shards[shard] = p
		a.mu.Unlock()
	}
	return p, nil
}

// forgetShards drops the cached shard folders (one was removed, or a staging into one failed): the
// next staging makes and checks its folder again.
func (a *Area) forgetShards() {
	a.mu.Lock()
	clear(a.shards)
	a.mu.Unlock()
}

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
	at     place // the shard folder it moves to
	record bool  // a record file was written (a key too long for a self-describing name)
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
	at, err := a.shardPlace(ctx, shardOf(e.ID), true)
	if err != nil {
		return nil, fmt.Errorf("quarantine /%s: %w (nothing was deleted)", k, err)
	}
	if name := entryName(e); name != "" {
		e.ID = name
		return &Pending{a: a, e: e, abs: abs, at: at}, nil
	}
	if err := a.writeRecord(ctx, at, e); err != nil {
		return nil, fmt.Errorf("quarantine /%s: %w (nothing was deleted)", k, err)
	}
	return &Pending{a: a, e: e, abs: abs, at: at, record: true}, nil
}

// Commit moves the file into the area. A rename whose answer was lost may still have happened: the
// record is removed only once the area is seen not to hold the file (otherwise it stays, an entry if
// the file arrived, else no entry until Tidy), and a file found moved is a committed staging.
func (p *Pending) Commit(ctx context.Context) (quarantine.Entry, error) {
	err := p.a.fs.Rename(ctx, p.abs, p.at.file(p.e.ID))
	if err == nil {
		return p.e, nil
	}
	cctx := context.WithoutCancel(ctx)
	if _, serr := p.a.fs.Stat(cctx, p.at.file(p.e.ID)); serr == nil {
		return p.e, nil
	} else if errors.Is(serr, fs.ErrNotExist) {
		p.Drop(cctx)
	}
	p.a.forgetShards() // the shard folder may be gone (another process's Tidy with its clock ahead)
	return quarantine.Entry{}, fmt.Errorf("quarantine /%s: move it to %s: %w (nothing was deleted)", p.e.Path, p.at.show(p.e.ID), err)
}

// Drop removes the record of a staging that is not committed (a refused or failed change). A record
// left behind (the removal failing) is no entry; Tidy removes it.
func (p *Pending) Drop(ctx context.Context) {
	if p.record {
		_ = p.a.fs.Remove(ctx, p.a.recordOf(p.at, p.e.ID))
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

// EntryPath is the HDFS path a staging puts the file of id at (its shard folder's; an entry of an area
// from before the shard folders is directly in Dir).
func (a *Area) EntryPath(id string) string { return a.dir + "/" + EntryRel(id) }

// EntryRel is the path a staging puts the file of id at, relative to the area folder.
func EntryRel(id string) string {
	if sh := shardOf(id); sh != "" {
		return sh + "/" + id
	}
	return id
}

// writeRecord creates e's record file in at; it is complete once Close returned (a torn record has no
// file moved under it).
func (a *Area) writeRecord(ctx context.Context, at place, e quarantine.Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	w, err := a.fs.Create(ctx, a.recordOf(at, e.ID), 0o600)
	if err != nil {
		return fmt.Errorf("write the entry record %s: %w", at.show(e.ID+recordSuffix), err)
	}
	_, werr := w.Write(b)
	if cerr := w.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = a.fs.Remove(context.WithoutCancel(ctx), a.recordOf(at, e.ID))
		return fmt.Errorf("write the entry record %s: %w", at.show(e.ID+recordSuffix), werr)
	}
	return nil
}

// readRecord reads the record of id in at, listed as fi (the cached copy while the file is unchanged).
func (a *Area) readRecord(ctx context.Context, at place, id string, fi hdfsclient.FileInfo) (quarantine.Entry, error) {
	a.mu.Lock()
	c, ok := a.recs[id]
	a.mu.Unlock()
	if ok && c.size == fi.Size && c.mtime.Equal(fi.ModTime) {
		return c.e, nil
	}
	shown := at.show(id + recordSuffix)
	if fi.Size > quarantine.MaxRecord {
		return quarantine.Entry{}, fmt.Errorf("entry record %s is %d bytes, more than %d: not a record of ours", shown, fi.Size, quarantine.MaxRecord)
	}
	r, err := a.fs.Open(ctx, a.recordOf(at, id))
	if err != nil {
		return quarantine.Entry{}, err
	}
	defer r.Close()
	b := make([]byte, r.Size())
	if int64(len(b)) > quarantine.MaxRecord {
		return quarantine.Entry{}, fmt.Errorf("entry record %s is more than %d bytes: not a record of ours", shown, quarantine.MaxRecord)
	}
	if n, err := r.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && n == len(b)) {
		return quarantine.Entry{}, fmt.Errorf("entry record %s: %w", shown, err)
	}
	var e quarantine.Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return quarantine.Entry{}, fmt.Errorf("entry record %s: %w", shown, err)
	}
	if e.ID != id {
		return quarantine.Entry{}, fmt.Errorf("entry record %s names id %q", shown, e.ID)
	}
	a.mu.Lock()
	a.recs[id] = cachedRecord{size: fi.Size, mtime: fi.ModTime, e: e}
	a.mu.Unlock()
	return e, nil
}

// located is a file of the area listed in its folder.
type located struct {
	at place
	fi hdfsclient.FileInfo
}

// folder is a shard folder listed: n counts what it held, end is when its time span ended.
type folder struct {
	at     place
	del    string // its path in its parent's (removed by name there, never by its own inode)
	end    time.Time
	n      int
	parent *folder // nil for an hour folder
}

// listing is the area: files by id, records by id (each with its folder), the shard folders deepest
// first, and what is no file of ours.
type listing struct {
	objs    map[string]located
	recs    map[string]located
	folders []*folder
	probs   []quarantine.Problem
}

func (a *Area) list(ctx context.Context) (listing, error) {
	l := listing{objs: map[string]located{}, recs: map[string]located{}}
	if err := a.listIn(ctx, &l, a.top(), nil, 0); err != nil {
		return listing{}, err
	}
	return l, nil
}

// listIn lists the folder at (depth 0 the area, 1 an hour folder, 2 a minute folder) into l: files
// are entries only in the area folder (flat, from before the shards) and in minute folders; each
// shard folder is checked (checkFolder) before what it holds is read.
func (a *Area) listIn(ctx context.Context, l *listing, at place, self *folder, depth int) error {
	type sub struct {
		fi  hdfsclient.FileInfo
		end time.Time
	}
	var subs []sub
	notOurs := func(fi hdfsclient.FileInfo, why string) {
		l.probs = append(l.probs, quarantine.Problem{ID: at.relName(fi.Name), Size: fi.Size, Detail: why + "; inspect " + at.show(fi.Name) + " in HDFS"})
	}
	err := a.fs.List(ctx, at.ref, func(page []hdfsclient.FileInfo) error {
		for _, fi := range page {
			if self != nil {
				self.n++
			}
			if fi.IsDir && !fi.Symlink && depth < shardDepth {
				if end, ok := shardName(at.rel, fi.Name, depth+1); ok {
					subs = append(subs, sub{fi, end})
					continue
				}
			}
			switch {
			case fi.IsDir || fi.Symlink || depth == 1:
				notOurs(fi, "not a file of ckguard's")
			case strings.HasSuffix(fi.Name, recordSuffix):
				id := strings.TrimSuffix(fi.Name, recordSuffix)
				if _, dup := l.recs[id]; dup {
					notOurs(fi, "a second record of the same id")
					continue
				}
				l.recs[id] = located{at, fi}
			default:
				if _, dup := l.objs[fi.Name]; dup {
					notOurs(fi, "a second file of the same id")
					continue
				}
				l.objs[fi.Name] = located{at, fi}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list the quarantine folder %s: %w", at.shown, err)
	}
	for _, s := range subs {
		if err := a.checkFolder(s.fi, at.show(s.fi.Name)); err != nil {
			notOurs(s.fi, err.Error())
			continue
		}
		f := &folder{at: a.child(at, s.fi.Name, s.fi), del: at.file(s.fi.Name), end: s.end, parent: self}
		if err := a.listIn(ctx, l, f.at, f, depth+1); err != nil {
			return err
		}
		l.folders = append(l.folders, f) // after what it holds: deepest first
	}
	return nil
}

// ListAll returns every entry (a file in the area with its record), oldest first, and a problem for
// every file without a readable record. A record without its file is no entry.
func (a *Area) ListAll(ctx context.Context) ([]quarantine.Entry, []quarantine.Problem, error) {
	l, err := a.list(ctx)
	if err != nil {
		return nil, nil, err
	}
	es, probs, err := quarantine.Pair(ctx, maps.All(l.objs), quarantine.Pairing[located]{
		Named: true,
		// A record is an entry's only in the folder of its file.
		Record: func(o located, id string) (quarantine.Entry, bool, error) {
			r, ok := l.recs[id]
			if !ok || r.at.ref != o.at.ref {
				return quarantine.Entry{}, false, nil
			}
			e, err := a.readRecord(ctx, r.at, id, r.fi)
			return e, true, err
		},
		// The staged file is the truth about the content (a file replaced between the record and the
		// rename is the one moved).
		Complete: func(o located, e quarantine.Entry, _ bool) (quarantine.Entry, bool) {
			e.Size, e.ModTime = o.fi.Size, o.fi.ModTime
			return e, true
		},
		Problem: func(o located, id, detail string) quarantine.Problem {
			return quarantine.Problem{ID: o.at.relName(id), Size: o.fi.Size, Detail: detail + "; inspect " + o.at.show(id) + " in HDFS"}
		},
	})
	if err != nil {
		return nil, nil, err
	}
	return es, append(l.probs, probs...), nil
}

// List returns every entry, oldest first.
func (a *Area) List(ctx context.Context) ([]quarantine.Entry, error) {
	es, _, err := a.ListAll(ctx)
	return es, err
}

// locate finds id's file: in its shard folder (checked), else directly in the area folder (an entry
// staged before the shard folders).
func (a *Area) locate(ctx context.Context, id string) (place, hdfsclient.FileInfo, error) {
	if sh := shardOf(id); sh != "" {
		at, err := a.shardPlace(ctx, sh, false)
		if err == nil {
			ofi, err := a.fs.Stat(ctx, at.file(id))
			if err == nil || !errors.Is(err, fs.ErrNotExist) {
				return at, ofi, err
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return place{}, hdfsclient.FileInfo{}, err
		}
	}
	at := a.top()
	ofi, err := a.fs.Stat(ctx, at.file(id))
	if errors.Is(err, fs.ErrNotExist) {
		return place{}, hdfsclient.FileInfo{}, fmt.Errorf("%w: %s", quarantine.ErrNoEntry, id)
	}
	return at, ofi, err
}

// entry returns id's entry (its file in the area and its record) and the folder holding it.
func (a *Area) entry(ctx context.Context, id string) (quarantine.Entry, place, error) {
	if !validID(id) {
		return quarantine.Entry{}, place{}, fmt.Errorf("%w: %q", quarantine.ErrNoEntry, id)
	}
	at, ofi, err := a.locate(ctx, id)
	if err != nil {
		return quarantine.Entry{}, place{}, err
	}
	if ofi.IsDir || ofi.Symlink {
		return quarantine.Entry{}, place{}, fmt.Errorf("%w: %s (not a file)", quarantine.ErrNoEntry, id)
	}
	if e, ok, err := quarantine.ParseEntryName(id); ok {
		if err != nil {
			return quarantine.Entry{}, place{}, fmt.Errorf("%w: %v", quarantine.ErrNoEntry, err)
		}
		e.Size, e.ModTime = ofi.Size, ofi.ModTime
		return e, at, nil
	}
	rfi, err := a.fs.Stat(ctx, a.recordOf(at, id))
	if errors.Is(err, fs.ErrNotExist) {
		return quarantine.Entry{}, place{}, fmt.Errorf("%w: %s (the file has no entry record)", quarantine.ErrNoEntry, id)
	}
	if err != nil {
		return quarantine.Entry{}, place{}, err
	}
	e, err := a.readRecord(ctx, at, id, rfi)
	if err != nil {
		return quarantine.Entry{}, place{}, err
	}
	e.Size, e.ModTime = ofi.Size, ofi.ModTime
	return e, at, nil
}

// Restore renames the entry's file back to its original key (creating the folders on the way), never
// replacing anything there (ErrOccupied), then removes the record.
func (a *Area) Restore(ctx context.Context, id string) (quarantine.Entry, error) {
	e, at, err := a.entry(ctx, id)
	if err != nil {
		if !errors.Is(err, quarantine.ErrNoEntry) && a.gone(ctx, id) {
			return quarantine.Entry{}, quarantine.AlreadyGone(e.Key(), id) // its record went with it
		}
		return quarantine.Entry{}, err
	}
	key, err := quarantine.RestoreKey(e)
	if err != nil {
		return quarantine.Entry{}, err
	}
	abs := hdfsclient.Join(a.root, key)
	if parent := path.Dir(abs); parent != a.root {
		if err := a.fs.MkdirAll(ctx, parent, 0o755); err != nil {
			return quarantine.Entry{}, fmt.Errorf("restore /%s: create its folder: %w", key, err)
		}
	}
	if err := a.fs.Rename(ctx, at.file(id), abs); err != nil {
		if a.gone(ctx, id) {
			return quarantine.Entry{}, quarantine.AlreadyGone(key, id)
		}
		if errors.Is(err, fs.ErrExist) {
			return quarantine.Entry{}, quarantine.Occupied(key, id)
		}
		return quarantine.Entry{}, fmt.Errorf("restore /%s: %w", key, err)
	}
	// Without its file the record is no entry: a failure to remove it leaves it for Tidy.
	if !strings.Contains(id, quarantine.NameSep) {
		_ = a.fs.Remove(context.WithoutCancel(ctx), a.recordOf(at, id))
	}
	a.forget(id)
	return e, nil
}

// Purge removes the entry's file for good (never to the HDFS trash: the quarantine is the trash), then
// its record.
func (a *Area) Purge(ctx context.Context, id string) error {
	e, at, err := a.entry(ctx, id)
	if err != nil {
		return err
	}
	if err := a.fs.Remove(ctx, at.file(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("purge /%s (entry %s): %w", e.Path, id, err)
	}
	if !strings.Contains(id, quarantine.NameSep) {
		_ = a.fs.Remove(context.WithoutCancel(ctx), a.recordOf(at, id))
	}
	a.forget(id)
	return nil
}

// gone reports whether id's file is no longer in the area (a rename is atomic: another restore or a
// purge took it first).
func (a *Area) gone(ctx context.Context, id string) bool {
	_, _, err := a.locate(ctx, id)
	return errors.Is(err, quarantine.ErrNoEntry)
}

func (a *Area) forget(id string) {
	a.mu.Lock()
	delete(a.recs, id)
	a.mu.Unlock()
}

// Tidy removes the records without their file (a staging that never moved its file, a restore or purge
// stopped before its record went) once their id is older than minAge, so that the record of a staging
// under way is never taken from it; then the shard folders left empty whose minute or hour ended more
// than minAge ago (a staging goes to the folder of its own minute, never to one of the past).
func (a *Area) Tidy(ctx context.Context, minAge time.Duration) error {
	l, err := a.list(ctx)
	if err != nil {
		return err
	}
	now := a.now()
	left := map[string]int{} // records removed, by folder ref
	for id, r := range l.recs {
		if o, ok := l.objs[id]; ok && o.at.ref == r.at.ref {
			continue
		}
		if t := quarantine.IDTime(id); t.IsZero() || now.Sub(t) < minAge {
			continue // not ours, or a staging may be under way
		}
		if err := a.fs.Remove(ctx, a.recordOf(r.at, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the leftover entry record %s: %w", r.at.show(id+recordSuffix), err)
		}
		left[r.at.ref]++
		a.forget(id)
	}
	for _, f := range l.folders {
		if f.n-left[f.at.ref] > 0 || now.Sub(f.end) < minAge || now.Before(f.end) {
			continue
		}
		// Never recursive: a folder something arrived in since the listing stays.
		if err := a.fs.Remove(ctx, f.del); err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTEMPTY) {
				continue
			}
			return fmt.Errorf("remove the empty quarantine folder %s: %w", f.at.shown, err)
		}
		a.forgetShards()
		if f.parent != nil {
			left[f.parent.at.ref]++
		}
	}
	return nil
}

var _ quarantine.Spacer = (*Area)(nil)

// Space is the room of the store root (hdfsclient.Room: the cluster's free space or the root's own
// space quota, whichever is tighter, in file bytes), for --quarantine-min-free.
func (a *Area) Space(ctx context.Context) (quarantine.Space, error) {
	return StoreSpace(ctx, a.fs, a.root)
}

// StoreSpace is the room of the store whose root is root, as a quarantine.Space: the mount's
// ckguard_store_free_bytes and the quarantine's --quarantine-min-free.
func StoreSpace(ctx context.Context, f hdfsclient.FS, root string) (quarantine.Space, error) {
	sp, ok := f.(hdfsclient.Spacer)
	if !ok {
		return quarantine.Space{}, fmt.Errorf("store %s: the HDFS client (%T) reports no free space", root, f)
	}
	r, err := sp.Space(ctx, root)
	if err != nil {
		return quarantine.Space{}, fmt.Errorf("store %s: free space: %w", root, err)
	}
	return quarantine.Space{Size: r.Size, Free: r.Free}, nil
}
