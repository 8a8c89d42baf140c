package s3quarantine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// Stager is a quarantine area a mount stages deletions in: Area (copies) or VersionedArea (delete
// markers).
type Stager interface {
	quarantine.Staging
	Stage(ctx context.Context, key, etag string, d quarantine.Decision) (quarantine.Entry, error)
	Unstage(ctx context.Context, key, etag string) error
	Keep(ctx context.Context, key string, o s3client.Object, d quarantine.Decision) (quarantine.Entry, error)
	Applied(ctx context.Context, e quarantine.Entry) error
}

var (
	_ Stager = (*Area)(nil)
	_ Stager = (*VersionedArea)(nil)
)

// Info says which quarantine Open chose and why.
type Info struct {
	// Versioned: the bucket has versioning enabled and deletions are staged as delete markers.
	Versioned bool
	// IfNoneMatch (copy-based area only): the server refuses a CopyObject with If-None-Match onto an
	// existing key (ProbeCopyIfNoneMatch).
	IfNoneMatch bool
	// VersioningErr is why the bucket's versioning could not be read (the copy-based area is used: it
	// is correct on any bucket, on a versioned one it only keeps an extra hidden version per deletion).
	VersioningErr error
}

// Open returns the quarantine of the store c reaches: the delete markers themselves when the bucket
// has versioning enabled (GetBucketVersioning), else server-side copies. now is the clock of deletion
// times (nil: time.Now).
func Open(ctx context.Context, c *s3client.Client, now func() time.Time) (Stager, Info, error) {
	var info Info
	v, err := Versioned(ctx, c)
	switch {
	case err == nil && v:
		info.Versioned = true
		return NewVersioned(c, now), info, nil
	case err != nil && ctx.Err() != nil:
		return nil, info, err
	case err != nil && !errors.Is(err, s3client.ErrNotImplemented):
		info.VersioningErr = err
	}
	inm, err := ProbeCopyIfNoneMatch(ctx, c)
	if err != nil {
		return nil, info, fmt.Errorf("cannot write in the quarantine area %s: %w", Prefix, err)
	}
	info.IfNoneMatch = inm
	return New(c, now, inm), info, nil
}
