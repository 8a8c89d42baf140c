package s3mount

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/s3backend/s3client"
)

// fakeBucket is an in-memory bucket answering the list-ahead's requests as S3 does (delimiter listings,
// continuation tokens that name the last key of the page, so a page listed again after a change ends
// at another token), counting each request by prefix and token.
type fakeBucket struct {
	mu    sync.Mutex
	keys  []string // sorted
	calls map[string]int
	fail  map[string]bool // request names (see name) that fail
}

func newFakeBucket(keys ...string) *fakeBucket {
	b := &fakeBucket{calls: map[string]int{}, fail: map[string]bool{}}
	b.add(keys...)
	return b
}

func (b *fakeBucket) add(keys ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.keys = append(b.keys, keys...)
	sort.Strings(b.keys)
}

// name is how a request is counted: "list PREFIX TOKEN" or "head KEY".
func listName(prefix, token string) string { return "list " + prefix + " " + token }

func (b *fakeBucket) count(name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[name]
}

func (b *fakeBucket) total() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.calls {
		n += c
	}
	return n
}

// repeated lists the requests sent more than once.
func (b *fakeBucket) repeated() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for k, c := range b.calls {
		if c > 1 {
			out = append(out, fmt.Sprintf("%s x%d", k, c))
		}
	}
	sort.Strings(out)
	return out
}

func (b *fakeBucket) ListPage(ctx context.Context, prefix string, delim bool, token, startAfter string, maxKeys int32) (s3client.Page, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	name := listName(prefix, token)
	b.calls[name]++
	if b.fail[name] {
		return s3client.Page{}, fmt.Errorf("injected failure of %s", name)
	}
	pg := s3client.Page{Started: time.Now()}
	var last string
	n := int32(0)
	for _, k := range b.keys {
		if !strings.HasPrefix(k, prefix) || (token != "" && k <= token) {
			continue
		}
		if n == maxKeys {
			pg.Next = last
			break
		}
		rest := strings.TrimPrefix(k, prefix)
		if i := strings.IndexByte(rest, '/'); delim && i >= 0 {
			pre := prefix + rest[:i]
			if len(pg.Prefixes) > 0 && pg.Prefixes[len(pg.Prefixes)-1] == pre {
				last = pre + "/\xff" // the whole prefix is behind the token
				continue
			}
			pg.Prefixes = append(pg.Prefixes, pre)
			last = pre + "/\xff"
		} else {
			pg.Objects = append(pg.Objects, s3client.Object{Key: k, Size: 1})
			last = k
		}
		n++
	}
	return pg, nil
}

func (b *fakeBucket) Head(ctx context.Context, key string) (s3client.Object, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls["head "+key]++
	if slices.Contains(b.keys, key) {
		return s3client.Object{Key: key, Size: 1}, nil
	}
	return s3client.Object{}, fs.ErrNotExist
}

// fakeClock is stepped by the test; AfterFunc callbacks run in Advance, in the test's goroutine.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Advance moves the clock and runs the timers due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	rest := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(c.now):
			t.stopped = true
			due = append(due, t)
		default:
			rest = append(rest, t)
		}
	}
	c.timers = rest
	c.mu.Unlock()
	for _, t := range due {
		t.f()
	}
}

// aheadRig is a listAhead over a fakeBucket with a fakeClock; settle waits, on the list-ahead's events,
// until no request is in flight.
type aheadRig struct {
	t     *testing.T
	b     *fakeBucket
	clock *fakeClock
	p     *listAhead
	ev    chan struct{}
}

const rigTTL = time.Second

func newAheadRig(t *testing.T, b *fakeBucket, pageSize int32, budget int64) *aheadRig {
	r := &aheadRig{t: t, b: b, clock: &fakeClock{now: time.Unix(1e9, 0)}, ev: make(chan struct{}, 1)}
	r.p = newListAhead(aheadConfig{lister: b, clock: r.clock, pageSize: pageSize, ttl: rigTTL, budget: budget,
		events: func() {
			select {
			case r.ev <- struct{}{}:
			default:
			}
		}})
	t.Cleanup(r.p.stop)
	return r
}

func (r *aheadRig) settle() {
	r.t.Helper()
	timeout := time.After(time.Minute)
	for !r.p.idle() {
		select {
		case <-r.ev:
		case <-timeout:
			r.t.Fatal("the list-ahead did not settle")
		}
	}
}

// takeAll takes key and waits for every page handed over, returning the page count (0: nothing held).
func (r *aheadRig) takeAll(key string) (pages int, big bool) {
	a := r.p.take(key)
	if a == nil {
		return 0, false
	}
	for _, pg := range a.pages {
		<-pg.done
	}
	if a.big != nil {
		<-a.big.done
	}
	a.cancel()
	return len(a.pages), a.big != nil
}

