package s3client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckguard/ckguard/s3backend/s3client"
)

// TestOneAttempt: every request the client makes with a context marked by OneAttempt is sent once to a
// throttling server (503 SlowDown) and fails ErrUnavailable; unmarked, the same call is retried up to
// MaxAttempts. A caller holding the enforcer's lock relies on this: the lock waits one request, never a
// retry loop.
func TestOneAttempt(t *testing.T) {
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>test</Message></Error>`))
	}))
	t.Cleanup(srv.Close)
	const maxAttempts = 3
	cfg := s3client.Config{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true, AccessKey: "k", SecretKey: "s",
		MaxAttempts: maxAttempts, MaxBackoff: time.Millisecond}
	c, err := s3client.New(context.Background(), cfg, s3client.Location{Bucket: "bkt", Prefix: "p/"})
	if err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"HeadBucket", func(ctx context.Context) error { return c.Check(ctx) }},
		{"HeadObject", func(ctx context.Context) error { _, err := c.Head(ctx, "k"); return err }},
		{"GetObject", func(ctx context.Context) error { _, err := c.ReadAt(ctx, "k", make([]byte, 4), 0, ""); return err }},
		{"ListObjectsV2", func(ctx context.Context) error { _, err := c.ListPage(ctx, "", true, "", "", 0); return err }},
		{"PutObject", func(ctx context.Context) error {
			_, err := c.Put(ctx, "k", strings.NewReader("x"), 1, s3client.PutOptions{})
			return err
		}},
		{"DeleteObject", func(ctx context.Context) error { return c.Delete(ctx, "k", "e") }},
		{"DeleteObjects", func(ctx context.Context) error {
			_, err := c.DeleteBatch(ctx, []s3client.DeleteItem{{Key: "k", IfMatch: "e"}})
			return err
		}},
		{"CopyObject", func(ctx context.Context) error {
			_, err := c.Copy(ctx, "k", "l", "e", s3client.PutOptions{})
			return err
		}},
		{"DeleteVersion", func(ctx context.Context) error { return c.DeleteVersion(ctx, "k", "v1") }},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []struct {
				name string
				ctx  context.Context
				want int64
			}{
				{"marked", s3client.OneAttempt(context.Background()), 1},
				{"unmarked", context.Background(), maxAttempts},
			} {
				sent.Store(0)
				err := tc.call(mode.ctx)
				if !errors.Is(err, s3client.ErrUnavailable) {
					t.Errorf("%s: %v, want ErrUnavailable", mode.name, err)
				}
				if got := sent.Load(); got != mode.want {
					t.Errorf("%s: %d requests sent, want %d", mode.name, got, mode.want)
				}
			}
		})
	}
}
