package s3mount

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3store"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// holdServer serves S3 (gofakes3) and can hold back the reply to one chosen request: the reply is computed
// at once (it describes the bucket as it was when the request arrived) and delivered when the test says,
// so a "slow listing" overlaps whatever the test does in between, deterministically.
type holdServer struct {
	h     http.Handler
	mu    sync.Mutex
	match func(*http.Request) bool
	done  chan struct{} // closed once the held reply is computed
	rel   chan struct{} // closing it delivers the held reply
}

func (s *holdServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	m := s.match
	if m == nil || !m(r) {
		s.mu.Unlock()
		s.h.ServeHTTP(w, r)
		return
	}
	s.match = nil
	done, rel := s.done, s.rel
	s.mu.Unlock()
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, r)
	close(done)
	<-rel
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// hold makes the next request matching m a held one; it returns a channel closed when its reply is computed
// and the function that delivers it.
func (s *holdServer) hold(m func(*http.Request) bool) (computed <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.match, s.done, s.rel = m, make(chan struct{}), make(chan struct{})
	rel := s.rel
	var once sync.Once
	return s.done, func() { once.Do(func() { close(rel) }) }
}

// graceChecker decides like the index's rule 6 (in-flight files): it stats the object through an s3store
// sharing the mount's attribute cache and refuses objects modified within grace. before, when set, runs
// first in the next decision (to interleave something between the mount's look and the decision's).
type graceChecker struct {
	st     *s3store.Store
	grace  time.Duration
	mu     sync.Mutex
	before func()
}

func (c *graceChecker) Decide(ctx context.Context, p string, op verdict.Op, seen ...store.ObjectInfo) verdict.Decision {
	c.mu.Lock()
	before := c.before
	c.before = nil
	c.mu.Unlock()
	if before != nil {
		before()
	}
	var oi store.ObjectInfo
	var err error
	if len(seen) == 1 && seen[0].Path == p { // as the index does: what the mount observed is judged
		oi, err = store.StatObserved(ctx, c.st, seen[0])
	} else {
		oi, err = c.st.Stat(ctx, p)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return verdict.Decision{Allow: true, Reason: verdict.ReasonAllowed}
	case err != nil:
		return verdict.Decision{Reason: verdict.ReasonStoreError, Message: err.Error()}
	case time.Since(oi.ModTime) < c.grace:
		return verdict.Decision{Reason: verdict.ReasonGrace, Message: p + " modified " + oi.ModTime.String()}
	}
	return verdict.Decision{Allow: true, Reason: verdict.ReasonAllowed}
}
func (c *graceChecker) Deleted(context.Context, string) error         { return nil }
func (c *graceChecker) Written(context.Context, string) error         { return nil }
func (c *graceChecker) Renamed(context.Context, string, string) error { return nil }
func (c *graceChecker) Explain(context.Context, string) (string, []string, error) {
	return "deletable", nil, nil
}

type decidedEnv struct {
	clock gofakes3.TimeSourceAdvancer
	srv   *holdServer
	c     *s3client.Client // beside the mount (same server)
	ck    *graceChecker
	cache *s3client.AttrCache
	m     *Mounted
	mnt   string
}

func setupDecided(t *testing.T) *decidedEnv {
	t.Helper()
	s3server.RequireFUSE(t)
	// Objects written an hour ago are out of grace; the clock then moves to now for the young version.
	clock := gofakes3.FixedTimeSource(time.Now().Add(-time.Hour))
	hs := &holdServer{h: gofakes3.New(s3mem.New(s3mem.WithTimeSource(clock)), gofakes3.WithTimeSource(clock),
		gofakes3.WithTimeSkewLimit(0)).Server()}
	srv := httptest.NewServer(hs)
	t.Cleanup(srv.Close)
	cfg := s3server.FakeConfig(srv.URL, 1)
	c := s3server.NewBucket(t, cfg, s3client.Location{Bucket: "bkt"})
	e := &decidedEnv{clock: clock, srv: hs, c: c, cache: s3client.NewAttrCache(1000), mnt: t.TempDir()}
	e.ck = &graceChecker{st: s3store.New(c, s3store.Options{Attrs: e.cache}), grace: 10 * time.Minute}
	enf, err := guard.NewEnforcer(guard.Config{Checker: e.ck})
	if err != nil {
		t.Fatal(err)
	}
	e.m, err = Mount(context.Background(), Options{Client: c, Mountpoint: e.mnt, Enforcer: enf, SpoolDir: t.TempDir(),
		Attrs: e.cache, KernelReadAhead: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.m.Unmount() })
	return e
}

