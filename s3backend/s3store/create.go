package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// CreateExclusive puts data at key only if no object is there: a PutObject with If-None-Match: *, so
// an object written meanwhile by anyone is never replaced (the server answers 412, reported as
// fs.ErrExist). S3 sets the object's time itself: a restored `_metadata` carries the time of the
// restore, not mtime (the index then sees it as just completed, which protects more, never less).
// uid is ignored: S3 has no POSIX owners.
func (s *Store) CreateExclusive(ctx context.Context, key string, data []byte, mtime time.Time, uid *uint32) error {
	k, err := store.CleanKey(key)
	if err != nil {
		return err
	}
	if k == "" {
		return fmt.Errorf("create %q: %w", key, store.ErrInvalidPath)
	}
	if _, err := s.c.Put(ctx, k, bytes.NewReader(data), int64(len(data)), s3client.PutOptions{IfNoneMatch: true}); err != nil {
		if errors.Is(err, s3client.ErrPrecondition) {
			return fmt.Errorf("create %s: %w: never overwritten", k, fs.ErrExist)
		}
		return fmt.Errorf("create %s: %w", k, err)
	}
	if s.opts.Attrs != nil {
		s.opts.Attrs.Drop(k) // the mount may remember it as gone
	}
	s.Learn(k)
	return nil
}
