package s3quarantine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// On a bucket with versioning enabled a DeleteObject only adds a delete marker: the deleted version
// stays in the bucket, hidden. VersionedArea makes that marker the quarantine itself instead of
// copying the object aside: staging is the conditional delete (the marker), restore removes the
// marker (the same version becomes current again: same bytes, ETag, version id and, on AWS, the same
// Last-Modified), purge deletes the hidden version by its version id.
//
// Only the entry records live in the area (<id>.json, as on an unversioned bucket). Invariant across a
// crash at any point of a staging: the object is current at its key or hidden by a marker with a
// record naming its version, never hidden without a record. Stage writes a pending record (no
// marker yet) first, deletes, then rewrites the record with the marker's version id. A pending record
// is resolved by its key's versions when listed: current version still ours, no entry (the delete did
// not happen); hidden by a marker, an entry.

// VersionedClient is what a VersionedArea needs of the S3 client (s3client.Client).
type VersionedClient interface {
	Head(ctx context.Context, key string) (s3client.Object, error)
	ReadAt(ctx context.Context, key string, p []byte, off int64, ifMatch string) (int, error)
	Put(ctx context.Context, key string, body io.ReadSeeker, size int64, o s3client.PutOptions) (string, error)
	Walk(ctx context.Context, prefix string, fn func(s3client.Object) error) error
	Versions(ctx context.Context, key string) ([]s3client.Version, error)
	DeleteMarking(ctx context.Context, key, ifMatch string) (string, error)
	DeleteVersion(ctx context.Context, key, versionID string) error
}

// VersionedArea is the quarantine of a versioned bucket.
type VersionedArea struct {
	c   VersionedClient
	now func() time.Time
}

var _ quarantine.Staging = (*VersionedArea)(nil)

// NewVersioned returns the quarantine of the versioned bucket c reaches. now is the clock of deletion
// times (nil: time.Now).
func NewVersioned(c VersionedClient, now func() time.Time) *VersionedArea {
	if now == nil {
		now = time.Now
	}
	return &VersionedArea{c: c, now: now}
}

// Keep stages nothing on a versioned bucket: a change in place (a rename onto key, truncated content put
// over it) leaves the version it replaces in the bucket as a noncurrent version, which S3 itself keeps
// until a lifecycle rule or a DeleteObject by version id removes it. The zero Entry says so to the mount.
// Such a version is not a quarantine entry (not listed, restored or purged by ckguard); it is brought back
// with ListObjectVersions and a CopyObject of that version id (docs/OPERATIONS.md).
func (a *VersionedArea) Keep(context.Context, string, s3client.Object, quarantine.Decision) (quarantine.Entry, error) {
	return quarantine.Entry{}, nil
}

// Applied has nothing to mark: Keep stages nothing on a versioned bucket.
func (a *VersionedArea) Applied(context.Context, quarantine.Entry) error { return nil }

// versionedRecord is the entry record on a versioned bucket: the entry, the hidden version, and the
// delete marker over it ("" while the staging is pending).
type versionedRecord struct {
	quarantine.Entry        // VersionID: the hidden version
	Marker           string `json:"delete_marker,omitempty"`
}

// VersionedID is the entry id of the deletion of key at version versionID (ETag etag).
func VersionedID(key, etag, versionID string) string { return ID(key, etag+"\x00"+versionID) }

