package refindex

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
)

// The metadata history keeps a byte copy of every live `_metadata` the index has seen, so that a
// `_metadata` deleted outside the mount can be put back (restore-metadata) and retired checkpoints
// stay listed with the time they went (checkpoints --history).
//
// It lives in INDEX/history, beside the generations and never inside one: a rebuild re-derives the
// references from the store but does not touch the history. It is recorded after every successful
// sync and rebuild, from the store: a `_metadata` written or deleted through the mount is recorded,
// or marked retired, by the next sync (the time a checkpoint went is when a sync first missed it).
//
// Bounds: a `_metadata` larger than HistoryLimits.MaxFileBytes is listed without a copy; copies are
// kept while their total stays within MaxTotalBytes (retired copies go first, oldest retirement
// first; a live one that does not fit is listed without a copy); retired entries are dropped after
// KeepRetired.

// HistoryLimits bound the metadata history.
type HistoryLimits struct {
	MaxFileBytes  int64         // largest `_metadata` copied (default 64 MiB)
	MaxTotalBytes int64         // all copies together (default 1 GiB)
	KeepRetired   time.Duration // how long a retired checkpoint stays listed with its copy (default 30 days)
}

// DefaultHistoryLimits are the bounds without WithHistoryLimits.
var DefaultHistoryLimits = HistoryLimits{MaxFileBytes: 64 << 20, MaxTotalBytes: 1 << 30, KeepRetired: 30 * 24 * time.Hour}

// HistoryEntry is one `_metadata` the index has seen.
type HistoryEntry struct {
	Metadata string    `json:"metadata"`
	Job      string    `json:"job"`
	Kind     string    `json:"kind"`
	ID       int64     `json:"id"`
	Size     int64     `json:"size"`
	ModTime  time.Time `json:"completed"` // the _metadata's modification time (its completion)
	ETag     string    `json:"etag,omitempty"`
	UID      *uint32   `json:"uid,omitempty"`
	SHA256   string    `json:"sha256,omitempty"` // of the copy ("" = no copy: NoCopy says why)
	NoCopy   string    `json:"no_copy,omitempty"`
	Recorded time.Time `json:"recorded"`
	Retired  time.Time `json:"retired,omitzero"` // when a sync first found it gone (zero: live)
}

// HistoryResult is the answer of History.
type HistoryResult struct {
	Entries []HistoryEntry `json:"entries"`
	Bytes   int64          `json:"copy_bytes"`
	Limits  struct {
		MaxFileBytes  int64  `json:"max_file_bytes"`
		MaxTotalBytes int64  `json:"max_total_bytes"`
		KeepRetired   string `json:"keep_retired"`
	} `json:"limits"`
}

// RestoreResult is the answer of RestoreMetadata.
type RestoreResult struct {
	Metadata string    `json:"metadata"`
	Size     int64     `json:"size"`
	SHA256   string    `json:"sha256"`
	ModTime  time.Time `json:"completed"`
	Indexed  bool      `json:"indexed"`
}

// MetadataCreator is implemented by stores that can put a `_metadata` back: Create writes data at key
// only if nothing is there (never overwriting), with the given modification time, and fails with an
// error wrapping fs.ErrExist otherwise. uid, when set, is given the file where the store has owners.
type MetadataCreator interface {
	CreateExclusive(ctx context.Context, key string, data []byte, mtime time.Time, uid *uint32) error
}

// ErrNoHistory is wrapped when the history holds no copy of a `_metadata`.
var ErrNoHistory = errors.New("no copy in the metadata history")

// WithHistoryLimits sets the bounds of the metadata history (zero fields: the defaults).
func WithHistoryLimits(l HistoryLimits) Option { return func(o *options) { o.history = l } }

// history is the on-disk metadata history: INDEX/history/entries.json (rewritten atomically) and one
// file per copy, named by its SHA-256, in INDEX/history/blobs.
type history struct {
	dir string
	lim HistoryLimits
	mu  sync.Mutex
}

