package refindex

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sync"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
)

// maxMetadataSize bounds the `_metadata` the index reads (Flink's are KBs to a few MB; 1,000,000
// references take about 120 MB). Parsing holds every reference in memory, about 1 KB each at the peak
// (128 MiB: under 1.2 GB), and a larger file (anyone who can create one through the mount can make it
// as large as they like) is not read: what it references cannot be judged (badTooLarge), so it
// refuses every deletion when its writer is trusted for its job folder, else those in its folder.
const maxMetadataSize = 128 << 20

// readWholeMax is the size up to which a `_metadata` is read into memory in one request before
// parsing; larger files are parsed through the store's reader.
var readWholeMax int64 = 8 << 20 // a variable for tests (export_test.go)

// watchedReader remembers the first error reading the store returned, so that a parse that failed
// because the store failed (to retry: the sync fails) is told apart from bad content (unparseable).
type watchedReader struct {
	r   io.ReaderAt
	mu  sync.Mutex
	err error
}

func (w *watchedReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := w.r.ReadAt(p, off)
	if err != nil && !errors.Is(err, io.EOF) {
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
	}
	return n, err
}

// entry is one read `_metadata`: its record and normalised references.
type entry struct {
	rec  *checkpointRecord
	refs []ref
}

// layoutOf derives job folder, checkpoint id and kind from where a `_metadata` lies.
func layoutOf(key string) (job string, id int64, kind string) {
	dir := path.Dir(key)
	if dir == "." {
		dir = ""
	}
	base := path.Base(dir)
	parent := path.Dir(dir)
	if parent == "." || dir == "" {
		parent = ""
	}
	switch {
	case flinklayout.IsCheckpointDir(base):
		n, ok := flinklayout.CheckpointNumber(base)
		if !ok {
			n = -1
		}
		return parent, n, "checkpoint"
	case flinklayout.IsSavepointDir(base):
		return parent, -1, "savepoint"
	}
	return parent, -1, "unknown"
}

// readChangeAttempts is how often a `_metadata` that changed while it was read is read again before it
// is judged damaged (Flink writes a `_metadata` once; one that keeps changing is no checkpoint yet).
const readChangeAttempts = 3

