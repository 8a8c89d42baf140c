package s3mount_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestProbeIfMatch: versitygw honours If-Match on DeleteObject (a wrong ETag gives 412) and the
// probe says so and leaves nothing behind; gofakes3 ignores the condition and the probe says that.
func TestProbeIfMatch(t *testing.T) {
	ctx := context.Background()
	t.Run("versitygw", func(t *testing.T) {
		srv := s3server.Start(t)
		srv.Bucket(t, "ckpt")
		c, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: "ckpt", Prefix: "flink/"})
		if err != nil {
			t.Fatal(err)
		}
		ok, err := s3mount.ProbeIfMatch(ctx, c)
		if err != nil || !ok {
			t.Fatalf("ProbeIfMatch = %v, %v; want honoured", ok, err)
		}
		pg, err := c.ListPage(ctx, "", false, "", "", 10)
		if err != nil || len(pg.Objects) != 0 {
			t.Errorf("probe left objects: %+v %v", pg.Objects, err)
		}
	})
	t.Run("gofakes3", func(t *testing.T) {
		c := bucketOn(t, gofakes3.New(s3mem.New()).Server())
		if ok, err := s3mount.ProbeIfMatch(ctx, c); ok || err != nil {
			t.Fatalf("ProbeIfMatch on gofakes3 (ignores If-Match) = %v, %v; want not honoured", ok, err)
		}
	})
	// A server that answers 412 to every conditional delete, the right ETag too: the
	// condition is not relied on, and the probe object still goes.
	t.Run("refuses every conditional delete", func(t *testing.T) {
		fake := gofakes3.New(s3mem.New()).Server()
		c := bucketOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodDelete && r.Header.Get("If-Match") != "" {
				w.WriteHeader(http.StatusPreconditionFailed)
				_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed</Code><Message>no</Message></Error>`))
				return
			}
			fake.ServeHTTP(w, r)
		}))
		if ok, err := s3mount.ProbeIfMatch(ctx, c); ok || err == nil {
			t.Fatalf("ProbeIfMatch on a server refusing every conditional delete = %v, %v; want not honoured, with the reason", ok, err)
		}
		pg, err := c.ListPage(ctx, "", false, "", "", 10)
		if err != nil || len(pg.Objects) != 0 {
			t.Errorf("probe left objects: %+v %v", pg.Objects, err)
		}
	})
}

// bucketOn serves h on 127.0.0.1 for the test and returns a client of bucket "bkt" there, created.
func bucketOn(t *testing.T, h http.Handler) *s3client.Client {
	t.Helper()
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	cfg := s3server.FakeConfig(hs.URL, 2)
	c := s3server.NewBucket(t, cfg, s3client.Location{Bucket: "bkt"})
	return c
}

// TestProbeBatchIfMatch: versitygw v1.8.0 deletes a key of a DeleteObjects batch whatever its ETag, so the
// probe says queued deletions must not be batched there; the probe object is gone afterwards.
func TestProbeBatchIfMatch(t *testing.T) {
	ctx := context.Background()
	srv := s3server.Start(t)
	srv.Bucket(t, "ckpt")
	c, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: "ckpt", Prefix: "flink/"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s3mount.ProbeBatchIfMatch(ctx, c); ok || err != nil {
		t.Fatalf("ProbeBatchIfMatch on versitygw = %v, %v; want not honoured, no error", ok, err)
	}
	pg, err := c.ListPage(ctx, "", false, "", "", 10)
	if err != nil || len(pg.Objects) != 0 {
		t.Errorf("probe left objects: %+v %v", pg.Objects, err)
	}
}