func (e *decidedEnv) put(t *testing.T, key, body string) string {
	t.Helper()
	etag, err := e.c.Put(context.Background(), key, strings.NewReader(body), int64(len(body)), s3client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return etag
}

// overwriteYoung replaces key with a version written now (in grace), after an old one was seen.
func (e *decidedEnv) overwriteYoung(t *testing.T, key, body string) string {
	t.Helper()
	e.clock.Advance(time.Hour)
	return e.put(t, key, body)
}

// mustSurvive fails unless key still holds the version etag.
func (e *decidedEnv) mustSurvive(t *testing.T, key, etag string, rmErr error) {
	t.Helper()
	o, err := e.c.Head(context.Background(), key)
	if err != nil {
		t.Fatalf("the young version of %s was deleted (rm: %v): the decision judged the old version's mtime and the delete was conditioned on the young one's ETag", key, rmErr)
	}
	if o.ETag != etag {
		t.Fatalf("%s: ETag %s, want the young version %s", key, o.ETag, etag)
	}
	if !errors.Is(rmErr, syscall.EPERM) {
		t.Errorf("rm of the young version: %v, want EPERM (in grace)", rmErr)
	}
}

// TestStaleListingCannotReplaceNewerEntry: a listing sent before an object was
// overwritten, whose reply arrives after a HEAD saw the new version, must not put the old version back
// into the attribute cache; an unlink decided in between would otherwise judge the old version's mtime
// (out of grace) while its DeleteObject is conditioned on the young version's ETag, and delete it.
func TestStaleListingCannotReplaceNewerEntry(t *testing.T) {
	e := setupDecided(t)
	e.put(t, "j/f", "old version")
	// A stat refresh (one listing page of j/ from "j/f" on) is sent now, while j/f is the old version, and
	// its reply is held back.
	computed, release := e.srv.hold(func(r *http.Request) bool {
		q := r.URL.Query()
		return r.Method == http.MethodGet && q.Get("list-type") == "2" && q.Get("delimiter") == "/" && q.Get("prefix") == "j/"
	})
	defer release()
	refreshed := make(chan error, 1)
	go func() {
		_, _, _, err := e.m.fsys.refresh(context.Background(), "j/f")
		refreshed <- err
	}()
	<-computed
	young := e.overwriteYoung(t, "j/f", "young version, in flight")
	// A lookup through the mount HEADs j/f (nothing cached yet): the young version.
	if st, err := os.Stat(filepath.Join(e.mnt, "j/f")); err != nil || st.Size() != int64(len("young version, in flight")) {
		t.Fatalf("stat through the mount: %v, %v", st, err)
	}
	// rm: the mount looks at j/f (young, cached); then, before the decision stats it, the old listing's
	// reply lands in the cache.
	e.ck.mu.Lock()
	e.ck.before = func() {
		release()
		if err := <-refreshed; err != nil {
			t.Errorf("refresh: %v", err)
		}
	}
	e.ck.mu.Unlock()
	rmErr := os.Remove(filepath.Join(e.mnt, "j/f"))
	e.mustSurvive(t, "j/f", young, rmErr)
	if ce, ok := e.cache.Get("j/f", time.Minute); !ok || ce.Obj.ETag != young {
		t.Errorf("cache entry of j/f after the late listing: %+v (ok %v), want the young version %s", ce, ok, young)
	}
}

// TestDecisionJudgesTheVersionDeleted: whatever the attribute cache holds by the
// time the index decides (here an entry for the old version stamped later than the mount's look, as two
// overlapping requests can produce), the decision must judge the version whose ETag the DeleteObject is
// conditioned on.
func TestDecisionJudgesTheVersionDeleted(t *testing.T) {
	e := setupDecided(t)
	e.put(t, "j/f", "old version")
	old, err := e.c.Head(context.Background(), "j/f")
	if err != nil {
		t.Fatal(err)
	}
	young := e.overwriteYoung(t, "j/f", "young version, in flight")
	if _, err := os.Stat(filepath.Join(e.mnt, "j/f")); err != nil {
		t.Fatal(err)
	}
	e.ck.mu.Lock()
	e.ck.before = func() { e.cache.Put("j/f", old, true) }
	e.ck.mu.Unlock()
	rmErr := os.Remove(filepath.Join(e.mnt, "j/f"))
	e.mustSurvive(t, "j/f", young, rmErr)
}

// The other direction (the mount's look, and so the decision, is the old version; the object was
// overwritten since) rests on the DeleteObject's If-Match failing and unlink looking again:
// TestConditionalDelete, against versitygw (gofakes3 ignores If-Match on DeleteObject).

// TestWriteJudgesTheVersionReplaced: the same for opens for writing, whose upload on close replaces the
// version the open found (If-Match): their decisions (at open, on a truncate, again before the upload)
// judge that version, so a young object is not emptied or rewritten on the strength of an older version's
// mtime. "truncate" opens with O_TRUNC and closes at once (the kernel opens for writing, truncates through
// the handle, then the upload decides again).
func TestWriteJudgesTheVersionReplaced(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags int
		write bool
	}{{"truncate", os.O_WRONLY | os.O_TRUNC, false}, {"truncate-write", os.O_WRONLY | os.O_TRUNC, true}, {"write", os.O_WRONLY, true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := setupDecided(t)
			e.put(t, "j/f", "old version")
			old, err := e.c.Head(context.Background(), "j/f")
			if err != nil {
				t.Fatal(err)
			}
			young := e.overwriteYoung(t, "j/f", "young version, in flight")
			// Before every decision an entry for the old version lands in the cache.
			var hook func()
			hook = func() {
				e.cache.Put("j/f", old, true)
				e.ck.mu.Lock()
				e.ck.before = hook
				e.ck.mu.Unlock()
			}
			e.ck.mu.Lock()
			e.ck.before = hook
			e.ck.mu.Unlock()
			f, err := os.OpenFile(filepath.Join(e.mnt, "j/f"), tc.flags, 0)
			if err == nil {
				if tc.write {
					if _, err = f.WriteAt([]byte("X"), 0); err != nil {
						t.Logf("write: %v", err)
					}
				}
				err = f.Close()
			}
			e.mustSurvive(t, "j/f", young, err)
		})
	}
}

