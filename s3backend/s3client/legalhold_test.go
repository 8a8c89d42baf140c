package s3client_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestLegalHoldOnVersitygw checks what holds rest on, on the real server: Object Lock is reported, a
// held version refuses a delete by its version id, a delete without one only adds a marker, removing
// the marker brings the object back, and after the hold is OFF the versioned delete succeeds.
func TestLegalHoldOnVersitygw(t *testing.T) {
	srv := s3server.StartVersioned(t)
	ctx := context.Background()
	plain, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: srv.VersionedBucket(t, "plain")})
	if err != nil {
		t.Fatal(err)
	}
	if on, err := plain.ObjectLockEnabled(ctx); err != nil || on {
		t.Fatalf("ObjectLockEnabled on a bucket without Object Lock = %v, %v; want false, nil", on, err)
	}
	c, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: srv.ObjectLockBucket(t, "locked")})
	if err != nil {
		t.Fatal(err)
	}
	if on, err := c.ObjectLockEnabled(ctx); err != nil || !on {
		t.Fatalf("ObjectLockEnabled = %v, %v; want true, nil", on, err)
	}
	if _, err := c.API().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("locked"), Key: aws.String("a/f"), Body: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	o, err := c.Head(ctx, "a/f")
	if err != nil || o.VersionID == "" {
		t.Fatalf("head: %+v %v", o, err)
	}
	if held, err := c.LegalHold(ctx, "a/f", o.VersionID); err != nil || held {
		t.Fatalf("LegalHold before = %v, %v", held, err)
	}
	for range 2 { // idempotent
		if err := c.SetLegalHold(ctx, "a/f", o.VersionID, true); err != nil {
			t.Fatal(err)
		}
	}
	if held, err := c.LegalHold(ctx, "a/f", o.VersionID); err != nil || !held {
		t.Fatalf("LegalHold after ON = %v, %v", held, err)
	}
	if err := c.DeleteVersion(ctx, "a/f", o.VersionID); err == nil {
		t.Fatal("the versioned delete of a held version succeeded")
	} else {
		t.Logf("versioned delete of a held version: %v", err)
	}
	marker, err := c.DeleteMarking(ctx, "a/f", "")
	if err != nil || marker == "" {
		t.Fatalf("delete without version id on a held object = %q, %v; want a delete marker", marker, err)
	}
	if _, err := c.Head(ctx, "a/f"); err == nil {
		t.Fatal("object still reads after the delete marker")
	}
	if err := c.DeleteVersion(ctx, "a/f", marker); err != nil {
		t.Fatalf("remove the delete marker: %v", err)
	}
	if back, err := c.Head(ctx, "a/f"); err != nil || back.VersionID != o.VersionID {
		t.Fatalf("after the marker's removal: %+v %v; want version %s", back, err, o.VersionID)
	}
	if err := c.SetLegalHold(ctx, "a/f", o.VersionID, false); err != nil {
		t.Fatal(err)
	}
	if err := c.SetLegalHold(ctx, "a/f", o.VersionID, false); err != nil {
		t.Fatalf("OFF twice: %v", err)
	}
	if err := c.DeleteVersion(ctx, "a/f", o.VersionID); err != nil {
		t.Fatalf("versioned delete after the hold is OFF: %v", err)
	}
}
