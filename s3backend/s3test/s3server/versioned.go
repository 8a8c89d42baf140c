package s3server

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ckguard/ckguard/s3backend/s3client"
)

// StartVersioned is Start with bucket versioning available: versitygw's posix backend keeps the old
// versions and delete markers in a directory of its own (--versioning-dir). Buckets still start
// unversioned; VersionedBucket creates one with versioning enabled.
//
// Known difference from AWS: when a delete marker is removed, versitygw moves the version's file back
// and reports the move's time as its Last-Modified (AWS keeps the version's original time). ETag,
// bytes, size and version id are kept.
func StartVersioned(t testing.TB) *Server {
	t.Helper()
	base := t.TempDir()
	return startWith(t, func(s *Server) error {
		s.DataDir = filepath.Join(base, "data")
		s.backend = []string{"--versioning-dir", filepath.Join(base, "versions")}
		return mkdirs(s.DataDir, filepath.Join(base, "versions"))
	})
}

// VersionedBucket creates a bucket with versioning enabled and returns its name.
func (s *Server) VersionedBucket(t testing.TB, name string) string {
	t.Helper()
	s.Bucket(t, name)
	c, err := s3client.New(context.Background(), s.Config(), s3client.Location{Bucket: name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.API().PutBucketVersioning(context.Background(), &s3.PutBucketVersioningInput{Bucket: aws.String(name),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatalf("enable versioning on bucket %s: %v", name, err)
	}
	return name
}

func mkdirs(dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// ObjectLockBucket creates a bucket with Object Lock enabled (which enables versioning) and returns its
// name. Start the server with StartVersioned.
func (s *Server) ObjectLockBucket(t testing.TB, name string) string {
	t.Helper()
	c, err := s3client.New(context.Background(), s.Config(), s3client.Location{Bucket: name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.API().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name),
		ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
		t.Fatalf("create bucket %s with Object Lock: %v", name, err)
	}
	return name
}
