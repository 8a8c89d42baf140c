package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/storetest"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3store"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// counting wraps an S3 handler and counts requests by method.
type counting struct {
	h          http.Handler
	gets, head atomic.Int64
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		c.head.Add(1)
	} else if r.Method == http.MethodGet {
		c.gets.Add(1)
	}
	c.h.ServeHTTP(w, r)
}

func fakeClient(t *testing.T, prefix string) (*s3client.Client, *counting) {
	cnt := &counting{h: gofakes3.New(s3mem.New()).Server()}
	srv := httptest.NewServer(cnt)
	t.Cleanup(srv.Close)
	cfg := s3server.FakeConfig(srv.URL, 2)
	c := s3server.NewBucket(t, cfg, s3client.Location{Bucket: "bkt", Prefix: prefix})
	return c, cnt
}

func putter(c *s3client.Client) func(ctx context.Context, key string, data []byte, _ time.Time) error {
	return func(ctx context.Context, key string, data []byte, _ time.Time) error {
		_, err := c.Put(ctx, key, bytes.NewReader(data), int64(len(data)), s3client.PutOptions{})
		return err
	}
}

// TestConformanceFake runs the index's Store conformance suite against gofakes3 (fast, -short).
func TestConformanceFake(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		c, _ := fakeClient(t, "flink/ckpt/")
		return storetest.Harness{Store: s3store.New(c, s3store.Options{}), Put: putter(c)}
	})
}

// TestConformanceVersity runs it against a real S3 server. The posix backend keeps an object as a file,
// whose mtime is the object's Last-Modified, so modification times are settable here.
func TestConformanceVersity(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		srv := s3server.Start(t)
		srv.Bucket(t, "bkt")
		c, err := s3client.New(context.Background(), srv.Config(), s3client.Location{Bucket: "bkt", Prefix: "flink/ckpt/"})
		if err != nil {
			t.Fatal(err)
		}
		put := putter(c)
		return storetest.Harness{Store: s3store.New(c, s3store.Options{}), ModTimeSettable: true,
			Put: func(ctx context.Context, key string, data []byte, mt time.Time) error {
				if err := put(ctx, key, data, mt); err != nil {
					return err
				}
				return os.Chtimes(filepath.Join(srv.DataDir, "bkt", "flink/ckpt", key), mt, mt)
			}}
	})
}

