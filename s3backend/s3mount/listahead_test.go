package s3mount_test

import (
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestFindListsAhead: a find over a tree of folders finds most folders' first page listed ahead, with
// several listings in flight at once; with ListAhead off it lists one folder after another. The files
// found are the same either way.
func TestFindListsAhead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ahead int
	}{{"default", 0}, {"off", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			e, p := setupProxied(t, func(o *s3mount.Options) { o.ListAhead = tc.ahead })
			var want []string
			for i := range 6 {
				for j := range 4 {
					for k := range 2 {
						key := fmt.Sprintf("job%d/chk-%d/f%d", i, j, k)
						e.put(t, key, "x")
						want = append(want, key)
					}
				}
			}
			const folders = 6 + 6*4 // below the root
			p.SetLatency(20 * time.Millisecond)
			p.Ops()
			p.MaxInFlight()
			start := time.Now()
			out, err := exec.Command("find", e.mnt, "-type", "f").CombinedOutput()
			if err != nil {
				t.Fatalf("find: %v: %s", err, out)
			}
			took := time.Since(start)
			var got []string
			for _, l := range strings.Fields(string(out)) {
				got = append(got, strings.TrimPrefix(l, e.mnt+"/"))
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("find found %v, want %v", got, want)
			}
			ops, inflight, served := p.Ops(), p.MaxInFlight(), e.m.ListedAhead()
			t.Logf("find of %d folders: %v, %d ListObjectsV2 (%d at most at once), %d first pages listed ahead, ops %v",
				folders, took, ops["ListObjectsV2"], inflight["ListObjectsV2"], served, ops)
			if tc.ahead < 0 {
				if served != 0 || inflight["ListObjectsV2"] != 1 {
					t.Errorf("ListAhead off: %d pages listed ahead, %d listings at once; want 0 and 1", served, inflight["ListObjectsV2"])
				}
				return
			}
			if served < folders/2 {
				t.Errorf("%d of %d folders' first pages listed ahead, want at least half", served, folders)
			}
			if inflight["ListObjectsV2"] < 2 {
				t.Errorf("at most %d listing at once, want several", inflight["ListObjectsV2"])
			}
			if n := ops["ListObjectsV2"]; n > 2*(folders+1) {
				t.Errorf("%d listings for %d folders: pages listed ahead are wasted", n, folders+1)
			}
		})
	}
}