// jobTree is Flink's shape: jobs of 3 checkpoint folders and a shared/ of n SSTs.
func jobTree(jobs, n int) []string {
	var keys []string
	for j := range jobs {
		for c := 1; c <= 3; c++ {
			keys = append(keys, fmt.Sprintf("flink/job%d/chk-%d/_metadata", j, c))
		}
		for i := range n {
			keys = append(keys, fmt.Sprintf("flink/job%d/shared/sst-%04d", j, i))
		}
	}
	return keys
}

// TestListAheadNextJobChain: once the walk's readdir of the jobs folder asks for the job folders, the
// list-ahead goes one level further: before anything below is opened, every job's checkpoint folders
// and its shared/ chain (first page, bigFirst, the pages after it, each continuing the one before) are
// listed, each request exactly once, and an opendir of the next job's shared/ gets all of its pages.
func TestListAheadNextJobChain(t *testing.T) {
	b := newFakeBucket(jobTree(3, 10)...)
	r := newAheadRig(t, b, 3, 0) // shared/: 4 pages of 3 keys
	g := r.p.newWalk()
	r.p.want(g, []string{"flink/job0", "flink/job1", "flink/job2"})
	r.settle()
	for j := range 3 {
		for c := 1; c <= 3; c++ {
			if n := b.count(listName(fmt.Sprintf("flink/job%d/chk-%d/", j, c), "")); n != 1 {
				t.Errorf("job%d/chk-%d listed %d times ahead, want 1", j, c, n)
			}
		}
		sh := fmt.Sprintf("flink/job%d/shared/", j)
		for _, tok := range []string{"", sh + "sst-0002", sh + "sst-0005", sh + "sst-0008"} {
			if n := b.count(listName(sh, tok)); n != 1 {
				t.Errorf("%s page after %q listed %d times ahead, want 1", sh, tok, n)
			}
		}
		if n := b.count("head " + sh + "_metadata"); n != 1 {
			t.Errorf("%s_metadata HEADed %d times ahead, want 1", sh, n)
		}
	}
	if rep := b.repeated(); len(rep) > 0 {
		t.Errorf("requests sent more than once: %v", rep)
	}
	before := b.total()
	if pages, big := r.takeAll("flink/job1/shared"); pages != 4 || !big {
		t.Errorf("the next job's shared/: %d pages listed ahead (bigFirst %v), want its 4 pages and bigFirst", pages, big)
	}
	if n := b.total() - before; n != 0 {
		t.Errorf("taking what was listed ahead sent %d requests", n)
	}
}

// TestListAheadDepthFirstOrder: with room for a few requests only, the list-ahead lists in the order a
// depth-first walk reaches folders: a job's own folders (newest checkpoint first, shared/ with its
// chain) before the next job's, and a newer walk's asks before an older one's.
func TestListAheadDepthFirstOrder(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"flink/job0/chk-10", "flink/job0/chk-9"},
		{"flink/job0/chk-9", "flink/job0/shared"},
		{"flink/job0", "flink/job0/chk-1"},
		{"flink/job0/shared", "flink/job1"},
		{"flink/job0/_metadata", "flink/job0/chk-1"},
		{"a-b", "a/x"}, // the bucket's order of the prefixes "a-b/" < "a/"
	} {
		if !dfsBefore(tc.a, tc.b) || dfsBefore(tc.b, tc.a) {
			t.Errorf("dfsBefore(%q, %q) = %v, (%q, %q) = %v; want true, false", tc.a, tc.b, dfsBefore(tc.a, tc.b), tc.b, tc.a, dfsBefore(tc.b, tc.a))
		}
	}
	old := &walkGen{id: 1}
	newer := &walkGen{id: 2}
	if !wantBefore(&aheadWant{key: "z", gen: newer}, &aheadWant{key: "a", gen: old}) {
		t.Error("a newer walk's ask does not go first")
	}
	if !wantBefore(&aheadWant{key: "a", gen: old, kind: wantPage, idx: 3}, &aheadWant{key: "a/b", gen: old}) {
		t.Error("a folder's pages do not go before its subfolders")
	}
}

