package s3store_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3store"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// walkFaults serves gofakes3 and fails flat listings (no delimiter: a walk, never the descent) while fail
// is set; it counts the listings of every prefix.
type walkFaults struct {
	h        http.Handler
	fail     atomic.Bool
	mu       chan struct{}
	listings map[string]int
	heads    atomic.Int64
	// swap serves flat listings of checkpoint folders ("…/chk-") with their first two keys swapped
	// (a server or proxy that does not sort).
	swap atomic.Bool
}

var contentsRE = regexp.MustCompile(`(?s)<Contents>.*?</Contents>`)

func (w *walkFaults) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if r.Method == http.MethodGet && q.Has("list-type") {
		w.mu <- struct{}{}
		w.listings[q.Get("prefix")+"|"+q.Get("delimiter")]++
		<-w.mu
		if w.fail.Load() && q.Get("delimiter") == "" {
			rw.WriteHeader(http.StatusForbidden)
			_, _ = rw.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>injected</Message></Error>`))
			return
		}
		if w.swap.Load() && q.Get("delimiter") == "" && strings.HasSuffix(q.Get("prefix"), "/chk-") {
			rec := httptest.NewRecorder()
			w.h.ServeHTTP(rec, r)
			body := rec.Body.String()
			if m := contentsRE.FindAllStringIndex(body, 2); len(m) == 2 {
				a, b := body[m[0][0]:m[0][1]], body[m[1][0]:m[1][1]]
				body = body[:m[0][0]] + b + body[m[0][1]:m[1][0]] + a + body[m[1][1]:]
			}
			for k, v := range rec.Header() {
				rw.Header()[k] = v
			}
			rw.Header().Del("Content-Length")
			rw.WriteHeader(rec.Code)
			_, _ = rw.Write([]byte(body))
			return
		}
	}
	if r.Method == http.MethodHead {
		w.heads.Add(1)
	}
	w.h.ServeHTTP(rw, r)
}

func (w *walkFaults) reset() map[string]int {
	w.mu <- struct{}{}
	defer func() { <-w.mu }()
	out := w.listings
	w.listings = map[string]int{}
	return out
}

func faultyClient(t *testing.T) (*s3client.Client, *walkFaults) {
	wf := &walkFaults{h: gofakes3.New(s3mem.New()).Server(), mu: make(chan struct{}, 1), listings: map[string]int{}}
	srv := httptest.NewServer(wf)
	t.Cleanup(srv.Close)
	cfg := s3server.FakeConfig(srv.URL, 1)
	c := s3server.NewBucket(t, cfg, s3client.Location{Bucket: "bkt"})
	return c, wf
}

func putKeys(t *testing.T, c *s3client.Client, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, err := c.Put(context.Background(), k, strings.NewReader("m"), 1, s3client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDescentDiscovery: the default discovery finds, at the very next listing, new checkpoints of known
// jobs, new jobs, new savepoints, a checkpoint in a brand-new root at any depth (job B restored from job A,
// checkpointing elsewhere: it references A's old SSTs), and a `_metadata` directly in any listed folder;
// removed ones are gone; it never lists shared/ (no request in proportion to the SSTs).
func TestDescentDiscovery(t *testing.T) {
	c, wf := faultyClient(t)
	putKeys(t, c, "ckpt/jobA/chk-1/_metadata", "ckpt/jobA/chk-2/_metadata", "sp/savepoint-aaaaaa-1/_metadata", "odd/place/_metadata",
		"ckpt/jobA/taskowned/x", "ckpt/jobA/chk-2/exclusive-1")
	for i := range 3000 {
		putKeys(t, c, fmt.Sprintf("ckpt/jobA/shared/sst-%05d", i))
	}
	s := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	if got, want := list(t, s), "ckpt/jobA/chk-1/_metadata,ckpt/jobA/chk-2/_metadata,odd/place/_metadata,sp/savepoint-aaaaaa-1/_metadata"; got != want {
		t.Fatalf("first listing = %s\nwant %s", got, want)
	}
	putKeys(t, c,
		"ckpt/jobA/chk-3/_metadata",             // next checkpoint of a known job
		"ckpt/jobB/chk-7/_metadata",             // a new job
		"sp/savepoint-bbbbbb-2/_metadata",       // a new savepoint
		"ckpt/jobA/chk-4/._metadata.inprogress", // not complete: not reported
		"newroot/deep/er/jobC/chk-1/_metadata",  // a brand-new root, three levels down
		"_metadata",                             // at the store root
		"sp/savepoint-cccccc-3/x",               // a savepoint in progress (listed: no _metadata yet)
	)
	for _, k := range []string{"ckpt/jobA/chk-1/_metadata", "odd/place/_metadata"} {
		if err := c.Delete(context.Background(), k, ""); err != nil {
			t.Fatal(err)
		}
	}
	wf.reset()
	got := list(t, s)
	want := "_metadata,ckpt/jobA/chk-2/_metadata,ckpt/jobA/chk-3/_metadata,ckpt/jobB/chk-7/_metadata,newroot/deep/er/jobC/chk-1/_metadata," +
		"sp/savepoint-aaaaaa-1/_metadata,sp/savepoint-bbbbbb-2/_metadata"
	if got != want {
		t.Fatalf("descent = %s\nwant %s", got, want)
	}
	listings := wf.reset()
	n := 0
	for p, k := range listings {
		n += k
		if p == "ckpt/jobA/chk-|" {
			continue // the flat listing of jobA's checkpoint folders (instead of a HEAD each)
		}
		if strings.Contains(p, "shared") || strings.Contains(p, "taskowned") || strings.Contains(p, "chk-") {
			t.Errorf("the descent listed %q", p)
		}
		if strings.HasSuffix(p, "|") {
			t.Errorf("the descent made a flat listing of %q", p)
		}
	}
	if n > 15 {
		t.Errorf("descent made %d listing requests (%v); it must not depend on the 3000 SSTs", n, listings)
	}
	if st := s.Stats(); st.FullWalks != 0 || st.TargetedListings != 2 || st.LastListings+st.LastFlatListings != n || st.LastFlatListings != 1 || st.LastHeads < 4 {
		t.Errorf("stats = %+v (listings seen %d)", st, n)
	}
}

// TestDescentBlindSpotsReconciled: a `_metadata` where Flink never writes one (inside shared/, below a
// checkpoint folder, inside a savepoint that has its own) is not seen by the descent; the background
// reconciliation walk finds it, and every listing after that reports it. A rebuild's ListAllMetadata sees it
// at once. A `_metadata` the index opened there (written through the mount) is reported at once too.
func TestDescentBlindSpotsReconciled(t *testing.T) {
	c, _ := faultyClient(t)
	normal := "ckpt/jobA/chk-1/_metadata"
	blind := []string{"ckpt/jobA/shared/copy/_metadata", "ckpt/jobA/chk-1/nested/_metadata", "sp/savepoint-a-1/inner/_metadata"}
	putKeys(t, c, append([]string{normal, "sp/savepoint-a-1/_metadata"}, blind...)...)
	now := time.Unix(1_000_000, 0)
	s := s3store.New(c, s3store.Options{Now: func() time.Time { return now }})
	defer s.Close()
	withSP := normal + ",sp/savepoint-a-1/_metadata"
	first := list(t, s) // starts the reconciliation walk in the background
	if strings.Contains(first, "/shared/") || strings.Contains(first, "nested") || strings.Contains(first, "inner") {
		// The walk may have finished before the descent: then it is allowed to report them already.
		t.Logf("first listing already reconciled: %s", first)
	}
	if err := s.WaitReconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "ckpt/jobA/chk-1/_metadata,ckpt/jobA/chk-1/nested/_metadata,ckpt/jobA/shared/copy/_metadata,sp/savepoint-a-1/_metadata,sp/savepoint-a-1/inner/_metadata"
	if got := list(t, s); got != want {
		t.Errorf("after reconciliation = %s\nwant %s", got, want)
	}
	if st := s.Stats(); st.Reconciliations != 1 || st.ReconcileFound != 3 {
		t.Errorf("stats = %+v, want one reconciliation that found 3", st)
	}
	// A second store: ListAllMetadata (rebuild) is complete without waiting; Learn covers mount writes.
	s2 := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	var all []string
	if err := s2.ListAllMetadata(context.Background(), func(o store.ObjectInfo) error { all = append(all, o.Path); return nil }); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(all, ","); len(all) != 5 {
		t.Errorf("ListAllMetadata = %s, want all five", got)
	}
	if got := list(t, s2); got != withSP {
		t.Fatalf("descent without reconciliation = %s", got)
	}
	r, err := s2.Open(context.Background(), blind[0])
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if got := list(t, s2); !strings.Contains(got, blind[0]) {
		t.Errorf("after the index opened %s the descent still misses it: %s", blind[0], got)
	}
}

// TestReconcileFailingFailsClosed: while reconciliation walks fail, the descent goes on (no decision waits
// for a walk); once none has succeeded for three intervals, ListMetadata fails (the index then refuses
// deletions with the reason) until a walk succeeds again.
func TestReconcileFailingFailsClosed(t *testing.T) {
	c, wf := faultyClient(t)
	putKeys(t, c, "ckpt/jobA/chk-1/_metadata")
	now := time.Unix(1_000_000, 0)
	s := s3store.New(c, s3store.Options{Now: func() time.Time { return now }, ReconcileEvery: time.Hour})
	defer s.Close()
	wf.fail.Store(true)
	ctx := context.Background()
	for step := range 4 {
		err := s.ListMetadata(ctx, func(store.ObjectInfo) error { return nil })
		_ = s.WaitReconcile(ctx)
		if step < 3 && err != nil {
			t.Fatalf("after %d h of failing walks: %v, want the descent to go on", step, err)
		}
		if step == 3 && (err == nil || !strings.Contains(err.Error(), "reconciliation walk")) {
			t.Fatalf("after 3 h of failing walks: %v, want an error naming the reconciliation walk", err)
		}
		now = now.Add(time.Hour + time.Second)
	}
	wf.fail.Store(false)
	// The failing listing itself started a walk (now it succeeds): the next listing is fine again.
	_ = s.ListMetadata(ctx, func(store.ObjectInfo) error { return nil })
	_ = s.WaitReconcile(ctx)
	if err := s.ListMetadata(ctx, func(store.ObjectInfo) error { return nil }); err != nil {
		t.Errorf("after a successful walk: %v", err)
	}
}

// TestDescentReportsOddKeysRaw: a `_metadata` at a key with an empty, "." or ".." segment is reported under
// its raw key by the descent as by a full walk (the index keeps it as unparseable and refuses deletions);
// a HEAD of the cleaned key would name another object or none, and the checkpoint would count as gone.
func TestDescentReportsOddKeysRaw(t *testing.T) {
	c, _ := faultyClient(t)
	odd := []string{"a//chk-1/_metadata", "b/./chk-1/_metadata", "c/../d/chk-1/_metadata", "e/f//_metadata"}
	putKeys(t, c, odd...)
	full := s3store.New(c, s3store.Options{FullWalk: true})
	walked := list(t, full)
	for _, k := range odd {
		if !strings.Contains(","+walked+",", ","+k+",") {
			t.Skipf("the fake server does not keep the key %q as it is (full walk: %s)", k, walked)
		}
	}
	s := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	if got := list(t, s); got != walked {
		t.Errorf("descent = %s\nfull walk = %s", got, walked)
	}
}

// TestParallelWalkComplete: the full walk (rebuild, reconciliation) splits the bucket into folders and
// key ranges listed in parallel; it must report every `_metadata` exactly once, whatever the names: many
// sibling folders (key ranges), names sorting between a folder and its contents ("a-1", "a.b" next to
// "a/"), objects directly in split folders, job folders, odd segments.
func TestParallelWalkComplete(t *testing.T) {
	c, _ := faultyClient(t)
	var keys []string
	for i := range 40 {
		keys = append(keys, fmt.Sprintf("root/job%02d/chk-1/_metadata", i), fmt.Sprintf("root/job%02d/shared/x", i))
	}
	keys = append(keys, "_metadata", "root/_metadata", "root/job05-1/_metadata", "root/job05.b/_metadata", "root/job05/_metadata",
		"root/zz/deep/er/still/deeper/and/more/_metadata", "e1/ckpt/j/chk-3/_metadata", "e2/ckpt/j/chk-3/f", "a//b/_metadata", "root/job07/chk-1/nested/_metadata")
	putKeys(t, c, keys...)
	var want []string
	if err := c.Walk(context.Background(), "", func(o s3client.Object) error {
		if flinklayout.IsMetadata(o.Key) {
			want = append(want, o.Key)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(want)
	for _, parallel := range []int{1, 2, 3, 16} {
		s := s3store.New(c, s3store.Options{Parallel: parallel, ReconcileEvery: -1})
		var got []string
		if err := s.ListAllMetadata(context.Background(), func(o store.ObjectInfo) error { got = append(got, o.Path); return nil }); err != nil {
			t.Fatal(err)
		}
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("parallel %d: walk reported %d keys\n%s\nwant %d\n%s", parallel, len(got), strings.Join(got, ","), len(want), strings.Join(want, ","))
		}
	}
}

// TestDescentDearerThanWalk: with Flink's entropy injection, data files live under many random top-level
// folders, each holding a job tree the descent would list; once the descent costs more than twice the
// requests of a full walk, syncs walk the bucket instead (same result), and the descent is measured again
// now and then.
func TestDescentDearerThanWalk(t *testing.T) {
	c, _ := faultyClient(t)
	keys := []string{"ckpt/j/chk-1/_metadata"}
	for i := range 100 {
		keys = append(keys, fmt.Sprintf("e%03d/ckpt/j/chk-1/sst", i))
	}
	putKeys(t, c, keys...)
	s := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	if err := s.ListAllMetadata(context.Background(), func(store.ObjectInfo) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if got := list(t, s); got != "ckpt/j/chk-1/_metadata" {
			t.Fatalf("listing %d = %s", i, got)
		}
	}
	if st := s.Stats(); st.TargetedListings != 1 || st.FullWalks != 3 {
		t.Errorf("stats = %+v, want one descent (measured dearer) and then walks", st)
	}
}

// headGate holds every HEAD until want of them are in flight at once (or, when the client never gets
// there, until a second passes: the test then fails on the peak), and records the peak.
type headGate struct {
	h          http.Handler
	want       int64
	inflight   atomic.Int64
	peak       atomic.Int64
	open       chan struct{}
	openedOnce atomic.Bool
}

func (g *headGate) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodHead {
		g.h.ServeHTTP(rw, r)
		return
	}
	n := g.inflight.Add(1)
	defer g.inflight.Add(-1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if n >= g.want && g.openedOnce.CompareAndSwap(false, true) {
		close(g.open)
	}
	select {
	case <-g.open:
	case <-time.After(time.Second):
	}
	g.h.ServeHTTP(rw, r)
}

// TestDescentHeadsInParallel: the descent keeps as many HEADs in flight as DescentParallel allows (by
// default three quarters of the client's connections, not the walk's 16: with a HEAD per checkpoint at
// every sync, 20,000 checkpoints at 20 ms per request took 25 s with 16), and never more.
func TestDescentHeadsInParallel(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  int
		want int64
	}{
		{"default", 0, 48},
		{"explicit", 8, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &headGate{h: gofakes3.New(s3mem.New()).Server(), want: tc.want, open: make(chan struct{})}
			srv := httptest.NewServer(g)
			t.Cleanup(srv.Close)
			cfg := s3server.FakeConfig(srv.URL, 1)
			c := s3server.NewBucket(t, cfg, s3client.Location{Bucket: "bkt"})
			// One checkpoint per job (Flink retains one by default): HEADed, not listed flat.
			var keys []string
			for j := range 100 {
				keys = append(keys, fmt.Sprintf("flink/job%d/chk-%d/_metadata", j, j+1), fmt.Sprintf("flink/job%d/shared/sst", j))
			}
			putKeys(t, c, keys...)
			s := s3store.New(c, s3store.Options{ReconcileEvery: -1, DescentParallel: tc.opt})
			n := 0
			if err := s.ListMetadata(context.Background(), func(store.ObjectInfo) error { n++; return nil }); err != nil {
				t.Fatal(err)
			}
			if n != 100 {
				t.Fatalf("descent found %d _metadata, want 100", n)
			}
			if p := g.peak.Load(); p != tc.want {
				t.Fatalf("peak HEADs in flight %d, want %d", p, tc.want)
			}
		})
	}
}

// TestQuarantineAreaSkipped: a `_metadata` staged in the quarantine area is no live checkpoint for any
// discovery mode, and walks of the store root do not report the area's objects.
func TestQuarantineAreaSkipped(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts s3store.Options
	}{
		{"descent", s3store.Options{ReconcileEvery: -1}},
		{"full walk", s3store.Options{FullWalk: true, ReconcileEvery: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := faultyClient(t)
			putKeys(t, c, "ckpt/jobA/chk-1/_metadata", store.QuarantineDir+"/_metadata",
				store.QuarantineDir+"/ckpt/jobA/chk-0/_metadata", store.QuarantineDir+"/0123abcd")
			s := s3store.New(c, tc.opts)
			if got, want := list(t, s), "ckpt/jobA/chk-1/_metadata"; got != want {
				t.Fatalf("ListMetadata = %s, want %s", got, want)
			}
			var all []string
			if err := s.ListAllMetadata(context.Background(), func(oi store.ObjectInfo) error { all = append(all, oi.Path); return nil }); err != nil {
				t.Fatal(err)
			}
			if strings.Join(all, ",") != "ckpt/jobA/chk-1/_metadata" {
				t.Fatalf("ListAllMetadata = %v", all)
			}
			var walked []string
			if err := s.Walk(context.Background(), "", func(oi store.ObjectInfo) error { walked = append(walked, oi.Path); return nil }); err != nil {
				t.Fatal(err)
			}
			for _, k := range walked {
				if store.InQuarantine(k) {
					t.Fatalf("Walk reported %s in the quarantine area (all: %v)", k, walked)
				}
			}
		})
	}
}
