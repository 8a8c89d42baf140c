// Package s3lost is the lostfound.Source of a versioned S3 bucket: a referenced object deleted beside
// the mount without a version id (`aws s3 rm`, a lifecycle expiration of current versions) is only
// hidden by a delete marker, and its newest non-deleted version is brought back by removing the
// markers above it (the very version is current again: same bytes, ETag and version id) or, where the
// markers cannot be removed (no s3:DeleteObjectVersion), by copying that version back to the key.
//
// Invariants: Find sends only ListObjectVersions; Restore lists the key's versions again and acts only
// while a delete marker is still its latest version and the newest object version below is the one
// Find chose (else nothing is done and the caller is told to look again); a copy back is create-only
// (If-None-Match), so an object written at the key meanwhile is never replaced where the server honours
// the condition on CopyObject (AWS does; versitygw 1.8 ignores it: there the window is the time from
// the second listing to the copy, one request). A key staged in
// ckguard's own quarantine (which on a versioned bucket is a delete marker with a record) is left to
// `ckguard quarantine restore`: removing its marker here would leave an entry whose purge deletes the
// version by id.
package s3lost

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/ckguard/ckguard/fs/lostfound"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// Client is what the source needs of the bucket (*s3client.Client is one). Keys are store keys.
type Client interface {
	Versions(ctx context.Context, rel string) ([]s3client.Version, error)
	DeleteVersion(ctx context.Context, rel, versionID string) error
	CopyVersion(ctx context.Context, rel, versionID string, o s3client.PutOptions) (string, error)
	Head(ctx context.Context, rel string) (s3client.Object, error)
	Location() s3client.Location
}

// Source restores from the versions of a bucket.
type Source struct {
	c Client
	// staged are the keys ckguard's quarantine holds (their restore is `ckguard quarantine restore`).
	staged map[string]bool
}

var _ lostfound.Source = (*Source)(nil)

// New returns the source of the bucket c reaches; staged names the keys staged in ckguard's
// quarantine (nil: none).
func New(c Client, staged map[string]bool) *Source { return &Source{c: c, staged: staged} }

// Name is the bucket's versions.
func (s *Source) Name() string {
	loc := s.c.Location()
	return fmt.Sprintf("the versions of s3://%s/%s", loc.Bucket, loc.Prefix)
}

// Find looks at key's versions (newest first): the delete markers on top, the newest object version
// under them.
func (s *Source) Find(ctx context.Context, key string) (lostfound.Candidate, error) {
	c := lostfound.Candidate{Key: key}
	if s.staged[key] {
		c.Reason = "staged in ckguard's quarantine: restore it with `ckguard quarantine restore " + key + "`"
		return c, nil
	}
	vs, err := s.c.Versions(ctx, key)
	if err != nil {
		return c, fmt.Errorf("versions of %s: %w", key, err)
	}
	return choose(key, vs), nil
}

// choose picks the newest object version of vs (newest first) and the markers above it.
func choose(key string, vs []s3client.Version) lostfound.Candidate {
	c := lostfound.Candidate{Key: key}
	if len(vs) == 0 {
		c.Reason = "the bucket has no version of it left (deleted by version id, or never versioned)"
		return c
	}
	if !vs[0].DeleteMarker {
		c.Present = true
		return c
	}
	for i, v := range vs {
		if v.DeleteMarker {
			c.Markers = append(c.Markers, v.VersionID)
			continue
		}
		c.Restorable = true
		c.Version, c.Size, c.ModTime = v.VersionID, v.Size, v.ModTime
		c.From = "version " + v.VersionID
		c.Method = lostfound.MethodRemoveMarkers
		for _, o := range vs[i+1:] {
			if !o.DeleteMarker {
				c.Older++
			}
		}
		return c
	}
	c.Markers = nil
	c.Reason = "only delete markers are left: every version of it was deleted by its version id"
	return c
}

// ErrChanged: the key's versions changed between Find and Restore.
var ErrChanged = errors.New("the object's versions changed since they were listed; run restore-lost again")

// Restore removes the markers above c's version; when the server refuses that (AccessDenied: the
// credentials may not delete versions, or a marker is protected), it copies the version back instead.
func (s *Source) Restore(ctx context.Context, c lostfound.Candidate) (string, error) {
	vs, err := s.c.Versions(ctx, c.Key)
	if err != nil {
		return "", fmt.Errorf("versions of %s: %w", c.Key, err)
	}
	now := choose(c.Key, vs)
	switch {
	case now.Present:
		return "", fmt.Errorf("%s reads again (written meanwhile): nothing restored", c.Key)
	case !now.Restorable || now.Version != c.Version:
		return "", fmt.Errorf("%s: %w", c.Key, ErrChanged)
	}
	method := lostfound.MethodRemoveMarkers
	for i, m := range now.Markers {
		err := s.c.DeleteVersion(ctx, c.Key, m)
		if err == nil {
			continue
		}
		if i == 0 && errors.Is(err, fs.ErrPermission) {
			// Not one marker removed: copy the version back (create-only) instead.
			if _, cerr := s.c.CopyVersion(ctx, c.Key, c.Version, s3client.PutOptions{IfNoneMatch: true}); cerr != nil {
				return "", fmt.Errorf("remove delete marker %s of %s: %v; copy version %s back: %w", m, c.Key, err, c.Version, cerr)
			}
			method = lostfound.MethodCopyVersion
			break
		}
		return "", fmt.Errorf("remove delete marker %s of %s: %w", m, c.Key, err)
	}
	o, err := s.c.Head(ctx, c.Key)
	if err != nil {
		return method, fmt.Errorf("%s after the restore: %w", c.Key, err)
	}
	if method == lostfound.MethodRemoveMarkers && o.VersionID != c.Version {
		return method, fmt.Errorf("%s after removing its delete markers reads as version %s, not %s (written meanwhile?)", c.Key, o.VersionID, c.Version)
	}
	if o.Size != c.Size {
		return method, fmt.Errorf("%s after the restore is %d bytes, version %s was %d", c.Key, o.Size, c.Version, c.Size)
	}
	return method, nil
}
