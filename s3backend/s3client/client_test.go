package s3client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// backend is one S3 server the same tests run against.
type backend struct {
	name string
	// realConditionals: the server enforces If-Match on DeleteObject (gofakes3 does not).
	realConditionals bool
	new              func(t *testing.T, prefix string) *s3client.Client
}

func backends() []backend {
	return []backend{
		{name: "gofakes3", new: newFake},
		{name: "versitygw", realConditionals: true, new: newVersity},
	}
}

func newFake(t *testing.T, prefix string) *s3client.Client {
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(srv.Close)
	cfg := s3server.FakeConfig(srv.URL, 2)
	c := s3server.NewBucket(t, cfg, s3client.Location{Bucket: "bkt", Prefix: prefix})
	return c
}

func newVersity(t *testing.T, prefix string) *s3client.Client {
	srv := s3server.Start(t)
	srv.Bucket(t, "bkt")
	c, err := s3client.New(context.Background(), srv.Config(), s3client.Location{Bucket: "bkt", Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func put(t *testing.T, c *s3client.Client, key, body string) string {
	t.Helper()
	etag, err := c.Put(context.Background(), key, strings.NewReader(body), int64(len(body)), s3client.PutOptions{})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return etag
}

func TestClient(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			c := b.new(t, "flink/ckpt/")
			etag := put(t, c, "job/chk-1/_metadata", "hello world")
			put(t, c, "job/chk-1/a", "A")
			put(t, c, "job/shared/s1", "S1")
			put(t, c, "job/shared/s2", "S2")
			put(t, c, "job/taskowned/", "") // a directory marker

			// Head: size, etag, missing → fs.ErrNotExist / ENOENT.
			o, err := c.Head(ctx, "job/chk-1/_metadata")
			if err != nil || o.Size != 11 || o.ETag != etag || o.ModTime.IsZero() {
				t.Fatalf("head = %+v, %v (etag %q)", o, err, etag)
			}
			_, err = c.Head(ctx, "job/missing")
			if !errors.Is(err, fs.ErrNotExist) || s3client.Errno(err) != syscall.ENOENT {
				t.Fatalf("head missing: %v", err)
			}
			if !strings.Contains(err.Error(), "s3://bkt/flink/ckpt/job/missing") {
				t.Errorf("error does not name the object: %v", err)
			}

			// Ranged reads, EOF semantics of io.ReaderAt.
			p := make([]byte, 5)
			if n, err := c.ReadAt(ctx, "job/chk-1/_metadata", p, 6, ""); n != 5 || err != nil || string(p) != "world" {
				t.Fatalf("readat = %d %v %q", n, err, p)
			}
			if n, err := c.ReadAt(ctx, "job/chk-1/_metadata", p, 8, ""); n != 3 || err != io.EOF || string(p[:3]) != "rld" {
				t.Fatalf("short readat = %d %v %q", n, err, p[:n])
			}
			if _, err := c.ReadAt(ctx, "job/nope", p, 0, ""); s3client.Errno(err) != syscall.ENOENT {
				t.Fatalf("readat missing: %v", err)
			}

			// Delimiter listing: files, markers and common prefixes, relative to the client's prefix.
			pg, err := c.ListPage(ctx, "job/", true, "", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			dirs := pg.Prefixes
			for _, o := range pg.Objects {
				if strings.HasSuffix(o.Key, "/") { // gofakes3 reports a "dir/" marker as an object
					dirs = append(dirs, strings.TrimSuffix(o.Key, "/"))
				}
			}
			sort.Strings(dirs)
			if got := strings.Join(dirs, ","); got != "job/chk-1,job/shared,job/taskowned" {
				t.Errorf("prefixes = %s", got)
			}
			// Pagination: 1 key per page over the recursive listing.
			var keys []string
			tok := ""
			for pages := 0; ; pages++ {
				pg, err := c.ListPage(ctx, "job/", false, tok, "", 1)
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range pg.Objects {
					keys = append(keys, o.Key)
				}
				if pg.Next == "" {
					break
				}
				tok = pg.Next
				if pages > 10 {
					t.Fatal("pagination does not end")
				}
			}
			want := "job/chk-1/_metadata,job/chk-1/a,job/shared/s1,job/shared/s2,job/taskowned/"
			if got := strings.Join(keys, ","); got != want {
				t.Errorf("paged keys = %s, want %s", got, want)
			}
			var walked []string
			if err := c.Walk(ctx, "", func(o s3client.Object) error { walked = append(walked, o.Key); return nil }); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(walked, ","); got != want {
				t.Errorf("walk = %s", got)
			}

			// Copy conditional on the source ETag.
			if _, err := c.Copy(ctx, "job/shared/s1", "job/shared/s1.copy", put(t, c, "job/shared/s1", "S1"), s3client.PutOptions{}); err != nil {
				t.Fatalf("copy: %v", err)
			}
			if b.realConditionals {
				if _, err := c.Copy(ctx, "job/shared/s1", "job/x", "0123456789abcdef0123456789abcdef", s3client.PutOptions{}); s3client.Errno(err) != syscall.ESTALE {
					t.Errorf("copy with a stale source ETag: %v, want ESTALE", err)
				}
				// versitygw v1.8.0 ignores If-None-Match on CopyObject (the destination condition); the mount
				// therefore checks the destination itself before a rename (docs/SEMANTICS.md, rename race).
				if _, err := c.Copy(ctx, "job/shared/s1", "job/chk-1/a", "", s3client.PutOptions{IfNoneMatch: true}); err == nil {
					t.Logf("server ignores If-None-Match on CopyObject")
				}
				put(t, c, "job/chk-1/a", "A")
			}

			// Conditional delete: a stale ETag must not delete (where the server enforces it).
			e2 := put(t, c, "job/shared/s2", "S2 replaced")
			if b.realConditionals {
				err := c.Delete(ctx, "job/shared/s2", "00000000000000000000000000000000")
				if !errors.Is(err, s3client.ErrPrecondition) || s3client.Errno(err) != syscall.ESTALE {
					t.Fatalf("delete with a stale ETag: %v, want precondition failed", err)
				}
				if _, err := c.Head(ctx, "job/shared/s2"); err != nil {
					t.Fatalf("object deleted despite the failed precondition: %v", err)
				}
			}
			if err := c.Delete(ctx, "job/shared/s2", e2); err != nil {
				t.Fatalf("delete with the current ETag: %v", err)
			}
			if _, err := c.Head(ctx, "job/shared/s2"); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("still there after delete: %v", err)
			}

			// Create-only put.
			if _, err := c.Put(ctx, "job/chk-1/a", strings.NewReader("B"), 1, s3client.PutOptions{IfNoneMatch: true}); s3client.Errno(err) != syscall.ESTALE {
				t.Errorf("create-only put over an existing key: %v, want ESTALE", err)
			}

			// Multipart upload above the part size, read back.
			big := make([]byte, 11<<20+123)
			_, _ = rand.Read(big)
			if _, err := c.Upload(ctx, "job/big", bytes.NewReader(big), int64(len(big)), 5<<20, 3, s3client.PutOptions{}); err != nil {
				t.Fatalf("multipart upload: %v", err)
			}
			got := make([]byte, len(big))
			if n, err := c.ReadAt(ctx, "job/big", got, 0, ""); n != len(big) || (err != nil && err != io.EOF) || !bytes.Equal(got, big) {
				t.Fatalf("multipart read back: n=%d err=%v equal=%v", n, err, bytes.Equal(got, big))
			}
		})
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct{ in, bucket, prefix, err string }{
		{"s3://b/flink/ckpt", "b", "flink/ckpt/", ""},
		{"s3a://b/flink//ckpt/", "b", "flink/ckpt/", ""},
		{"s3p://b", "b", "", ""},
		{"s3://b/", "b", "", ""},
		{"hdfs://nn/x", "", "", "scheme"},
		{"s3:///x", "", "", "no bucket"},
	} {
		loc, err := s3client.ParseURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || loc.Bucket != tc.bucket || loc.Prefix != tc.prefix {
			t.Errorf("%s = %+v, %v", tc.in, loc, err)
		}
	}
}

func TestErrno(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{fmt.Errorf("x: %w", fs.ErrNotExist), syscall.ENOENT},
		{s3client.ErrPrecondition, syscall.ESTALE},
		{s3client.ErrUnavailable, syscall.EIO},
		{context.Canceled, syscall.EINTR},
		{context.DeadlineExceeded, syscall.EIO},
		{errors.New("anything else"), syscall.EIO},
	} {
		if got := s3client.Errno(tc.err); got != tc.want {
			t.Errorf("Errno(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestUnavailable: a server that is gone maps to EIO within the bounded retries, and 403 maps to EACCES.
func TestUnavailableAndDenied(t *testing.T) {
	srv := s3server.Start(t)
	srv.Bucket(t, "bkt")
	cfg := srv.Config()
	cfg.SecretKey = "wrong"
	c, _ := s3client.New(context.Background(), cfg, s3client.Location{Bucket: "bkt"})
	if _, err := c.Head(context.Background(), "x"); s3client.Errno(err) != syscall.EACCES && s3client.Errno(err) != syscall.ENOENT {
		t.Errorf("wrong secret: %v (errno %v)", err, s3client.Errno(err))
	}
	if err := c.Check(context.Background()); s3client.Errno(err) != syscall.EACCES {
		t.Errorf("wrong secret HeadBucket: %v, want EACCES", err)
	}
	c, _ = s3client.New(context.Background(), srv.Config(), s3client.Location{Bucket: "bkt"})
	srv.Kill()
	_, err := c.Head(context.Background(), "x")
	if s3client.Errno(err) != syscall.EIO || !errors.Is(err, s3client.ErrUnavailable) {
		t.Errorf("dead server: %v, want EIO", err)
	}
}

// dateRewriter answers with the Date header of a server whose clock reads date.
type dateRewriter struct {
	h    http.Handler
	date time.Time
}

func (d dateRewriter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Date", d.date.UTC().Format(http.TimeFormat))
	d.h.ServeHTTP(w, r)
}

// ServerTime reads the service's clock from its Date header, not this host's.
func TestServerTimeFromDateHeader(t *testing.T) {
	// Within gofakes3's 15-minute window for request times: the SDK corrects its signing clock by the
	// Date headers it sees.
	behind := time.Now().Add(-7 * time.Minute).Truncate(time.Second)
	srv := httptest.NewServer(dateRewriter{h: gofakes3.New(s3mem.New()).Server(), date: behind})
	t.Cleanup(srv.Close)
	cfg := s3server.FakeConfig(srv.URL, 2)
	c := s3server.NewBucket(t, cfg, s3client.Location{Bucket: "bkt", Prefix: "flink/"})
	got, err := c.ServerTime(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(behind) {
		t.Errorf("server time %s, the server's Date header says %s", got, behind)
	}
}
