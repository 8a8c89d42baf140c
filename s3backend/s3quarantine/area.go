// Package s3quarantine is the quarantine area of an S3 store: the key prefix store.QuarantineDir+"/"
// under the store prefix. Each entry is two objects: <id> (a server-side copy of the deleted object)
// and <id>.json (its entry record; S3 has no append, so one small object per entry).
//
// Invariant, across a crash at any point of a staging (Stage): the object is at its original key or
// staged, never lost. Stage writes the record, copies (conditional on the decided ETag), and only then
// deletes the original (conditional on the same ETag); a record without its object is no entry. An entry's id is derived from the original
// key and the ETag decided on, so a journal replay of the same deletion repeats the same steps on the
// same names (a copy again is idempotent), and a deletion decided again as refused finds and removes
// the copy (Unstage): at steady state the object is at its key or staged, never both.
package s3quarantine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// Client is what the area needs of the S3 client (s3client.Client).
type Client interface {
	Head(ctx context.Context, key string) (s3client.Object, error)
	ReadAt(ctx context.Context, key string, p []byte, off int64, ifMatch string) (int, error)
	Put(ctx context.Context, key string, body io.ReadSeeker, size int64, o s3client.PutOptions) (string, error)
	Copy(ctx context.Context, src, dst, srcETag string, o s3client.PutOptions) (string, error)
	Delete(ctx context.Context, key, ifMatch string) error
	Walk(ctx context.Context, prefix string, fn func(s3client.Object) error) error
}

// Prefix is the area's key prefix, relative to the store prefix.
const Prefix = store.QuarantineDir + "/"

// recordSuffix names an entry record object.
const recordSuffix = ".json"

// Area is the quarantine area of one S3 store.
type Area struct {
	c   Client
	now func() time.Time
	// IfNoneMatch: the server honours If-None-Match on CopyObject, so Restore never replaces an object
	// created at the original key. Without it Restore HEADs the key right before the copy: an object
	// created between that HEAD and the copy would be replaced (the race is documented in README).
	IfNoneMatch bool

	mu sync.Mutex
	// holds counts the stagings and changes in place of each entry id this process has under way
	// (hold/settle); dropping are the crash copies Tidy is removing (see crashcopy.go).
	holds    map[string]int
	dropping map[string]chan struct{}
	// unresolved are the records of changes in place not marked Applied (with their objects) the last
	// complete ListAll found, at unresolvedAt: Tidy's work.
	unresolved   map[string]quarantine.Entry
	unresolvedAt time.Time
}

var _ quarantine.Staging = (*Area)(nil)

// Restage stages the current version of key again (a restored `_metadata` the index could not record).
func (a *Area) Restage(ctx context.Context, key string, d quarantine.Decision) (quarantine.Entry, error) {
	return a.Stage(ctx, key, "", d)
}

// New returns the area of the store c reaches. now is the clock of deletion times (nil: time.Now).
func New(c Client, now func() time.Time, ifNoneMatch bool) *Area {
	if now == nil {
		now = time.Now
	}
	return &Area{c: c, now: now, IfNoneMatch: ifNoneMatch}
}

// ID is the entry id of the deletion of key at version etag.
func ID(key, etag string) string {
	h := sha256.Sum256([]byte(key + "\x00" + etag))
	return hex.EncodeToString(h[:16])
}

func objectKey(id string) string { return Prefix + id }
func recordKey(id string) string { return Prefix + id + recordSuffix }

// Stage moves the object at key (version etag, as decided) into the area: copy, record, then the
// conditional delete of the original. ErrPrecondition (s3client) when the object changed since the
// decision: nothing is deleted, and the copy made is removed again.
func (a *Area) Stage(ctx context.Context, key, etag string, d quarantine.Decision) (quarantine.Entry, error) {
	if store.InQuarantine(key) {
		return quarantine.Entry{}, fmt.Errorf("quarantine s3 %s: the key is in the quarantine area itself", key)
	}
	o, err := a.c.Head(ctx, key)
	if err != nil {
		return quarantine.Entry{}, err
	}
	if etag != "" && o.ETag != etag {
		return quarantine.Entry{}, &s3client.Error{Op: "Stage", Key: key, Class: s3client.ErrPrecondition, Err: fmt.Errorf("ETag %s, decided on %s", o.ETag, etag)}
	}
	id := ID(key, o.ETag)
	a.hold(id)
	defer a.settle(id)
	now := a.now().UTC()
	e := quarantine.Entry{ID: id, Path: key, Size: o.Size, ModTime: o.ModTime, ETag: o.ETag, DeletedAt: now, Decision: d}
	if !utf8.ValidString(key) {
		e.PathBytes = []byte(key)
	}
	// The record first: a crash after it leaves a record without its object (no entry), never an
	// object in the area whose original key nobody knows.
	if err := a.putRecord(ctx, e); err != nil {
		return quarantine.Entry{}, fmt.Errorf("quarantine %s: %w (nothing was deleted)", key, err)
	}
	if _, err := a.c.Copy(ctx, key, objectKey(id), o.ETag, s3client.PutOptions{}); err != nil {
		return quarantine.Entry{}, fmt.Errorf("quarantine %s: copy to %s: %w (nothing was deleted)", key, objectKey(id), err)
	}
	if err := a.c.Delete(ctx, key, o.ETag); err != nil && !errors.Is(err, fs.ErrNotExist) {
		if errors.Is(err, s3client.ErrPrecondition) {
			// Replaced since the copy: the staged copy is of a version no longer at the key and nobody
			// deleted it; drop the entry so it is not restored over the new object's history.
			_ = a.drop(ctx, id)
		}
		return quarantine.Entry{}, err
	}
	return e, nil
}