// Stage hides the current version of key (ETag etag as decided; "" any) under a delete marker.
// ErrPrecondition (s3client) when the object changed since the decision: nothing is deleted.
func (a *VersionedArea) Stage(ctx context.Context, key, etag string, d quarantine.Decision) (quarantine.Entry, error) {
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
	if o.VersionID == "" || o.VersionID == "null" {
		// An object written before versioning was enabled has the null version; a marker would hide it,
		// but a later write to the key would replace it for good. Refuse rather than stage it so.
		return quarantine.Entry{}, fmt.Errorf("quarantine s3 %s: the object has no version id (written before the bucket's versioning was enabled, or versioning is off): nothing was deleted; mount with --quarantine 0 or copy the object onto itself once so it gets a version", key)
	}
	id := VersionedID(key, o.ETag, o.VersionID)
	e := quarantine.Entry{ID: id, Path: key, Size: o.Size, ModTime: o.ModTime, ETag: o.ETag, VersionID: o.VersionID, DeletedAt: a.now().UTC(), Decision: d}
	if !utf8.ValidString(key) {
		e.PathBytes = []byte(key)
	}
	r := versionedRecord{Entry: e}
	if err := a.putRecord(ctx, r); err != nil {
		return quarantine.Entry{}, fmt.Errorf("quarantine %s: %w (nothing was deleted)", key, err)
	}
	marker, err := a.c.DeleteMarking(ctx, key, o.ETag)
	if err != nil {
		if errors.Is(err, s3client.ErrPrecondition) {
			_ = a.dropRecord(ctx, id) // replaced since the HEAD: nothing was deleted, no entry
		}
		return quarantine.Entry{}, err
	}
	if marker == "" {
		return quarantine.Entry{}, fmt.Errorf("quarantine %s: the delete added no delete marker (is versioning still enabled on the bucket?); the version %s may be gone, check `aws s3api list-object-versions --prefix %s`", key, o.VersionID, key)
	}
	r.Marker = marker
	if err := a.putRecord(ctx, r); err != nil {
		// The pending record stays and names the version: List resolves it from the key's versions.
		return e, nil
	}
	return e, nil
}

// Restage hides the current version of key again (a restored `_metadata` the index could not record).
func (a *VersionedArea) Restage(ctx context.Context, key string, d quarantine.Decision) (quarantine.Entry, error) {
	return a.Stage(ctx, key, "", d)
}

// Unstage drops the pending record of a staging of key at etag whose delete did not happen (the
// object is still current at key): a deletion decided again as refused after a crash.
func (a *VersionedArea) Unstage(ctx context.Context, key, etag string) error {
	o, err := a.c.Head(ctx, key)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // hidden: the record is the only way back to it, keep it
		}
		return err
	}
	if o.ETag != etag {
		return nil
	}
	return a.dropRecord(ctx, VersionedID(key, o.ETag, o.VersionID))
}

func (a *VersionedArea) putRecord(ctx context.Context, r versionedRecord) error {
	return writeRecord(ctx, a.c, r.ID, r)
}

// dropRecord removes every version of an entry record (a plain delete would only hide it under a
// marker of its own), oldest first: until the last goes, the record read is the newest, so a restore's
// claim (claim.go) is never uncovered by the removal of its own version.
func (a *VersionedArea) dropRecord(ctx context.Context, id string) error {
	vs, err := a.c.Versions(ctx, recordKey(id))
	if err != nil {
		return err
	}
	for i := len(vs) - 1; i >= 0; i-- {
		v := vs[i]
		if err := a.c.DeleteVersion(ctx, recordKey(id), v.VersionID); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove entry record %s: %w", recordKey(id), err)
		}
	}
	return nil
}

func (a *VersionedArea) readRecord(ctx context.Context, o s3client.Object) (versionedRecord, error) {
	r, err := decodeRecord(ctx, a.c, o, func(r versionedRecord) string { return r.ID })
	if err != nil {
		return versionedRecord{}, err
	}
	if r.VersionID == "" {
		return versionedRecord{}, fmt.Errorf("entry record %s names no version (a record of an unversioned bucket's quarantine? its object would be %s)", o.Key, Prefix+r.ID)
	}
	return r, nil
}

// hidden reports how the record's version stands among vs (the key's versions, newest first): gone
// (purged or deleted by version id outside ckguard), current (not deleted), or hidden under the
// delete markers above it (returned, newest first).
func hidden(r versionedRecord, vs []s3client.Version) (gone, current bool, above []s3client.Version) {
	for _, v := range vs {
		if v.VersionID == r.VersionID {
			return false, v.Latest, above
		}
		above = append(above, v)
	}
	return true, false, nil
}