// listedAhead lists dir through the mount and waits until the first pages of its subfolders subs are
// listed ahead and held.
func listedAhead(t *testing.T, e *env, dir string, subs ...string) {
	t.Helper()
	names(t, e.path(dir))
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range subs {
		for !e.m.ListedAheadDone(dir + "/" + s) {
			if time.Now().After(deadline) {
				t.Fatalf("the first page of %s/%s was not listed ahead", dir, s)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestListAheadSeesOwnChanges: a name created, removed or renamed through the mount after its folder's
// first page was listed ahead shows (or is gone) in the next readdir; an unchanged folder is served
// from the page listed ahead.
func TestListAheadSeesOwnChanges(t *testing.T) {
	e := setup(t, newChecker(), func(o *s3mount.Options) { s3mount.ListAheadTTL(o, time.Minute) })
	for _, k := range []string{"a/b/f1", "a/c/x", "a/c/y", "a/d/z", "a/e/old/w"} {
		e.put(t, k, "x")
	}
	listedAhead(t, e, "a", "b", "c", "d", "e")
	served := e.m.ListedAhead()

	if err := os.WriteFile(e.path("a/b/new"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.path("a/c/x")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.path("a/c/y"), e.path("a/e/moved")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir  string
		want []string
	}{
		{"a/b", []string{"f1", "new"}},
		{"a/c", nil},
		{"a/e", []string{"moved", "old"}},
	} {
		got := names(t, e.path(tc.dir))
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("readdir %s after changes through the mount = %v, want %v", tc.dir, got, tc.want)
		}
	}
	if n := e.m.ListedAhead() - served; n != 0 {
		t.Errorf("%d changed folders served from pages listed before the change", n)
	}
	if got := names(t, e.path("a/d")); !slices.Equal(got, []string{"z"}) {
		t.Errorf("readdir a/d = %v, want [z]", got)
	}
	if n := e.m.ListedAhead() - served; n != 1 {
		t.Errorf("unchanged folder a/d: %d pages listed ahead served, want 1", n)
	}
}

// TestListAheadStaleNotServed: a first page listed ahead longer ago than its TTL is discarded: the
// opendir lists again and sees a name added beside the mount since.
func TestListAheadStaleNotServed(t *testing.T) {
	const ttl = 100 * time.Millisecond
	e := setup(t, newChecker(), func(o *s3mount.Options) { s3mount.ListAheadTTL(o, ttl) })
	e.put(t, "a/b/f1", "x")
	listedAhead(t, e, "a", "b")
	served := e.m.ListedAhead()
	e.put(t, "a/b/beside", "x")
	time.Sleep(2 * ttl)
	got := names(t, e.path("a/b"))
	slices.Sort(got)
	if want := []string{"beside", "f1"}; !slices.Equal(got, want) {
		t.Errorf("readdir a/b after the page listed ahead went stale = %v, want %v", got, want)
	}
	if n := e.m.ListedAhead() - served; n != 0 {
		t.Errorf("%d stale pages served", n)
	}
}

// TestListAheadErrorNotServed: a first page whose listing ahead failed is not served: the opendir lists
// the folder itself.
func TestListAheadErrorNotServed(t *testing.T) {
	e, p := setupProxied(t, func(o *s3mount.Options) { s3mount.ListAheadTTL(o, time.Minute) })
	e.put(t, "a/f1", "x")
	// The proxy delays a request before it decides to fail it: the listing of a, asked for once the root
	// is read, is in the proxy when the failures are armed (the client's 3 attempts all fail).
	p.SetLatency(300 * time.Millisecond)
	names(t, e.mnt)
	p.FailNext("ListObjectsV2", 3, false)
	deadline := time.Now().Add(10 * time.Second)
	for !e.m.ListedAheadDone("a") {
		if time.Now().After(deadline) {
			t.Fatal("the listing ahead of a did not end")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, failed := p.Stats(); failed != 3 {
		t.Fatalf("%d requests failed, want the 3 attempts of the listing ahead", failed)
	}
	p.SetLatency(0)
	if got := names(t, e.path("a")); !slices.Equal(got, []string{"f1"}) {
		t.Errorf("readdir a after its listing ahead failed = %v, want [f1]", got)
	}
	if n := e.m.ListedAhead(); n != 0 {
		t.Errorf("%d failed pages served", n)
	}
}

// readdirPages records the readdir listings (delimiter, no start-after: the requests dirHandle and the
// list-ahead send) the proxy answers, as "prefix token", with how often each was sent.
type readdirPages struct {
	mu sync.Mutex
	n  map[string]int
}

func traceReaddirPages(p *s3server.Proxy) *readdirPages {
	r := &readdirPages{n: map[string]int{}}
	p.SetTrace(func(op, target string, _ time.Time, _ time.Duration) {
		if op != "ListObjectsV2" {
			return
		}
		u, err := url.Parse(target)
		if err != nil {
			return
		}
		q := u.Query()
		if q.Get("delimiter") != "/" || q.Get("start-after") != "" {
			return // a lookup's listing
		}
		r.mu.Lock()
		r.n[q.Get("prefix")+" "+q.Get("continuation-token")]++
		r.mu.Unlock()
	})
	return r
}

func (r *readdirPages) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.n)
}

// waitListAheadIdle waits, on the list-ahead's events, until none of its requests is in flight.
func waitListAheadIdle(t *testing.T, e *env, ev <-chan struct{}) {
	t.Helper()
	timeout := time.After(time.Minute)
	for !e.m.ListAheadIdle() {
		select {
		case <-ev:
		case <-timeout:
			t.Fatal("the list-ahead did not settle")
		}
	}
}

// TestFindListsNextJobAhead: the readdir of a folder of Flink jobs lists one level further ahead: before
// anything below it is opened, every job's checkpoint folders and its whole shared/ chain (4 pages of 3
// keys, each continuing the one before, and bigFirst) are listed, so the find that follows sends no
// readdir listing of its own below its starting folder; every readdir listing is sent once, and the
// find sees every file.
func TestFindListsNextJobAhead(t *testing.T) {
	var ev <-chan struct{}
	e, p := setupProxied(t, func(o *s3mount.Options) {
		o.PageSize = 3
		s3mount.ListAheadTTL(o, time.Minute) // nothing goes stale: each request is counted once
		ev = s3mount.ListAheadEvents(o)
	})
	var want []string
	for j := range 3 {
		for c := 1; c <= 3; c++ {
			want = append(want, fmt.Sprintf("job%d/chk-%d/_metadata", j, c))
		}
		for i := range 10 {
			want = append(want, fmt.Sprintf("job%d/shared/sst-%04d", j, i))
		}
	}
	for _, k := range want {
		e.put(t, k, "x")
	}
	pages := traceReaddirPages(p)
	p.SetLatency(5 * time.Millisecond)
	if got := names(t, e.mnt); len(got) != 3 {
		t.Fatalf("root: %v", got)
	}
	waitListAheadIdle(t, e, ev)
	for j := range 3 {
		if n := e.m.ListedAheadPages(fmt.Sprintf("job%d/shared", j)); n != 4 {
			t.Errorf("job%d/shared: %d pages listed ahead before any opendir below the root, want its 4", j, n)
		}
	}
	before := pages.snapshot()
	out, err := exec.Command("find", e.mnt, "-type", "f").CombinedOutput()
	if err != nil {
		t.Fatalf("find: %v: %s", err, out)
	}
	var got []string
	for _, l := range strings.Fields(string(out)) {
		got = append(got, strings.TrimPrefix(l, e.mnt+"/"))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("find found %v, want %v", got, want)
	}
	after := pages.snapshot()
	const root = "flink/ " // the find's starting folder is its own readdir (the names above were another)
	if after[root] != 2 {
		t.Errorf("the root listed %d times, want 2 (ls, then find)", after[root])
	}
	delete(after, root)
	for k, n := range after {
		if n > 1 {
			t.Errorf("readdir listing %q sent %d times", k, n)
		}
		if before[k] == 0 {
			t.Errorf("the find sent readdir listing %q itself: it was not listed ahead", k)
		}
	}
	// Each job folder is 2 pages (3 chk-* and shared/), each shared/ 4.
	if f := e.m.FollowedAhead(); f != 3*(1+3) {
		t.Errorf("%d pages after a folder's first served from the list-ahead, want 12", f)
	}
	t.Logf("%d readdir listings, %d of them before the find; ops %v", len(after), len(before), p.Ops())
}

// TestFindListAheadRequests: a find over Flink jobs through the list-ahead sends no more than 1.2 times
// the requests of the same find without it (listing ahead lists what the walk needs, no page twice).
func TestFindListAheadRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("FUSE mount not run in -short mode")
	}
	counts := map[string]int64{}
	for _, tc := range []struct {
		name  string
		ahead int
	}{{"off", -1}, {"default", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			e, p := setupProxied(t, func(o *s3mount.Options) {
				o.PageSize = 3
				o.ListAhead = tc.ahead
				s3mount.ListAheadTTL(o, time.Minute)
			})
			for j := range 4 {
				for c := 1; c <= 3; c++ {
					e.put(t, fmt.Sprintf("job%d/chk-%d/_metadata", j, c), "x")
				}
				for i := range 10 {
					e.put(t, fmt.Sprintf("job%d/shared/sst-%04d", j, i), "x")
				}
			}
			p.SetLatency(5 * time.Millisecond)
			p.Ops()
			if out, err := exec.Command("find", e.mnt, "-type", "f").CombinedOutput(); err != nil {
				t.Fatalf("find: %v: %s", err, out)
			}
			var n int64
			for _, c := range p.Ops() {
				n += c
			}
			counts[tc.name] = n
		})
	}
	t.Logf("requests of the find: %v", counts)
	if counts["off"] == 0 || float64(counts["default"]) > 1.2*float64(counts["off"]) {
		t.Errorf("the find sent %d requests with list-ahead, %d without: want at most 1.2 times", counts["default"], counts["off"])
	}
}