// Unstage removes a staged copy of key at version etag while the original is still at key (a
// deletion decided again as refused after a crash between copy and delete). It never removes a copy
// whose original is gone.
func (a *Area) Unstage(ctx context.Context, key, etag string) error {
	defer a.settleIfHeld(ID(key, etag))
	o, err := a.c.Head(ctx, key)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // the staged copy is the only one: keep it
		}
		return err
	}
	if o.ETag != etag {
		return nil
	}
	return a.drop(ctx, ID(key, etag))
}

func (a *Area) drop(ctx context.Context, id string) error {
	if err := a.c.Delete(ctx, objectKey(id), ""); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := a.c.Delete(ctx, recordKey(id), ""); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (a *Area) putRecord(ctx context.Context, e quarantine.Entry) error {
	return writeRecord(ctx, a.c, e.ID, e)
}

func (a *Area) readRecord(ctx context.Context, o s3client.Object) (quarantine.Entry, error) {
	return decodeRecord(ctx, a.c, o, func(e quarantine.Entry) string { return e.ID })
}

// writeRecord writes v as the record object of entry id (both areas' records: one object each).
func writeRecord(ctx context.Context, c recordClient, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := c.Put(ctx, recordKey(id), bytes.NewReader(b), int64(len(b)), s3client.PutOptions{}); err != nil {
		return fmt.Errorf("write entry record %s: %w", recordKey(id), err)
	}
	return nil
}

// decodeRecord reads the record o names (as listed) into a T, which must name o's own id (id of it).
// Bytes that are no record are read once more as the record is now: versitygw can answer a read of a
// record being rewritten or removed with none.
func decodeRecord[T any](ctx context.Context, c recordClient, o s3client.Object, id func(T) string) (T, error) {
	var r T
	for attempt := 0; ; attempt++ {
		b, err := readRecordBytes(ctx, c, o)
		if err != nil {
			return r, err
		}
		err = json.Unmarshal(b, &r)
		if err == nil {
			break
		}
		if attempt > 0 {
			return r, fmt.Errorf("entry record %s: %w", o.Key, err)
		}
		key := o.Key
		if o, err = c.Head(ctx, key); err != nil {
			return r, err
		}
		o.Key = key
	}
	if want := strings.TrimSuffix(strings.TrimPrefix(o.Key, Prefix), recordSuffix); id(r) != want {
		return r, fmt.Errorf("entry record %s names id %q", o.Key, id(r))
	}
	return r, nil
}

// readRecordBytes reads the entry record o names (as listed). A record rewritten since the listing (a
// staging in progress writes its record twice) is read again as it is now, a few times at most, so a
// listing beside a running mount does not report it as a problem.
func readRecordBytes(ctx context.Context, c interface {
	Head(ctx context.Context, key string) (s3client.Object, error)
	ReadAt(ctx context.Context, key string, p []byte, off int64, ifMatch string) (int, error)
}, o s3client.Object) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		if o.Size > quarantine.MaxRecord {
			return nil, fmt.Errorf("entry record %s is %d bytes, more than %d: not a record of ours", o.Key, o.Size, quarantine.MaxRecord)
		}
		b := make([]byte, o.Size)
		n, err := c.ReadAt(ctx, o.Key, b, 0, o.ETag)
		if errors.Is(err, s3client.ErrPrecondition) && attempt < 3 {
			if o, err = c.Head(ctx, o.Key); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil && !(errors.Is(err, io.EOF) && n == len(b)) {
			return nil, err
		}
		return b[:n], nil
	}
}