// resolve settles a pending record from its key's versions: ok when the version is hidden (the delete
// happened), false when it is still current or gone (no entry).
func (a *VersionedArea) resolve(ctx context.Context, r versionedRecord) (bool, error) {
	vs, err := a.c.Versions(ctx, r.Key())
	if err != nil {
		return false, err
	}
	// Hidden by the delete the staging made: a delete marker right above the version. A version written
	// over it instead (the staging stopped before its delete, then the key was written again) is no
	// deletion: the record is no entry.
	gone, current, above := hidden(r, vs)
	return !gone && !current && len(above) > 0 && above[len(above)-1].DeleteMarker, nil
}

// ListAll returns every entry, oldest first, and a problem for each unreadable record and each
// object in the area that is not a record.
func (a *VersionedArea) ListAll(ctx context.Context) ([]quarantine.Entry, []quarantine.Problem, error) {
	es, _, probs, err := a.listRecords(ctx)
	return es, probs, err
}

func (a *VersionedArea) listRecords(ctx context.Context) ([]quarantine.Entry, map[string]versionedRecord, []quarantine.Problem, error) {
	recs, objs, err := walkArea(ctx, a.c)
	if err != nil {
		return nil, nil, nil, err
	}
	var probs []quarantine.Problem
	for _, o := range objs {
		if name := strings.TrimPrefix(o.Key, Prefix); !strings.HasPrefix(name, "probe-") {
			probs = append(probs, quarantine.Problem{ID: name, Size: o.Size, Detail: "object in the quarantine area of a versioned bucket, where entries are delete markers and records only; inspect " + Prefix + name + " in the bucket"})
		}
	}
	rs, recProbs, err := readRecords(ctx, recs, func(ctx context.Context, o s3client.Object) (versionedRecord, bool, error) {
		r, err := a.readRecord(ctx, o)
		if err != nil || r.Marker != "" {
			return r, true, err
		}
		ok, err := a.resolve(ctx, r) // the delete did not happen (or the version is gone): no entry
		return r, ok, err
	})
	if err != nil {
		return nil, nil, nil, err
	}
	var es []quarantine.Entry
	byID := make(map[string]versionedRecord, len(rs))
	for _, r := range rs {
		byID[r.ID] = r
		es = append(es, r.Entry)
	}
	quarantine.SortEntries(es)
	return es, byID, append(probs, recProbs...), nil
}

// List returns every entry, oldest first.
func (a *VersionedArea) List(ctx context.Context) ([]quarantine.Entry, error) {
	es, _, err := a.ListAll(ctx)
	return es, err
}

func (a *VersionedArea) record(ctx context.Context, id string) (versionedRecord, error) {
	return lookupRecord(ctx, a.c, id, a.readRecord)
}

// Restore removes the delete markers above the entry's version, so that version is current at its key
// again, unchanged; then it drops the record. An object written at the key since (a version newer than
// the entry's that is not a delete marker) is never hidden or removed: ErrOccupied, the entry stays. It
// claims the entry first (claim.go): of two restores racing, one restores and the other is told so.
func (a *VersionedArea) Restore(ctx context.Context, id string) (quarantine.Entry, error) {
	r, err := a.record(ctx, id)
	if err != nil {
		return quarantine.Entry{}, err
	}
	key, err := quarantine.RestoreKey(r.Entry)
	if err != nil {
		return quarantine.Entry{}, err
	}
	cl, err := claim(ctx, a.c, id, key, a.now())
	if err != nil {
		return quarantine.Entry{}, err
	}
	if err := a.unhide(ctx, r); err != nil {
		cl.release(ctx)
		return quarantine.Entry{}, err
	}
	if err := a.dropRecord(ctx, id); err != nil {
		return r.Entry, fmt.Errorf("restored %s, but its entry record stays: %w", key, err)
	}
	return r.Entry, nil
}

