// Package s3shared is the shared state area (package shared) of an S3 store: one object per record
// at shared.Prefix+name below the store's prefix, its ETag the version. Create is a PutObject with
// If-None-Match: *, replace one with If-Match: <etag>; the server's 412 (or 409
// ConditionalRequestConflict, two conditional writes racing) is shared.ErrConflict. The client's own
// retries may resend a write whose first send was applied and answer it 412: shared.Update tells
// that from a conflict by the write ids in the record.
package s3shared

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// CAS is the S3 shared.CAS.
type CAS struct {
	c *s3client.Client
}

// New returns the shared area of the store c is located at.
func New(c *s3client.Client) *CAS { return &CAS{c: c} }

// Where implements shared.CAS.
func (s *CAS) Where() string {
	loc := s.c.Location()
	return "s3://" + loc.Bucket + "/" + loc.Prefix + strings.TrimSuffix(shared.Prefix, "/")
}

func (s *CAS) key(name string) string { return shared.Prefix + name }

// Get implements shared.CAS.
func (s *CAS) Get(ctx context.Context, name string) ([]byte, string, error) {
	if err := shared.ValidName(name); err != nil {
		return nil, "", err
	}
	loc := s.c.Location()
	ctx, cancel := context.WithTimeout(ctx, s.c.OpTimeout())
	defer cancel()
	out, err := s.c.API().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(loc.Bucket), Key: aws.String(loc.Prefix + s.key(name))})
	if err != nil {
		var nk *types.NoSuchKey
		if errors.As(err, &nk) {
			return nil, "", fmt.Errorf("shared record %s: %w", name, fs.ErrNotExist)
		}
		return nil, "", fmt.Errorf("shared record %s/%s: GetObject: %w", s.Where(), name, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(io.LimitReader(out.Body, shared.MaxRecordBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("shared record %s/%s: GetObject: %w", s.Where(), name, err)
	}
	if len(b) > shared.MaxRecordBytes {
		return nil, "", &shared.DamagedError{Record: s.Where() + "/" + name, Err: fmt.Errorf("longer than %d bytes, more than a shared record holds", shared.MaxRecordBytes)}
	}
	return b, strings.Trim(aws.ToString(out.ETag), `"`), nil
}

// Put implements shared.CAS.
func (s *CAS) Put(ctx context.Context, name string, data []byte, prev string) (string, error) {
	if err := shared.ValidName(name); err != nil {
		return "", err
	}
	o := s3client.PutOptions{IfNoneMatch: prev == "", IfMatch: prev}
	v, err := s.c.Put(ctx, s.key(name), bytes.NewReader(data), int64(len(data)), o)
	if errors.Is(err, s3client.ErrPrecondition) {
		return "", shared.ErrConflict
	}
	if err != nil {
		return "", fmt.Errorf("shared record %s/%s: %w", s.Where(), name, err)
	}
	return v, nil
}

// List implements shared.CAS: one ListObjectsV2 page per 1,000 records, with their ETags.
func (s *CAS) List(ctx context.Context, prefix string) ([]shared.Entry, error) {
	var out []shared.Entry
	err := s.c.Walk(ctx, shared.Prefix+prefix, func(o s3client.Object) error {
		if o.IsDir || strings.HasSuffix(o.Key, "/") {
			return nil
		}
		name := strings.TrimPrefix(o.Key, shared.Prefix)
		if shared.ValidName(name) == nil {
			out = append(out, shared.Entry{Name: name, Version: o.ETag})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the shared state %s: %w", s.Where(), err)
	}
	return out, nil
}

// Exists reports whether the area holds any record (one listing request of one key).
func (s *CAS) Exists(ctx context.Context) (bool, error) {
	pg, err := s.c.ListPage(ctx, shared.Prefix, false, "", "", 1)
	if err != nil {
		return false, fmt.Errorf("look for the shared state %s: %w", s.Where(), err)
	}
	return len(pg.Objects) > 0, nil
}