// The other direction (the mount's look, and so the decision, is the old version; the object was
// overwritten since) rests on the DeleteObject's If-Match failing and unlink looking again:
// TestConditionalDelete, against versitygw (gofakes3 ignores If-Match on DeleteObject).

// TestFreshETagsDecisionJudgesTheMountsLook: where the server ignores If-Match (FreshETags)
// the mount HEADs the object before every decision; the decision judges that version. A second HEAD by
// the index that a flapping, multi-node server answers with 404 made the object count as gone, so the
// unlink of a young (in-flight) object was allowed and the unconditional delete removed it.
func TestFreshETagsDecisionJudgesTheMountsLook(t *testing.T) {
	s3server.RequireFUSE(t)
	h := gofakes3.New(s3mem.New(), gofakes3.WithTimeSkewLimit(0)).Server()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	// The index's view of the same bucket: every HEAD misses, as on a node that has not seen the object.
	blind := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(blind.Close)
	client := func(url string) *s3client.Client {
		cfg := s3client.Config{Endpoint: url, Region: "us-east-1", PathStyle: true, AccessKey: "k", SecretKey: "s", MaxAttempts: 1}
		c, err := s3client.New(context.Background(), cfg, s3client.Location{Bucket: "bkt"})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c, cb := client(srv.URL), client(blind.URL)
	if _, err := c.API().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String("bkt")}); err != nil {
		t.Fatal(err)
	}
	mnt := mountFreshETags(t, c, cb)
	etag, err := c.Put(context.Background(), "j/young", strings.NewReader("in flight"), 9, s3client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rmErr := os.Remove(filepath.Join(mnt, "j/young"))
	o, err := c.Head(context.Background(), "j/young")
	if err != nil || o.ETag != etag {
		t.Fatalf("the young object was deleted (rm: %v): the decision judged the index's 404, not the mount's look", rmErr)
	}
	if !errors.Is(rmErr, syscall.EPERM) {
		t.Errorf("rm of a young object: %v, want EPERM (in grace)", rmErr)
	}
}

// TestFreshETagsDeletesUnconditionally: where the probe did not show the server honouring
// If-Match on DeleteObject (FreshETags), the delete carries no condition: a server that refuses every
// conditional delete would otherwise refuse every deletion through the mount.
func TestFreshETagsDeletesUnconditionally(t *testing.T) {
	s3server.RequireFUSE(t)
	clock := gofakes3.FixedTimeSource(time.Now().Add(-time.Hour)) // objects past grace
	h := gofakes3.New(s3mem.New(s3mem.WithTimeSource(clock)), gofakes3.WithTimeSource(clock), gofakes3.WithTimeSkewLimit(0)).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete && r.Header.Get("If-Match") != "" {
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg := s3server.FakeConfig(srv.URL, 1)
	c := s3server.NewBucket(t, cfg, s3client.Location{Bucket: "bkt"})
	mnt := mountFreshETags(t, c, c)
	if _, err := c.Put(context.Background(), "j/old", strings.NewReader("garbage"), 7, s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, "j/old")); err != nil {
		t.Fatalf("rm of an old unreferenced object on a server refusing conditional deletes: %v", err)
	}
	if _, err := c.Head(context.Background(), "j/old"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("j/old still there: %v", err)
	}
}

// mountFreshETags mounts c's bucket as over a server that ignores If-Match (FreshETags), guarded by a
// graceChecker (10 min) whose index reads the bucket through index, without the shared cache; it returns
// the mountpoint, unmounted at the end of the test.
func mountFreshETags(t *testing.T, c, index *s3client.Client) string {
	t.Helper()
	enf, err := guard.NewEnforcer(guard.Config{Checker: &graceChecker{st: s3store.New(index, s3store.Options{}), grace: 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	m, err := Mount(context.Background(), Options{Client: c, Mountpoint: mnt, Enforcer: enf, SpoolDir: t.TempDir(), FreshETags: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unmount() })
	return mnt
}