func list(t *testing.T, s *s3store.Store) string {
	t.Helper()
	var got []string
	if err := s.ListMetadata(context.Background(), func(oi store.ObjectInfo) error { got = append(got, oi.Path); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	return strings.Join(got, ",")
}

// TestDiscoveryFailsClosed: any S3 error aborts ListMetadata in every mode, a dead server as much as a
// single failed HEAD or listing page in the middle of a descent (a partial listing is never reported as
// the store).
func TestDiscoveryFailsClosed(t *testing.T) {
	srv := s3server.Start(t)
	srv.Bucket(t, "bkt")
	proxy := s3server.NewProxy(t, srv.Endpoint)
	cfg := srv.Config()
	cfg.Endpoint = proxy.URL
	cfg.MaxAttempts = 2
	c, _ := s3client.New(context.Background(), cfg, s3client.Location{Bucket: "bkt"})
	for _, k := range []string{"ckpt/j/chk-1/_metadata", "ckpt/j/chk-2/_metadata", "ckpt/k/chk-1/_metadata", "sp/savepoint-a-1/_metadata"} {
		if _, err := c.Put(context.Background(), k, strings.NewReader("m"), 1, s3client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	def := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	full := s3store.New(c, s3store.Options{FullWalk: true})
	want := "ckpt/j/chk-1/_metadata,ckpt/j/chk-2/_metadata,ckpt/k/chk-1/_metadata,sp/savepoint-a-1/_metadata"
	for _, s := range []*s3store.Store{def, full} {
		if got := list(t, s); got != want {
			t.Fatalf("listing = %s, want %s", got, want)
		}
	}
	for _, tc := range []struct {
		name  string
		fault func()
	}{
		{"one HEAD fails", func() { proxy.FailNext("HeadObject", 100, false) }},
		{"one listing page fails", func() { proxy.FailNext("ListObjectsV2", 100, false) }},
		{"dead server", proxy.Kill},
	} {
		for _, mode := range []string{"descent", "full walk", "ListAllMetadata"} {
			if tc.name == "one HEAD fails" && mode != "descent" {
				continue // walks send no HEAD
			}
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				tc.fault()
				defer func() {
					proxy.Revive()
					proxy.FailNext("HeadObject", 0, false)
					proxy.FailNext("ListObjectsV2", 0, false)
				}()
				var err error
				switch mode {
				case "descent":
					err = def.ListMetadata(context.Background(), func(store.ObjectInfo) error { return nil })
				case "full walk":
					err = full.ListMetadata(context.Background(), func(store.ObjectInfo) error { return nil })
				default:
					err = def.ListAllMetadata(context.Background(), func(store.ObjectInfo) error { return nil })
				}
				if s3client.Errno(err) != 5 /* EIO */ {
					t.Errorf("%s: %v, want an EIO-class error", mode, err)
				}
			})
		}
	}
	proxy.Kill()
	defer proxy.Revive()
	if _, err := def.Stat(context.Background(), "ckpt/j/chk-1/_metadata"); err == nil {
		t.Errorf("stat with a dead server succeeded")
	}
}

// TestStatFromSharedAttrs: with the mount's attribute cache shared, Stat of a file the mount listed costs no
// HEAD (the decision then uses that entry's ETag, the one the mount's conditional delete carries); entries
// older than AttrsTTL, directories and negative entries are not used.
func TestStatFromSharedAttrs(t *testing.T) {
	c, cnt := fakeClient(t, "")
	ctx := context.Background()
	etag, err := c.Put(ctx, "j/f", strings.NewReader("abc"), 3, s3client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	attrs := s3client.NewAttrCache(100)
	s := s3store.New(c, s3store.Options{Attrs: attrs, AttrsTTL: time.Minute})
	listed := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	attrs.Put("j/f", s3client.Object{Key: "j/f", Size: 3, ModTime: listed, ETag: etag}, true)
	heads := cnt.head.Load()
	oi, err := s.Stat(ctx, "j/f")
	if err != nil || !oi.ModTime.Equal(listed) || oi.ETag != etag || cnt.head.Load() != heads {
		t.Fatalf("stat from the shared cache = %+v, %v, %d HEADs", oi, err, cnt.head.Load()-heads)
	}
	attrs.Put("j/g", s3client.Object{Key: "j/g"}, false) // negative: must ask the server
	if _, err := s.Stat(ctx, "j/g"); err == nil || cnt.head.Load() == heads {
		t.Fatalf("negative cache entry answered Stat: %v", err)
	}
	s2 := s3store.New(c, s3store.Options{Attrs: attrs, AttrsTTL: time.Nanosecond})
	time.Sleep(time.Millisecond)
	if oi, err := s2.Stat(ctx, "j/f"); err != nil || oi.ModTime.Equal(listed) {
		t.Fatalf("expired entry used: %+v %v", oi, err)
	}
}

// TestStatJudgesDecidedObject: the object the mount's conditional request is pinned to (its observation,
// StatObserved) is what the decision judges, whatever the shared cache holds by then, so the decision
// judges the version the DeleteObject's If-Match names. Without a shared cache (a server that ignores
// If-Match) the store keeps asking the server, and judges the decided object only when the server says 404.
func TestStatJudgesDecidedObject(t *testing.T) {
	c, cnt := fakeClient(t, "")
	ctx := context.Background()
	if _, err := c.Put(ctx, "j/f", strings.NewReader("abc"), 3, s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	attrs := s3client.NewAttrCache(100)
	s := s3store.New(c, s3store.Options{Attrs: attrs})
	young := store.ObjectInfo{Path: "j/f", Size: 3, ModTime: time.Now(), ETag: "young"}
	old := s3client.Object{Key: "j/f", Size: 3, ModTime: time.Now().Add(-time.Hour), ETag: "old"}
	attrs.Put("j/f", old, true) // put after the mount's look
	heads := cnt.head.Load()
	oi, err := store.StatObserved(ctx, s, young)
	if err != nil || oi.ETag != "young" || !oi.ModTime.Equal(young.ModTime) || cnt.head.Load() != heads {
		t.Fatalf("Stat with a decided object = %+v, %v (%d HEADs), want the decided version", oi, err, cnt.head.Load()-heads)
	}
	if oi, err := s.Stat(ctx, "j/g"); err == nil || oi.ETag == "young" {
		t.Fatalf("decided object of j/f answered j/g: %+v %v", oi, err)
	}
	plain := s3store.New(c, s3store.Options{})
	if oi, err := store.StatObserved(ctx, plain, young); err != nil || oi.ETag == "young" || cnt.head.Load() == heads {
		t.Fatalf("store without a shared cache used the decided object: %+v %v", oi, err)
	}
	// ... but when the server answers that HEAD with 404 (a flapping server, or a delete beside the
	// mount) the version the mount saw is judged, not "no such object" (which rule 6 allows).
	gone := store.ObjectInfo{Path: "j/gone", Size: 3, ModTime: time.Now(), ETag: "seen"}
	if oi, err := store.StatObserved(ctx, plain, gone); err != nil || oi.ETag != "seen" {
		t.Fatalf("store without a shared cache, HEAD 404, decided object: %+v %v; want the decided version", oi, err)
	}
	if _, err := plain.Stat(ctx, "j/gone"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat of a missing key without a decided object: %v, want not exist", err)
	}
}