// walkArea lists the area: its record objects and its other objects, each in listing order.
func walkArea(ctx context.Context, c interface {
	Walk(ctx context.Context, prefix string, fn func(s3client.Object) error) error
}) (recs, objs []s3client.Object, err error) {
	err = c.Walk(ctx, Prefix, func(o s3client.Object) error {
		switch {
		case o.IsDir:
		case strings.HasSuffix(o.Key, recordSuffix):
			recs = append(recs, o)
		default:
			objs = append(objs, o)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list the quarantine area %s: %w", Prefix, err)
	}
	return recs, objs, nil
}

// readRecords reads every record listed (both areas' listings): what read makes of each (ok false: no
// entry, and no problem either), and a problem for each that cannot be read. A listing cancelled midway
// is an error, never a record taken for unreadable.
func readRecords[T any](ctx context.Context, recs []s3client.Object, read func(context.Context, s3client.Object) (T, bool, error)) ([]T, []quarantine.Problem, error) {
	var out []T
	var probs []quarantine.Problem
	for _, o := range recs {
		r, ok, err := read(ctx, o)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			probs = append(probs, quarantine.Problem{ID: strings.TrimPrefix(o.Key, Prefix), Size: o.Size, Detail: err.Error()})
			continue
		}
		if ok {
			out = append(out, r)
		}
	}
	return out, probs, nil
}

// ListAll returns every complete entry (record and object), oldest first, and a problem for each
// object without a record and each unreadable record. A record without its object is no entry (the
// staging stopped before its delete and the object is at its key, or the entry was purged).
func (a *Area) ListAll(ctx context.Context) ([]quarantine.Entry, []quarantine.Problem, error) {
	recs, objs, err := walkArea(ctx, a.c)
	if err != nil {
		return nil, nil, err
	}
	at := a.now()
	// Every record is read (an unreadable one is a problem of its own, its object or not), then each
	// object paired with its readable record.
	read, probs, err := readRecords(ctx, recs, func(ctx context.Context, o s3client.Object) (quarantine.Entry, bool, error) {
		e, err := a.readRecord(ctx, o)
		return e, true, err
	})
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[string]quarantine.Entry, len(read))
	for _, e := range read {
		byID[e.ID] = e
	}
	var crashCopies []quarantine.Problem
	unresolved := map[string]quarantine.Entry{}
	staged := func(yield func(string, s3client.Object) bool) {
		for _, o := range objs {
			if !yield(strings.TrimPrefix(o.Key, Prefix), o) {
				return
			}
		}
	}
	es, objProbs, err := quarantine.Pair(ctx, staged, quarantine.Pairing[s3client.Object]{
		Record: func(_ s3client.Object, id string) (quarantine.Entry, bool, error) {
			e, ok := byID[id]
			return e, ok, nil
		},
		Complete: func(o s3client.Object, e quarantine.Entry, _ bool) (quarantine.Entry, bool) {
			if isKept(e) {
				unresolved[e.ID] = e
			}
			if a.inPlace(ctx, e) {
				// Kept for a change that has not happened: the object is at its key. Under way in this
				// process it is no entry and no problem (its change is being made); else a crash copy.
				if !a.held(e.ID) {
					crashCopies = append(crashCopies, crashCopy(e, o.Size))
				}
				return quarantine.Entry{}, false
			}
			return e, true
		},
		Problem: func(o s3client.Object, id, detail string) quarantine.Problem {
			return quarantine.Problem{ID: id, Size: o.Size, Detail: detail + "; inspect " + Prefix + id + " in the bucket"}
		},
		NoRecord: "object without an entry record (its original key is unknown)",
	})
	if err != nil {
		return nil, nil, err
	}
	a.mu.Lock()
	a.unresolved, a.unresolvedAt = unresolved, at
	a.mu.Unlock()
	return es, append(append(probs, crashCopies...), objProbs...), nil
}

// List returns every complete entry, oldest first.
func (a *Area) List(ctx context.Context) ([]quarantine.Entry, error) {
	es, _, err := a.ListAll(ctx)
	return es, err
}

