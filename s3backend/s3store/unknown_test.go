package s3store_test

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3store"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestPrefixListingFailureIsUnknownSubtree: one folder whose listing keeps failing (versitygw through the
// fault proxy, every ListObjectsV2 of prefix ckpt/k/ answered 503 after the client's retries) is an
// unknown subtree of the descent when the caller takes them (the index's syncs): every other folder is
// listed as usual. Without the callback the listing fails as before (fail closed). When the prefix
// answers again, nothing is unknown.
func TestPrefixListingFailureIsUnknownSubtree(t *testing.T) {
	srv := s3server.Start(t)
	srv.Bucket(t, "bkt")
	proxy := s3server.NewProxy(t, srv.Endpoint)
	cfg := srv.Config()
	cfg.Endpoint = proxy.URL
	cfg.MaxAttempts = 2
	ctx := context.Background()
	c, err := s3client.New(ctx, cfg, s3client.Location{Bucket: "bkt"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ckpt/j/chk-1/_metadata", "ckpt/j/chk-2/_metadata", "ckpt/k/chk-1/_metadata", "ckpt/l/chk-3/_metadata", "sp/savepoint-a-1/_metadata"} {
		if _, err := c.Put(ctx, k, strings.NewReader("m"), 1, s3client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	st := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	defer st.Close()
	h := proxy.Hold("ListObjectsV2", func(r *http.Request) bool { return strings.HasPrefix(r.URL.Query().Get("prefix"), "ckpt/k/") })
	h.FailAll()
	err = st.ListMetadata(ctx, func(store.ObjectInfo) error { return nil })
	var u *store.UnknownSubtree
	if !errors.As(err, &u) || u.Key != "ckpt/k" {
		t.Fatalf("ListMetadata without a callback = %v, want an unknown subtree ckpt/k", err)
	}
	var got, unknown []string
	uctx := store.WithUnknown(ctx, func(u store.UnknownSubtree) error {
		unknown = append(unknown, u.Key+": "+u.Err.Error())
		return nil
	})
	if err := st.ListMetadata(uctx, func(oi store.ObjectInfo) error { got = append(got, oi.Path); return nil }); err != nil {
		t.Fatalf("ListMetadata with a callback: %v", err)
	}
	sort.Strings(got)
	if want := "ckpt/j/chk-1/_metadata,ckpt/j/chk-2/_metadata,ckpt/l/chk-3/_metadata,sp/savepoint-a-1/_metadata"; strings.Join(got, ",") != want {
		t.Errorf("listed %v, want %s", got, want)
	}
	if len(unknown) != 1 || !strings.HasPrefix(unknown[0], "ckpt/k: ") {
		t.Errorf("unknown subtrees %v, want ckpt/k", unknown)
	}
	h.Release()
	unknown, got = nil, nil
	if err := st.ListMetadata(uctx, func(oi store.ObjectInfo) error { got = append(got, oi.Path); return nil }); err != nil || len(unknown) != 0 || len(got) != 5 {
		t.Errorf("after the prefix answers again: %d listed, unknown %v, %v", len(got), unknown, err)
	}
}

// TestReaderReplacedWhileReadIsChanged (issue 29, a `_metadata` changing while read, on S3): an
// object replaced between the open (which saw its ETag) and a later ranged read is reported as
// store.ErrChanged (the GET's If-Match fails on versitygw), not as a store failure, so the index
// reads it again instead of failing the sync or parsing blocks of two objects.
func TestReaderReplacedWhileReadIsChanged(t *testing.T) {
	srv := s3server.Start(t)
	srv.Bucket(t, "bkt")
	ctx := context.Background()
	c, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: "bkt"})
	if err != nil {
		t.Fatal(err)
	}
	a, b := strings.Repeat("a", 3<<20), strings.Repeat("b", 3<<20)
	if _, err := c.Put(ctx, "j/chk-1/_metadata", strings.NewReader(a), int64(len(a)), s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	st := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	defer st.Close()
	r, err := st.Open(ctx, "j/chk-1/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := make([]byte, 16)
	if _, err := r.ReadAt(p, 0); err != nil || string(p) != a[:16] {
		t.Fatalf("first read: %q %v", p, err)
	}
	if _, err := c.Put(ctx, "j/chk-1/_metadata", strings.NewReader(b), int64(len(b)), s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = r.ReadAt(p, int64(len(a))-16) // another block than the first read's
	if !errors.Is(err, store.ErrChanged) {
		t.Fatalf("read after the object was replaced: %v (%q), want store.ErrChanged", err, p)
	}
}
