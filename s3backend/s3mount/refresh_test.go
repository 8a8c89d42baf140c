package s3mount_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// setupProxied mounts like setup, with the mount's client behind a counting proxy; e.c talks to the server
// directly (changes "beside the mount").
func setupProxied(t *testing.T, tune func(*s3mount.Options)) (*env, *s3server.Proxy) {
	t.Helper()
	s3server.RequireFUSE(t)
	srv := s3server.Start(t)
	srv.Bucket(t, "ckpt")
	loc := s3client.Location{Bucket: "ckpt", Prefix: "flink/"}
	c, err := s3client.New(context.Background(), srv.Config(), loc)
	if err != nil {
		t.Fatal(err)
	}
	p := s3server.NewProxy(t, srv.Endpoint)
	cfg := srv.Config()
	cfg.Endpoint = p.URL
	pc, err := s3client.New(context.Background(), cfg, loc)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, c: c, ck: newChecker(), mnt: t.TempDir()}
	enf, err := guard.NewEnforcer(guard.Config{Checker: e.ck})
	if err != nil {
		t.Fatal(err)
	}
	e.opts = s3mount.Options{Client: pc, Mountpoint: e.mnt, Enforcer: enf, SpoolDir: t.TempDir()}
	if tune != nil {
		tune(&e.opts)
	}
	e.mount(t)
	return e, p
}

// TestStatRefreshAfterTTL: once StatTTL has passed, stat of keys a listing saw (rm -rf, find or ls -l
// running longer than StatTTL) is answered by one listing page from the key on, not by a HEAD plus a
// one-key listing per key; the answers are as fresh as StatTTL promises (changes beside the mount seen),
// and a page that ends before "key/" (where a same-named directory would be listed) is not trusted.
func TestStatRefreshAfterTTL(t *testing.T) {
	const ttl = 200 * time.Millisecond
	e, p := setupProxied(t, func(o *s3mount.Options) { o.StatTTL = ttl; o.PageSize = 20 })
	const n = 60
	for i := range n {
		e.put(t, fmt.Sprintf("j/f%03d", i), "x")
	}
	// "j/g" is a directory ("j/g/x"); 25 keys "j/g.NN" sort between "j/g" and "j/g/", more than a page.
	e.put(t, "j/g/x", "y")
	for i := range 25 {
		e.put(t, fmt.Sprintf("j/g.%02d", i), "y")
	}
	if got := len(names(t, e.path("j"))); got != n+26 { // f000..f059, g (the directory), g.00..g.24
		t.Fatalf("readdir: %d entries, want %d", got, n+26)
	}
	// Changes beside the mount, after the listing.
	e.put(t, "j/f010", "longer")
	if err := e.c.Delete(context.Background(), "j/f020", ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second + 2*ttl) // the kernel's 1 s entry/attribute timeout and StatTTL
	p.Ops()
	for i := range n {
		st, err := os.Stat(e.path(fmt.Sprintf("j/f%03d", i)))
		switch {
		case i == 20:
			if !errors.Is(err, os.ErrNotExist) {
				t.Errorf("j/f020 deleted beside the mount: stat %v, want ENOENT", err)
			}
		case err != nil:
			t.Errorf("j/f%03d: %v", i, err)
		case i == 10 && st.Size() != 6:
			t.Errorf("j/f010 replaced beside the mount: size %d, want 6", st.Size())
		case i != 10 && st.Size() != 1:
			t.Errorf("j/f%03d: size %d, want 1", i, st.Size())
		}
	}
	ops := p.Ops()
	t.Logf("%d stats after the TTL: %v", n, ops)
	if ops["HeadObject"] != 0 || ops["ListObjectsV2"] > n/10 {
		t.Errorf("stat of %d listed keys after StatTTL cost %v, want a listing page per ~%d keys and no HEAD", n, ops, 20)
	}
	// "j/g": the page from "j/g" on (g.00 … g.19) ends before "j/g/", so it does not say whether "j/g" is
	// a directory: it is asked the usual way.
	time.Sleep(time.Second + 2*ttl)
	if st, err := os.Stat(e.path("j/g")); err != nil || !st.IsDir() {
		t.Errorf("j/g: %v %v, want a directory", st, err)
	}
}

// TestIndexToldDespiteLostAnswers: a rename or an upload of a _metadata whose request failed may have
// happened all the same (the server applied it and the answer was lost, or the copy landed and the
// source delete failed). The index is told either way, so it can look: a checkpoint that did appear is
// never unknown to it.
func TestIndexToldDespiteLostAnswers(t *testing.T) {
	e, p := setupProxied(t, nil)
	e.put(t, "job/chk-7/._metadata.inprogress.a", "meta7")
	e.put(t, "job/chk-8/._metadata.inprogress.b", "meta8")

	p.FailNext("CopyObject", 10, true)
	if err := os.Rename(e.path("job/chk-7/._metadata.inprogress.a"), e.path("job/chk-7/_metadata")); err == nil {
		t.Fatal("rename whose copy answers failed reported success")
	}
	if !e.exists(t, "job/chk-7/_metadata") {
		t.Fatal("the proxy did not apply the copy it failed")
	}
	p.FailNext("CopyObject", 0, false)

	p.FailNext("DeleteObject", 10, false)
	if err := os.Rename(e.path("job/chk-8/._metadata.inprogress.b"), e.path("job/chk-8/_metadata")); err == nil {
		t.Fatal("rename whose source delete failed reported success")
	}
	p.FailNext("DeleteObject", 0, false)

	if err := os.Mkdir(e.path("job/chk-9"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(e.path("job/chk-9/_metadata"), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("meta9")); err != nil {
		t.Fatal(err)
	}
	p.FailNext("PutObject", 10, true)
	if err := f.Close(); err == nil {
		t.Fatal("upload whose answers failed reported success")
	}
	p.FailNext("PutObject", 0, false)

	calls := e.ck.CallLog()
	for _, want := range []string{"renamed job/chk-7/._metadata.inprogress.a job/chk-7/_metadata", "renamed job/chk-8/._metadata.inprogress.b job/chk-8/_metadata"} {
		if !slices.Contains(calls, want) {
			t.Errorf("index not told of the failed rename (%s): %v", want, calls)
		}
	}
	if !slices.Contains(calls, "written job/chk-9/_metadata") {
		t.Errorf("index not told of the failed upload of job/chk-9/_metadata: %v", calls)
	}
}
