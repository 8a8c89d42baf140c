package s3quarantine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/quarantine/quarantinetest"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3quarantine"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// s3Store is a bucket of versitygw (a fresh one per case) under the store prefix flink/.
type s3Store struct {
	c         *s3client.Client
	versioned bool
}

func (s *s3Store) Open(t testing.TB) quarantine.Staging {
	a, info, err := s3quarantine.Open(context.Background(), s.c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Versioned != s.versioned {
		t.Fatalf("Open chose versioned=%v on a bucket with versioning %v", info.Versioned, s.versioned)
	}
	return a
}

func (s *s3Store) Write(t testing.TB, key string, data []byte) {
	put(t.(*testing.T), s.c, key, string(data))
}

func (s *s3Store) Read(t testing.TB, key string) ([]byte, bool) {
	ctx := context.Background()
	o, err := s.c.Head(ctx, key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, o.Size)
	n, err := s.c.ReadAt(ctx, key, b, 0, "")
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return b[:n], true
}

// Remove takes the object away for good: on a versioned bucket its current version is deleted by id
// (a plain delete would only hide it under a marker, which a restore must not remove).
func (s *s3Store) Remove(t testing.TB, key string) {
	ctx := context.Background()
	o, err := s.c.Head(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if s.versioned && o.VersionID != "" && o.VersionID != "null" {
		err = s.c.DeleteVersion(ctx, key, o.VersionID)
	} else {
		err = s.c.Delete(ctx, key, "")
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (s *s3Store) Crash(t testing.TB, a quarantine.Staging, key string, d quarantine.Decision, step int) bool {
	cc := &crashingClient{Client: s.c}
	cc.Arm(step)
	var crashed quarantine.Staging
	switch a := a.(type) {
	case *s3quarantine.Area:
		crashed = s3quarantine.New(cc, nil, a.IfNoneMatch)
	case *s3quarantine.VersionedArea:
		crashed = s3quarantine.NewVersioned(cc, nil)
	default:
		t.Fatalf("area %T", a)
	}
	_, err := crashed.Restage(context.Background(), key, d)
	if err != nil && !errors.Is(err, quarantinetest.ErrCrashed) {
		t.Fatalf("staging %s before its crash at step %d: %v", key, step, err)
	}
	return cc.Crashed()
}

// crashingClient passes the bucket the changes (puts, copies, deletes) its Crasher lets through.
type crashingClient struct {
	*s3client.Client
	quarantinetest.Crasher
}

func (c *crashingClient) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, o s3client.PutOptions) (string, error) {
	if err := c.Change("put", key); err != nil {
		return "", err
	}
	return c.Client.Put(ctx, key, body, size, o)
}

func (c *crashingClient) Copy(ctx context.Context, src, dst, srcETag string, o s3client.PutOptions) (string, error) {
	if err := c.Change("copy", dst); err != nil {
		return "", err
	}
	return c.Client.Copy(ctx, src, dst, srcETag, o)
}

func (c *crashingClient) Delete(ctx context.Context, key, ifMatch string) error {
	if err := c.Change("delete", key); err != nil {
		return err
	}
	return c.Client.Delete(ctx, key, ifMatch)
}

func (c *crashingClient) DeleteMarking(ctx context.Context, key, ifMatch string) (string, error) {
	if err := c.Change("delete", key); err != nil {
		return "", err
	}
	return c.Client.DeleteMarking(ctx, key, ifMatch)
}

func (c *crashingClient) DeleteVersion(ctx context.Context, key, versionID string) error {
	if err := c.Change("delete version", key); err != nil {
		return err
	}
	return c.Client.DeleteVersion(ctx, key, versionID)
}

// runSuite runs the conformance suite on buckets of one server (config cfg), made by bucket (with
// versioning enabled or not): the copy-based area on a plain bucket, the delete-marker area on a
// versioned one.
func runSuite(t *testing.T, cfg s3client.Config, bucket func(t *testing.T, name string, versioned bool)) {
	n := 0
	for _, versioned := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "versioned"}[versioned], func(t *testing.T) {
			quarantinetest.Run(t, func(t *testing.T) quarantinetest.Store {
				n++
				name := fmt.Sprintf("suite%d", n)
				bucket(t, name, versioned)
				c, err := s3client.New(context.Background(), cfg, s3client.Location{Bucket: name, Prefix: "flink/"})
				if err != nil {
					t.Fatal(err)
				}
				return &s3Store{c: c, versioned: versioned}
			})
		})
	}
}

// TestQuarantineSuiteS3 runs the conformance suite on versitygw.
func TestQuarantineSuiteS3(t *testing.T) {
	srv := s3server.StartVersioned(t)
	runSuite(t, srv.Config(), func(t *testing.T, name string, versioned bool) {
		if versioned {
			srv.VersionedBucket(t, name)
		} else {
			srv.Bucket(t, name)
		}
	})
}

// TestQuarantineSuiteMinIO runs the conformance suite on MinIO too (a second S3 implementation of the
// conditional writes a restore's claim relies on, claim.go).
func TestQuarantineSuiteMinIO(t *testing.T) {
	ctx := context.Background()
	srv := s3server.StartMinIO(t)
	runSuite(t, srv.Config(), func(t *testing.T, name string, versioned bool) {
		admin, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.API().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
			t.Fatal(err)
		}
		if versioned {
			if _, err := admin.API().PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(name),
				VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
				t.Fatal(err)
			}
		}
	})
}