// lookupRecord reads the record of entry id as it is now (both areas' Restore and Purge): ErrNoEntry for
// an id no entry has or one without a record, AlreadyGone for a record removed since its HEAD (another
// restore or purge took the entry).
func lookupRecord[T any](ctx context.Context, c recordClient, id string, read func(context.Context, s3client.Object) (T, error)) (T, error) {
	var r T
	if id == "" || strings.ContainsAny(id, "/") || strings.HasSuffix(id, recordSuffix) {
		return r, fmt.Errorf("%w: %q", quarantine.ErrNoEntry, id)
	}
	o, err := c.Head(ctx, recordKey(id))
	if errors.Is(err, fs.ErrNotExist) {
		return r, fmt.Errorf("%w: %s", quarantine.ErrNoEntry, id)
	}
	if err != nil {
		return r, err
	}
	o.Key = recordKey(id)
	got, err := read(ctx, o)
	if errors.Is(err, fs.ErrNotExist) {
		return r, quarantine.AlreadyGone("", id)
	}
	if err != nil {
		return r, err
	}
	return got, nil
}

func (a *Area) entry(ctx context.Context, id string) (quarantine.Entry, error) {
	e, err := lookupRecord(ctx, a.c, id, a.readRecord)
	if err != nil {
		return quarantine.Entry{}, err
	}
	if _, err := a.c.Head(ctx, objectKey(id)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return quarantine.Entry{}, fmt.Errorf("%w: %s (its object is not in %s)", quarantine.ErrNoEntry, id, Prefix)
		}
		return quarantine.Entry{}, err
	}
	return e, nil
}

// Restore copies the entry's object back to its original key, only if nothing is there (If-None-Match
// where the server honours it, else a HEAD right before the copy), then drops the entry. It claims the
// entry first (claim.go): of two restores racing, one restores and the other is told it was taken.
func (a *Area) Restore(ctx context.Context, id string) (quarantine.Entry, error) {
	e, err := a.entry(ctx, id)
	if err != nil {
		return quarantine.Entry{}, err
	}
	key, err := quarantine.RestoreKey(e)
	if err != nil {
		return quarantine.Entry{}, err
	}
	cl, err := claim(ctx, a.c, id, key, a.now())
	if err != nil {
		return quarantine.Entry{}, err
	}
	if err := a.copyBack(ctx, id, key); err != nil {
		cl.release(ctx)
		return quarantine.Entry{}, err
	}
	// The record goes first: a crash after it leaves an object without record (reported by List), never
	// an entry whose object is also back at its key.
	if err := a.c.Delete(ctx, recordKey(id), ""); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return e, fmt.Errorf("restored %s, but its entry record stays: %w", key, err)
	}
	if err := a.c.Delete(ctx, objectKey(id), ""); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return e, fmt.Errorf("restored %s, but its staged copy %s stays: %w", key, objectKey(id), err)
	}
	return e, nil
}

// copyBack copies id's object to key, never over an object there.
func (a *Area) copyBack(ctx context.Context, id, key string) error {
	occupied := fmt.Errorf("restore %s: %w; move that object away first, the entry stays in quarantine", key, quarantine.ErrOccupied)
	if !a.IfNoneMatch {
		_, err := a.c.Head(ctx, key)
		if err == nil {
			return occupied
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if _, err := a.c.Copy(ctx, objectKey(id), key, "", s3client.PutOptions{IfNoneMatch: a.IfNoneMatch}); err != nil {
		if errors.Is(err, s3client.ErrPrecondition) {
			return occupied
		}
		return fmt.Errorf("restore %s: %w", key, err)
	}
	return nil
}

// Purge destroys the entry's object, then its record.
func (a *Area) Purge(ctx context.Context, id string) error {
	if _, err := a.entry(ctx, id); err != nil {
		return err
	}
	return a.drop(ctx, id)
}

// ProbeCopyIfNoneMatch reports whether the server refuses a CopyObject with If-None-Match: * onto an
// existing key (some servers, versitygw among them, ignore the header and replace the object). It
// writes and removes two probe objects in the area.
func ProbeCopyIfNoneMatch(ctx context.Context, c Client) (bool, error) {
	src, dst := Prefix+"probe-src", Prefix+"probe-dst"
	defer func() {
		cctx := context.WithoutCancel(ctx)
		_ = c.Delete(cctx, src, "")
		_ = c.Delete(cctx, dst, "")
	}()
	if _, err := c.Put(ctx, src, strings.NewReader("src"), 3, s3client.PutOptions{}); err != nil {
		return false, err
	}
	if _, err := c.Put(ctx, dst, strings.NewReader("dst"), 3, s3client.PutOptions{}); err != nil {
		return false, err
	}
	_, err := c.Copy(ctx, src, dst, "", s3client.PutOptions{IfNoneMatch: true})
	switch {
	case errors.Is(err, s3client.ErrPrecondition):
		return true, nil
	case err == nil, errors.Is(err, s3client.ErrNotImplemented):
		return false, nil
	}
	return false, err
}