// TestListAheadMemoryBudget: with a budget of a few pages, the held pages stay within it once settled
// (the pages in flight are over it at most), what is evicted is what a depth-first walk reaches last,
// an evicted folder is listed again (once) when the walk has made room, and no folder is listed more
// than twice.
func TestListAheadMemoryBudget(t *testing.T) {
	var keys []string
	for d := range 20 {
		for i := range 50 {
			keys = append(keys, fmt.Sprintf("big/d%02d/file-with-a-long-name-%04d", d, i))
		}
	}
	b := newFakeBucket(keys...)
	page := aheadBytes(s3client.Page{Objects: make([]s3client.Object, 50)}) + 50*int64(len("big/d00/file-with-a-long-name-0000"))
	budget := 3 * page
	r := newAheadRig(t, b, 1000, budget)
	var dirs []string
	for d := range 20 {
		dirs = append(dirs, fmt.Sprintf("big/d%02d", d))
	}
	r.p.want(r.p.newWalk(), dirs)
	r.settle()
	check := func(when string, first int) {
		t.Helper()
		r.p.mu.Lock()
		bytes := r.p.bytes
		r.p.mu.Unlock()
		if bytes > budget {
			t.Errorf("%s: held pages take %d bytes, over the budget of %d", when, bytes, budget)
		}
		held := r.p.heldPages()
		for d := first; d < first+3; d++ {
			if held[dirs[d]] != 1 {
				t.Errorf("%s: %s (next in the walk) not held: held %v", when, dirs[d], held)
			}
		}
		if len(held) != 3 {
			t.Errorf("%s: held %v, want 3 folders", when, held)
		}
		for _, k := range dirs {
			if n := b.count(listName(k+"/", "")); n > 2 {
				t.Errorf("%s: %s listed %d times", when, k, n)
			}
		}
	}
	t.Logf("evicted %d, requests %d, held %v", r.p.evicted.Load(), b.total(), r.p.heldPages())
	check("settled", 0)
	if r.p.evicted.Load() == 0 {
		t.Fatal("nothing evicted: the test shows nothing")
	}
	if n := b.total(); n > defaultListAhead {
		t.Errorf("%d folders listed with a budget of 3 pages, want at most the first %d in flight", n, defaultListAhead)
	}
	// The walk takes the first three: the list-ahead goes on with the next ones in its order.
	for d := range 3 {
		if n, _ := r.takeAll(dirs[d]); n != 1 {
			t.Errorf("take %s: %d pages", dirs[d], n)
		}
	}
	r.settle()
	check("after three takes", 3)
}

// TestListAheadRelistsStale: a page nobody opened within its TTL is listed again while its walk is
// active (it takes pages), served fresh then; a page stale a second time, or of a walk that took nothing
// within the TTL, is discarded; a discarded or stale page is never served.
func TestListAheadRelistsStale(t *testing.T) {
	b := newFakeBucket("a/x/f", "a/y/f", "a/z/f")
	r := newAheadRig(t, b, 1000, 0)
	g := r.p.newWalk()
	r.p.want(g, []string{"a/x", "a/y", "a/z"})
	r.settle()
	r.clock.Advance(rigTTL / 2)
	if n, _ := r.takeAll("a/x"); n != 1 { // the walk takes a page: it is active
		t.Fatalf("take a/x: %d pages", n)
	}
	r.clock.Advance(rigTTL/2 + 2*time.Millisecond) // a/y and a/z are stale now
	r.settle()
	for _, k := range []string{"a/y/", "a/z/"} {
		if n := b.count(listName(k, "")); n != 2 {
			t.Errorf("%s listed %d times, want 2 (listed again once stale)", k, n)
		}
	}
	if got := r.p.relisted.Load(); got != 2 {
		t.Errorf("%d pages listed again, want 2", got)
	}
	if n, _ := r.takeAll("a/y"); n != 1 {
		t.Errorf("take a/y after it was listed again: %d pages, want its fresh page", n)
	}
	// a/z goes stale a second time: discarded, not listed a third time, not served.
	r.clock.Advance(rigTTL + 2*time.Millisecond)
	r.settle()
	if n := b.count(listName("a/z/", "")); n != 2 {
		t.Errorf("a/z listed %d times, want 2", n)
	}
	if n, _ := r.takeAll("a/z"); n != 0 {
		t.Errorf("a stale page was served")
	}

	// A walk that takes nothing: its stale pages are dropped, not listed again.
	b2 := newFakeBucket("b/x/f")
	r2 := newAheadRig(t, b2, 1000, 0)
	r2.p.want(r2.p.newWalk(), []string{"b/x"})
	r2.settle()
	r2.clock.Advance(rigTTL + 2*time.Millisecond)
	r2.settle()
	if n := b2.count(listName("b/x/", "")); n != 1 {
		t.Errorf("an idle walk's stale page listed %d times, want 1", n)
	}
	if n, _ := r2.takeAll("b/x"); n != 0 {
		t.Errorf("an idle walk's stale page was served")
	}
}

