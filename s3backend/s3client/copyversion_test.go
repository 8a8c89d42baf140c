package s3client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestCopyVersionOnVersitygw: the copy back of restore-lost (where delete markers cannot be removed):
// a hidden version copied to its own key reads again with its bytes, create-only while a delete marker
// is the latest version. versitygw ignores If-None-Match on CopyObject (as s3quarantine's
// ProbeCopyIfNoneMatch finds): the second copy is logged, not asserted.
func TestCopyVersionOnVersitygw(t *testing.T) {
	srv := s3server.StartVersioned(t)
	ctx := context.Background()
	c, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: srv.VersionedBucket(t, "vers")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.API().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("vers"), Key: aws.String("a/f x"), Body: strings.NewReader("hello")}); err != nil {
		t.Fatal(err)
	}
	o, err := c.Head(ctx, "a/f x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteMarking(ctx, "a/f x", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CopyVersion(ctx, "a/f x", o.VersionID, s3client.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("copy version %s back under its delete marker: %v", o.VersionID, err)
	}
	n, err := c.Head(ctx, "a/f x")
	if err != nil || n.Size != 5 || n.ETag != o.ETag {
		t.Fatalf("after the copy: %+v, %v; want 5 bytes, ETag %s", n, err, o.ETag)
	}
	_, err = c.CopyVersion(ctx, "a/f x", o.VersionID, s3client.PutOptions{IfNoneMatch: true})
	t.Logf("create-only copy over a current object: %v (ErrPrecondition: %v)", err, errors.Is(err, s3client.ErrPrecondition))
}