// readEntry reads and parses one `_metadata`. A file that cannot be parsed yields a record with Err
// (fail closed); a file that vanished yields fs.ErrNotExist; other read errors are returned.
//
// Invariant: no reference is taken from a read during which the file changed (rewritten or resized
// between the open and the end of the parse, by anyone who may write it: a short read, a parse of a
// mix of two contents; store.ErrChanged). Such a read is discarded and the file read again, up to
// readChangeAttempts times; a file that changes at every read is judged damaged (it protects only
// itself, within grace; Flink's own writes are young, in grace anyway), and read again at the next
// sync. A change is no store error: it does not fail the sync.
func (ix *Index) readEntry(ctx context.Context, oi store.ObjectInfo) (*entry, error) {
	for attempt := 1; ; attempt++ {
		e, err := ix.readOnce(ctx, oi)
		if !errors.Is(err, store.ErrChanged) {
			return e, err
		}
		if attempt == readChangeAttempts {
			e := ix.unparseable(ctx, oi, oi.Size, badDamaged, fmt.Errorf("%s changed while it was read, at each of %d reads (Flink writes a _metadata once): judged damaged until it stops changing; the next sync reads it again", oi.Path, readChangeAttempts))
			e.rec.Changing = true
			return e, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Read again what is there now (its new size and time, for the record).
		now, serr := ix.st.Stat(ctx, oi.Path)
		switch {
		case errors.Is(serr, fs.ErrNotExist):
			return nil, serr
		case serr == nil:
			now.Path = oi.Path
			oi = now
		}
	}
}

// readOnce is one read of readEntry; an error wrapping store.ErrChanged when the file changed meanwhile.
func (ix *Index) readOnce(ctx context.Context, oi store.ObjectInfo) (*entry, error) {
	if k, err := store.CleanKey(oi.Path); err != nil || k != oi.Path {
		// A listed _metadata at a key with "//", "." or ".." segments (S3 keys are plain strings; Flink
		// never writes such a key) cannot be opened by its canonical key, which names another object or
		// none: it used to count as gone at every sync, its references unprotected. Kept
		// as unparseable, it fails the index closed and says how to fix it.
		return ix.unparseable(ctx, oi, oi.Size, badUnaddressable, fmt.Errorf("a _metadata at the key %q, which ckguard cannot address (an empty, . or .. segment): what it references is unknown; move it to a clean key or delete it with an S3 tool, then run `ckguard index sync`", oi.Path)), nil
	}
	r, err := ix.st.Open(ctx, oi.Path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	size := r.Size()
	if size > maxMetadataSize {
		return ix.unparseable(ctx, oi, size, badTooLarge, fmt.Errorf("%s is %d bytes, larger than the %d bytes (128 MiB, about a million references) a _metadata may have: remove it, or replace it by the real checkpoint's", oi.Path, size, maxMetadataSize)), nil
	}
	src, watched, err := metadataSource(r, size, oi.Path)
	if err != nil {
		return nil, err
	}
	rec := ix.newCheckpointRecord(ctx, oi, size)
	pm, err := ix.opt.parse(src, size, oi.Path)
	// A file that changed while it was parsed is read again (ErrChanged), whatever the parse said.
	if changed, cerr := readerChanged(r); cerr != nil {
		return nil, fmt.Errorf("read %s: %w", oi.Path, cerr)
	} else if changed || errors.Is(watched.err, store.ErrChanged) {
		return nil, fmt.Errorf("read %s: %w", oi.Path, store.ErrChanged)
	}
	if err != nil {
		if watched.err != nil {
			return nil, fmt.Errorf("read %s: %w", oi.Path, watched.err)
		}
		return ix.unparseable(ctx, oi, size, classifyParseError(err), err), nil
	}
	rec.Format = pm.Format
	if pm.Kind == "checkpoint" || pm.Kind == "savepoint" {
		rec.Kind = pm.Kind
	}
	if rec.Kind == "checkpoint" || pm.ID >= 0 {
		rec.ID = pm.ID
	}
	e := &entry{rec: rec, refs: ix.normalizedRefs(oi.Path, pm.Refs)}
	if err := ix.resolveOutside(ctx, e); err != nil {
		return nil, err
	}
	for _, r := range e.refs {
		if r.Inside {
			rec.Refs++
		} else {
			rec.Outside++
		}
	}
	return e, nil
}

// metadataSource is what the parser reads a _metadata of size bytes from. Small files (nearly all) are
// read in one request; larger ones are parsed through the reader (the parser buffers), so a parse
// worker never holds a whole large file. watched records the reader's errors either way; a short
// whole read is the file shrunk or replaced meanwhile (store.ErrChanged).
func metadataSource(r store.Reader, size int64, key string) (src io.ReaderAt, watched *watchedReader, err error) {
	watched = &watchedReader{r: r}
	if size > readWholeMax {
		return watched, watched, nil
	}
	buf := make([]byte, size)
	if n, err := r.ReadAt(buf, 0); n != int(size) {
		if err == nil || errors.Is(err, io.EOF) || errors.Is(err, store.ErrChanged) {
			return nil, nil, fmt.Errorf("read %s: %d of %d bytes: %w", key, n, size, store.ErrChanged) // shrunk or replaced meanwhile
		}
		return nil, nil, fmt.Errorf("read %s: %w", key, err)
	}
	return bytes.NewReader(buf), watched, nil
}

// newCheckpointRecord is the record of the _metadata oi as its key and stat say (its layout, version,
// owner); the parse fills in the rest.
func (ix *Index) newCheckpointRecord(ctx context.Context, oi store.ObjectInfo, size int64) *checkpointRecord {
	job, id, kind := layoutOf(oi.Path)
	rec := &checkpointRecord{Key: oi.Path, Job: job, ID: id, Kind: kind, ModTime: oi.ModTime, Size: size, ETag: oi.ETag, UID: uidOf(oi)}
	if oi.HasUID {
		// Only a store with owners can tell (a stat of the folder; on S3 it would cost a listing).
		rec.JobOwner = ix.ownsJobFolder(ctx, job, oi.UID)
	}
	return rec
}

// normalizedRefs is the parsed references of the _metadata at key as store keys (relative ones
// resolved against it), one per (kind, key), in first-seen order, their lengths summed.
func (ix *Index) normalizedRefs(key string, raw []rawRef) []ref {
	var refs []ref
	seen := make(map[string]int, len(raw))
	for _, rr := range raw {
		var k pathnorm.Key
		if rr.Kind == RefRelative {
			k = ix.norm.Relative(key, rr.URI)
		} else {
			k = ix.norm.Absolute(rr.URI)
		}
		// Relative and segment references need the whole object just like files; the kind is kept
		// for reports.
		kind := rr.Kind
		id := string(rune('0'+kind)) + k.Path
		if i, ok := seen[id]; ok {
			refs[i].Length += rr.Length
			continue
		}
		seen[id] = len(refs)
		refs = append(refs, ref{Key: k.Path, Inside: k.Inside, Kind: kind, Length: rr.Length})
	}
	return refs
}

// readerChanged reports whether the file r reads changed since it was opened, by the reader's own
// check (store.ChangeReporter: the local store). Other stores tell by their read errors
// (store.ErrChanged: an S3 ranged GET carries the ETag the open saw).
func readerChanged(r store.Reader) (bool, error) {
	if cr, ok := r.(store.ChangeReporter); ok {
		return cr.Changed()
	}
	return false, nil
}

// unparseable is the record of a `_metadata` that cannot be read as one, of class bad (badmeta.go:
// what it refuses follows from the class and its writer). It is logged once per file and error,
// not at every read.
func (ix *Index) unparseable(ctx context.Context, oi store.ObjectInfo, size int64, bad string, err error) *entry {
	job, id, kind := layoutOf(oi.Path)
	rec := &checkpointRecord{Key: oi.Path, Job: job, ID: id, Kind: kind, ModTime: oi.ModTime, Size: size, ETag: oi.ETag, UID: uidOf(oi), Err: err.Error(), Bad: bad}
	if oi.HasUID {
		rec.JobOwner = ix.ownsJobFolder(ctx, job, oi.UID)
	}
	ix.logBad(rec)
	return &entry{rec: rec}
}

// logBad logs a bad `_metadata` the first time it is read with this error (a sync reads a file again
// only when it changed, a held one at every sync; a rebuild reads everything again).
func (ix *Index) logBad(rec *checkpointRecord) {
	ix.badMu.Lock()
	if ix.badLogged == nil {
		ix.badLogged = map[string]string{}
	}
	seen := ix.badLogged[rec.Key] == rec.Err
	ix.badLogged[rec.Key] = rec.Err
	ix.badMu.Unlock()
	if seen {
		return
	}
	switch badScope(rec) {
	case "store":
		ix.log.Warn("unparseable _metadata: what it references cannot be judged and its writer is trusted for its job folder, so every deletion in the store is refused until it is fixed or removed", "file", rec.Key, "class", rec.Bad, "err", rec.Err)
	case "folder":
		ix.log.Warn("unparseable _metadata of a writer who does not own its job folder: deletions in its folder are refused until it is removed", "file", rec.Key, "class", rec.Bad, "folder", confinedScope(rec.Key), "err", rec.Err)
	default:
		ix.log.Warn("damaged _metadata: Flink cannot restore from it, so it protects nothing but itself (kept within --grace, then removable); remove it", "file", rec.Key, "class", rec.Bad, "err", rec.Err)
	}
}

// forgetBad drops the log memory of bad `_metadata` no longer in state, so that one coming back is
// logged again.
func (ix *Index) forgetBad(st *memState) {
	ix.badMu.Lock()
	defer ix.badMu.Unlock()
	for k := range ix.badLogged {
		if c := st.ckpts[k]; c == nil || c.Err == "" {
			delete(ix.badLogged, k)
		}
	}
}

// readAll reads infos with bounded concurrency, calling fn (serially) for each entry and gone for
// files that disappeared in the meantime. The first read error cancels the rest.
func (ix *Index) readAll(ctx context.Context, infos []store.ObjectInfo, fn func(*entry) error, gone func(string)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		e    *entry
		key  string
		err  error
		gone bool
	}
	jobs := make(chan store.ObjectInfo)
	results := make(chan result, ix.opt.workers)
	var wg sync.WaitGroup
	for range ix.opt.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for oi := range jobs {
				e, err := ix.readEntry(ctx, oi)
				r := result{e: e, key: oi.Path, err: err}
				if errors.Is(err, fs.ErrNotExist) {
					r = result{key: oi.Path, gone: true}
				}
				select {
				case results <- r:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		defer close(jobs)
		for _, oi := range infos {
			select {
			case jobs <- oi:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(results) }()
	bar := ix.newBar(len(infos), "parsing _metadata")
	var first error
	for r := range results {
		bar.Add(1)
		if first != nil {
			continue
		}
		switch {
		case r.gone:
			gone(r.key)
		case r.err != nil:
			first = r.err
			cancel()
		default:
			if err := fn(r.e); err != nil {
				first = err
				cancel()
			}
		}
	}
	bar.Finish()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// readOrdered reads infos with bounded concurrency and calls fn in the order of infos; files that
// vanished meanwhile are skipped. At most a small window of parsed entries is held at once.
func (ix *Index) readOrdered(ctx context.Context, infos []store.ObjectInfo, fn func(*entry) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		e   *entry
		err error
	}
	slots := make([]chan result, len(infos))
	for i := range slots {
		slots[i] = make(chan result, 1)
	}
	window := make(chan struct{}, 4*ix.opt.workers)
	jobs := make(chan int)
	go func() {
		defer close(jobs)
		for i := range infos {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	for range ix.opt.workers {
		go func() {
			for i := range jobs {
				e, err := ix.readEntry(ctx, infos[i])
				slots[i] <- result{e, err}
			}
		}()
	}
	bar := ix.newBar(len(infos), "parsing _metadata")
	defer bar.Finish()
	for i := range infos {
		var r result
		select {
		case r = <-slots[i]:
		case <-ctx.Done():
			return ctx.Err()
		}
		<-window
		bar.Add(1)
		switch {
		case errors.Is(r.err, fs.ErrNotExist):
			continue
		case r.err != nil:
			return r.err
		}
		if err := fn(r.e); err != nil {
			return err
		}
	}
	return nil
}