func (ix *Index) hist() *history {
	l := ix.opt.history
	d := DefaultHistoryLimits
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = d.MaxFileBytes
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = d.MaxTotalBytes
	}
	if l.KeepRetired <= 0 {
		l.KeepRetired = d.KeepRetired
	}
	ix.histOnce.Do(func() { ix.histState = &history{dir: filepath.Join(ix.dir, "history"), lim: l} })
	return ix.histState
}

func (h *history) load() (map[string]*HistoryEntry, error) {
	b, err := os.ReadFile(filepath.Join(h.dir, "entries.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]*HistoryEntry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("metadata history: %w", err)
	}
	var list []*HistoryEntry
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("metadata history %s: %w", filepath.Join(h.dir, "entries.json"), err)
	}
	m := make(map[string]*HistoryEntry, len(list))
	for _, e := range list {
		m[e.Metadata] = e
	}
	return m, nil
}

func (h *history) save(m map[string]*HistoryEntry) error {
	list := make([]*HistoryEntry, 0, len(m))
	for _, e := range m {
		list = append(list, e)
	}
	sort.Slice(list, func(a, b int) bool { return list[a].Metadata < list[b].Metadata })
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(h.dir, "entries.json"), b, true)
}

// writeAtomic replaces path with b: a crash leaves the old or the new file, never a torn one (with
// durable; without, a power loss may leave an empty or partial file, which a copy's checksum catches:
// copies are written without an fsync each, so that a first sync of many checkpoints is not paced
// by the disk).
func writeAtomic(path string, b []byte, durable bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func (h *history) blob(sum string) string { return filepath.Join(h.dir, "blobs", sum) }

// afterSync records the metadata history after a successful sync or rebuild (syncMu held).
func (ix *Index) afterSync(ctx context.Context, err *error) {
	// A rebuild wrote every table through its mapping and a sync's commits read and write some:
	// those pages are done with until a decision or pass reads them again. First: the history's
	// copies after a first build at 10 M objects take minutes.
	ix.releaseTablePages()
	if *err == nil {
		ix.mu.RLock()
		st := ix.mu.state
		ix.mu.RUnlock()
		if st != nil {
			ix.forgetBad(st)
		}
		ix.recordHistory(ctx)
	}
}

// recordHistory brings the history up to date with the live checkpoints: copies new and changed
// `_metadata` from the store, marks those no longer live as retired, and enforces the bounds. It
// never fails a sync: errors are logged (the history is a convenience; the store is the truth).
func (ix *Index) recordHistory(ctx context.Context) {
	if err := ix.updateHistory(ctx); err != nil && ctx.Err() == nil {
		ix.log.Warn("metadata history not updated", "dir", ix.hist().dir, "err", err)
	}
}

func (ix *Index) updateHistory(ctx context.Context) error {
	h := ix.hist()
	v, err := ix.acquire()
	if err != nil {
		return err
	}
	live := make([]checkpointRecord, 0, len(v.st.sorted))
	for _, k := range v.st.sorted {
		live = append(live, *v.st.ckpts[k])
	}
	now := v.now()
	v.release()

	h.mu.Lock()
	defer h.mu.Unlock()
	m, err := h.load()
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	dirty := false
	for _, c := range live {
		seen[c.Key] = true
		if e := m[c.Key]; e != nil && e.Retired.IsZero() && sameVersion(&c, e.objectInfo()) {
			continue
		}
		dirty = true
		e := &HistoryEntry{Metadata: c.Key, Job: c.Job, Kind: c.Kind, ID: c.ID, Size: c.Size, ModTime: c.ModTime, ETag: c.ETag, UID: c.UID, Recorded: now}
		m[c.Key] = e
		if c.Size > h.lim.MaxFileBytes {
			e.NoCopy = fmt.Sprintf("larger than the history's per-file cap (%d bytes)", h.lim.MaxFileBytes)
			continue
		}
		sum, err := ix.copyMetadata(ctx, h, c)
		if err != nil {
			var local *os.PathError
			if errors.As(err, &local) && strings.HasPrefix(local.Path, h.dir) {
				return err
			}
			e.NoCopy = err.Error()
			continue
		}
		e.SHA256 = sum
	}
	for k, e := range m {
		if !seen[k] && e.Retired.IsZero() {
			e.Retired, dirty = now, true
		}
		if !e.Retired.IsZero() && now.Sub(e.Retired) > h.lim.KeepRetired {
			delete(m, k)
			dirty = true
		}
	}
	if h.enforceBudget(m) {
		dirty = true
	}
	if !dirty {
		return nil
	}
	if err := h.save(m); err != nil {
		return err
	}
	return h.collect(m)
}

// copyMetadata copies the `_metadata` of c from the store into the history's blobs and returns its
// SHA-256. It streams in bounded chunks, like the sync's own read of a large `_metadata`, so a copy
// never holds the whole file in memory, and it checks the store still holds the version indexed.
// Errors writing the history's own files are *os.PathError naming a path below h.dir.
func (ix *Index) copyMetadata(ctx context.Context, h *history, c checkpointRecord) (string, error) {
	r, err := ix.st.Open(ctx, c.Key)
	if err != nil {
		return "", err
	}
	defer r.Close()
	if r.Size() != c.Size {
		return "", fmt.Errorf("changed since it was indexed (%d bytes now, %d indexed): copied at the next sync", r.Size(), c.Size)
	}
	dir := filepath.Dir(h.blob("x"))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename: nothing left to remove
	hash := sha256.New()
	buf := make([]byte, historyCopyChunk)
	n, err := io.CopyBuffer(io.MultiWriter(f, hash), io.NewSectionReader(r, 0, c.Size), buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != c.Size {
		err = fmt.Errorf("read %d of its %d bytes", n, c.Size)
	}
	if err != nil {
		return "", err
	}
	sum := hex.EncodeToString(hash.Sum(nil))
	if err := os.Rename(tmp, h.blob(sum)); err != nil {
		return "", err
	}
	return sum, nil
}

// historyCopyChunk is the read size of a history copy.
const historyCopyChunk = 32 << 10

// objectInfo is the version an entry was copied from, for sameVersion.
func (e *HistoryEntry) objectInfo() store.ObjectInfo {
	oi := store.ObjectInfo{Path: e.Metadata, Size: e.Size, ModTime: e.ModTime, ETag: e.ETag}
	if e.UID != nil {
		oi.HasUID, oi.UID = true, *e.UID
	}
	return oi
}

// enforceBudget drops copies until their total is within MaxTotalBytes: retired ones first (oldest
// retirement first), then live ones (oldest completion first); an entry without a copy stays listed.
func (h *history) enforceBudget(m map[string]*HistoryEntry) (dropped bool) {
	total, sizes := h.copyBytes(m)
	if total <= h.lim.MaxTotalBytes {
		return false
	}
	var list []*HistoryEntry
	for _, e := range m {
		if e.SHA256 != "" {
			list = append(list, e)
		}
	}
	sort.Slice(list, func(a, b int) bool {
		x, y := list[a], list[b]
		if x.Retired.IsZero() != y.Retired.IsZero() {
			return !x.Retired.IsZero()
		}
		if !x.Retired.Equal(y.Retired) {
			return x.Retired.Before(y.Retired)
		}
		return x.ModTime.Before(y.ModTime)
	})
	refs := map[string]int{}
	for _, e := range list {
		refs[e.SHA256]++
	}
	for _, e := range list {
		if total <= h.lim.MaxTotalBytes {
			break
		}
		refs[e.SHA256]--
		if refs[e.SHA256] == 0 {
			total -= sizes[e.SHA256]
		}
		e.SHA256, e.NoCopy = "", fmt.Sprintf("dropped: the history's copies exceeded its budget (%d bytes)", h.lim.MaxTotalBytes)
		dropped = true
	}
	return dropped
}

// copyBytes sums the distinct copies the entries name.
func (h *history) copyBytes(m map[string]*HistoryEntry) (int64, map[string]int64) {
	sizes := map[string]int64{}
	var total int64
	for _, e := range m {
		if e.SHA256 != "" {
			if _, ok := sizes[e.SHA256]; !ok {
				sizes[e.SHA256] = e.Size
				total += e.Size
			}
		}
	}
	return total, sizes
}

// collect removes copies no entry names.
func (h *history) collect(m map[string]*HistoryEntry) error {
	keep := map[string]bool{}
	for _, e := range m {
		keep[e.SHA256] = true
	}
	des, err := os.ReadDir(filepath.Join(h.dir, "blobs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, d := range des {
		if !keep[d.Name()] {
			if err := os.Remove(filepath.Join(h.dir, "blobs", d.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// History lists the `_metadata` the history holds, live and retired, of one job folder ("" = all).
func (ix *Index) History(ctx context.Context, job string) (*HistoryResult, error) {
	h := ix.hist()
	h.mu.Lock()
	m, err := h.load()
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	res := &HistoryResult{Entries: []HistoryEntry{}}
	res.Bytes, _ = h.copyBytes(m)
	res.Limits.MaxFileBytes, res.Limits.MaxTotalBytes, res.Limits.KeepRetired = h.lim.MaxFileBytes, h.lim.MaxTotalBytes, duration.Format(h.lim.KeepRetired)
	for _, e := range m {
		if job == "" || e.Job == job {
			res.Entries = append(res.Entries, *e)
		}
	}
	sort.Slice(res.Entries, func(a, b int) bool {
		x, y := res.Entries[a], res.Entries[b]
		if x.Job != y.Job {
			return x.Job < y.Job
		}
		if !x.ModTime.Equal(y.ModTime) {
			return x.ModTime.Before(y.ModTime)
		}
		return x.Metadata < y.Metadata
	})
	return res, nil
}

// RestoreMetadata puts the history's copy of a `_metadata` (its key, or its checkpoint folder) back
// in the store, byte-identical and with its modification time, only if nothing is at that key (never
// overwriting), and indexes it at once.
func (ix *Index) RestoreMetadata(ctx context.Context, checkpoint string) (*RestoreResult, error) {
	key, err := store.CleanKey(checkpoint)
	if err != nil {
		return nil, err
	}
	if !flinklayout.IsMetadata(key) {
		key = strings.TrimSuffix(key, "/") + "/" + flinklayout.MetadataName
	}
	cr, ok := ix.st.(MetadataCreator)
	if !ok {
		return nil, fmt.Errorf("restore %s: the store %s cannot put a _metadata back without overwriting (not supported for this backend); the copy is in %s", key, ix.st.Root(), ix.hist().dir)
	}
	h := ix.hist()
	h.mu.Lock()
	m, err := h.load()
	var e *HistoryEntry
	var b []byte
	if err == nil {
		e = m[key]
		switch {
		case e == nil:
			err = fmt.Errorf("restore %s: %w: the index never saw it (or it was retired more than %s ago); `ckguard checkpoints --history` lists what it holds", key, ErrNoHistory, h.lim.KeepRetired)
		case e.SHA256 == "":
			err = fmt.Errorf("restore %s: %w (%s)", key, ErrNoHistory, e.NoCopy)
		default:
			b, err = os.ReadFile(h.blob(e.SHA256))
		}
	}
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != e.SHA256 || int64(len(b)) != e.Size {
		return nil, fmt.Errorf("restore %s: the history's copy %s is damaged (checksum or size differs); not restored", key, h.blob(e.SHA256))
	}
	if _, err := ix.st.Stat(ctx, key); err == nil {
		return nil, fmt.Errorf("restore %s: %w: a _metadata is there; never overwritten (delete it through the mount first if it is wrong)", key, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("restore %s: %w", key, err)
	}
	if err := cr.CreateExclusive(ctx, key, b, e.ModTime, e.UID); err != nil {
		return nil, fmt.Errorf("restore %s: %w", key, err)
	}
	res := &RestoreResult{Metadata: key, Size: e.Size, SHA256: e.SHA256, ModTime: e.ModTime}
	if err := ix.IndexMetadata(ctx, key); err != nil {
		return res, fmt.Errorf("restored %s, but indexing it failed (the next sync retries): %w", key, err)
	}
	res.Indexed = true
	ix.recordHistory(ctx)
	return res, nil
}