// unhide makes r's version current at its key again by removing the delete markers above it.
func (a *VersionedArea) unhide(ctx context.Context, r versionedRecord) error {
	key := r.Key()
	vs, err := a.c.Versions(ctx, key)
	if err != nil {
		return fmt.Errorf("restore %s: %w", key, err)
	}
	gone, current, above := hidden(r, vs)
	switch {
	case gone:
		return fmt.Errorf("restore %s: %w: %s (its version %s is no longer in the bucket)", key, quarantine.ErrNoEntry, r.ID, r.VersionID)
	case current:
		return nil // back already (a restore interrupted after its marker removal, or done by hand)
	}
	for _, v := range above {
		if !v.DeleteMarker {
			return fmt.Errorf("restore %s: %w (version %s of %s was written after the deletion); move that object away first, the entry stays in quarantine", key, quarantine.ErrOccupied, v.VersionID, v.ModTime.Format(time.RFC3339))
		}
	}
	for _, v := range above {
		if err := a.c.DeleteVersion(ctx, key, v.VersionID); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("restore %s: remove delete marker %s: %w (the entry stays in quarantine)", key, v.VersionID, err)
		}
	}
	// A write racing the marker removal is not replaced (a marker's removal never touches another
	// version), but then the entry's version is not the current one: say so and keep the entry.
	o, err := a.c.Head(ctx, key)
	if err != nil {
		return fmt.Errorf("restore %s: check the restored version: %w (the entry stays in quarantine)", key, err)
	}
	if o.VersionID != r.VersionID {
		return fmt.Errorf("restore %s: %w (version %s was written meanwhile; the entry's version %s stays below it and the entry stays in quarantine)", key, quarantine.ErrOccupied, o.VersionID, r.VersionID)
	}
	return nil
}

// Purge deletes the entry's hidden version for good, then the delete markers left with nothing below
// them, then the record. The record goes last: a crash before leaves an entry whose version is gone,
// which List still shows until a purge or restore names it (and which restore reports as gone).
func (a *VersionedArea) Purge(ctx context.Context, id string) error {
	r, err := a.record(ctx, id)
	if err != nil {
		return err
	}
	key := r.Key()
	vs, err := a.c.Versions(ctx, key)
	if err != nil {
		return fmt.Errorf("purge %s: %w", key, err)
	}
	gone, current, above := hidden(r, vs)
	if current {
		// Back at its key (a marker removed outside ckguard): the object is no deletion any more.
		if err := a.dropRecord(ctx, id); err != nil {
			return err
		}
		return fmt.Errorf("purge %s: its version %s is current at its key again (restored outside ckguard): nothing was deleted, the entry is dropped", key, r.VersionID)
	}
	if !gone {
		if err := a.c.DeleteVersion(ctx, key, r.VersionID); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("purge %s: delete version %s: %w", key, r.VersionID, err)
		}
	}
	// The staging's own marker goes too, unless it is the key's latest version and an older object
	// version is below it: then it is what keeps that version hidden, and stays.
	marker := r.Marker
	if marker == "" && len(above) > 0 && above[len(above)-1].DeleteMarker {
		marker = above[len(above)-1].VersionID // a pending record's: the marker right above its version
	}
	keep := false
	for _, v := range vs {
		if v.VersionID == marker && v.Latest {
			for _, o := range vs {
				keep = keep || !o.DeleteMarker && o.VersionID != r.VersionID
			}
		}
	}
	if marker != "" && !keep {
		if err := a.c.DeleteVersion(ctx, key, marker); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("purge %s: remove delete marker %s: %w", key, marker, err)
		}
	}
	return a.dropRecord(ctx, id)
}

// Tidy is a no-op: a pending record whose delete did not happen is skipped by List and removed by the
// next Unstage of the same deletion.
func (a *VersionedArea) Tidy(ctx context.Context, _ time.Duration) error { return nil }

// Versioned reports whether the bucket c reaches has versioning enabled (a suspended bucket keeps no
// new versions: its quarantine copies as an unversioned one does).
func Versioned(ctx context.Context, c interface {
	BucketVersioning(ctx context.Context) (string, error)
}) (bool, error) {
	s, err := c.BucketVersioning(ctx)
	if err != nil {
		return false, err
	}
	return s == s3client.VersioningEnabled, nil
}