// TestListAheadRelistKeepsChain: a first page listed again that ends at the same continuation token
// keeps the pages after it (they continue exactly that page); one that ends elsewhere (a key added
// beside the mount) drops them, and they are listed again from its new token: the folder served is
// one chain, missing no key.
func TestListAheadRelistKeepsChain(t *testing.T) {
	var keys []string
	for i := range 7 {
		keys = append(keys, fmt.Sprintf("s/sst-%02d", i*2))
	}
	b := newFakeBucket(keys...)
	r := newAheadRig(t, b, 3, 0)
	g := r.p.newWalk()
	r.p.want(g, []string{"s"})
	r.settle()
	if n := b.count(listName("s/", "s/sst-04")); n != 1 {
		t.Fatalf("second page listed %d times", n)
	}
	// Keep the walk active while the first page goes stale (its followers started later are stale too,
	// and listed again with their own tokens).
	r.clock.Advance(rigTTL / 2)
	r.p.want(g, nil)
	r.p.want(g, []string{"other"})
	r.clock.Advance(rigTTL/2 + 2*time.Millisecond)
	r.settle()
	if n := b.count(listName("s/", "")); n != 2 {
		t.Errorf("first page listed %d times, want 2", n)
	}
	pages, _ := r.takeAll("s")
	if pages != 3 {
		t.Errorf("%d pages served after the first was listed again at the same token, want 3", pages)
	}

	// A key added before the first page's end: its relisting ends at another token.
	b2 := newFakeBucket(keys...)
	r2 := newAheadRig(t, b2, 3, 0)
	g2 := r2.p.newWalk()
	r2.p.want(g2, []string{"s"})
	r2.settle()
	b2.add("s/sst-01")
	r2.clock.Advance(rigTTL / 2)
	r2.p.want(g2, []string{"other"})
	r2.clock.Advance(rigTTL/2 + 2*time.Millisecond)
	r2.settle()
	a := r2.p.take("s")
	if a == nil {
		t.Fatal("nothing held for s")
	}
	defer a.cancel()
	var got []string
	tok := ""
	for _, pg := range a.pages {
		<-pg.done
		if pg.token != tok {
			t.Fatalf("page listed with token %q follows a page ending at %q: not one chain", pg.token, tok)
		}
		for _, o := range pg.pg.Objects {
			got = append(got, o.Key)
		}
		tok = pg.pg.Next
	}
	want := []string{"s/sst-00", "s/sst-01", "s/sst-02", "s/sst-04", "s/sst-06", "s/sst-08", "s/sst-10", "s/sst-12"}
	sort.Strings(want)
	if tok == "" && !slices.Equal(got, want) {
		t.Errorf("the chain served %v, want %v", got, want)
	}
	if !slices.Equal(got, want[:len(got)]) {
		t.Errorf("the chain served %v, want a prefix of %v", got, want)
	}
}

// TestListAheadForgetDropsChain: the mount's change in a folder drops all of its pages listed ahead,
// also those still in flight or waiting: the next opendir gets nothing from before the change.
func TestListAheadForgetDropsChain(t *testing.T) {
	b := newFakeBucket(jobTree(1, 10)...)
	r := newAheadRig(t, b, 3, 0)
	r.p.want(r.p.newWalk(), []string{"flink/job0/shared"})
	r.p.forget("flink/job0/shared") // while its first page may still be in flight
	r.settle()
	if n, _ := r.takeAll("flink/job0/shared"); n != 0 {
		t.Errorf("%d pages listed before the change served after it", n)
	}
	r.p.want(r.p.newWalk(), []string{"flink/job0/shared"})
	r.settle()
	r.p.forget("flink/job0/shared")
	if n, _ := r.takeAll("flink/job0/shared"); n != 0 {
		t.Errorf("%d pages listed before the change served after it", n)
	}
	r.p.mu.Lock()
	slots, bytes := r.p.slots, r.p.bytes
	r.p.mu.Unlock()
	if slots != 0 || bytes != 0 {
		t.Errorf("after dropping everything %d slots and %d bytes are booked, want 0", slots, bytes)
	}
}

// TestListAheadFailedPageEndsChain: a page after the first whose listing failed is handed over as
// failed (the opendir lists it again), and nothing after it is listed ahead.
func TestListAheadFailedPageEndsChain(t *testing.T) {
	b := newFakeBucket(jobTree(1, 10)...)
	b.fail[listName("flink/job0/shared/", "flink/job0/shared/sst-0002")] = true
	r := newAheadRig(t, b, 3, 0)
	r.p.want(r.p.newWalk(), []string{"flink/job0/shared"})
	r.settle()
	if n := b.count(listName("flink/job0/shared/", "flink/job0/shared/sst-0005")); n != 0 {
		t.Errorf("a page after a failed one was listed ahead")
	}
	a := r.p.take("flink/job0/shared")
	if a == nil || len(a.pages) != 2 {
		t.Fatalf("take: %v", a)
	}
	defer a.cancel()
	<-a.pages[1].done
	if a.pages[1].err == nil {
		t.Error("the failed page is handed over without its error")
	}
}
