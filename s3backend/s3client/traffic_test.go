package s3client_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/ckguard/ckguard/s3backend/s3client"
)

// TestTrafficCountsForeground: every request of the client is counted, except those made with a
// context marked Background (the loss check's), so the loss check can tell the mount's own traffic.
func TestTrafficCountsForeground(t *testing.T) {
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(srv.Close)
	tr := &s3client.Traffic{}
	cfg := s3client.Config{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true, AccessKey: "k", SecretKey: "s", MaxAttempts: 1, Traffic: tr}
	c, err := s3client.New(context.Background(), cfg, s3client.Location{Bucket: "bkt"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.API().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("bkt")}); err != nil {
		t.Fatal(err)
	}
	base := tr.Foreground()
	if _, err := c.Put(ctx, "a", strings.NewReader("x"), 1, s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListPage(ctx, "", true, "", "", 1000); err != nil {
		t.Fatal(err)
	}
	fg := tr.Foreground() - base
	if fg != 2 {
		t.Fatalf("%d foreground requests counted for a put and a listing, want 2", fg)
	}
	bg := tr.Background(ctx)
	for range 3 {
		_, _ = c.Head(bg, "a")
		_, _ = c.ListPage(bg, "", true, "", "", 1000)
	}
	if n := tr.Foreground() - base; n != fg {
		t.Fatalf("background requests counted: %d foreground after 6 background requests, want %d", n, fg)
	}
	var none *s3client.Traffic
	if none.Foreground() != 0 {
		t.Fatal("a nil Traffic counts")
	}
}
