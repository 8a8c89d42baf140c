package s3mount_test

import (
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/s3backend/s3mount"
)

// listingSink records the listings a mount hands over (s3mount.ListingSink): begun and committed.
type listingSink struct {
	mu        sync.Mutex
	begun     int
	dropped   int
	committed map[string][][]string // dir -> the keys of each committed listing
	started   map[string]time.Time  // dir -> the first page's request time of the last committed one
}

func newListingSink() *listingSink {
	return &listingSink{committed: map[string][][]string{}, started: map[string]time.Time{}}
}

func (s *listingSink) BeginListing(dir string, started time.Time) (func(string), func(bool)) {
	s.mu.Lock()
	s.begun++
	s.mu.Unlock()
	var keys []string
	return func(k string) { keys = append(keys, k) }, func(complete bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !complete {
			s.dropped++
			return
		}
		s.committed[dir] = append(s.committed[dir], keys)
		s.started[dir] = started
	}
}

func (s *listingSink) counts() (begun, dropped int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.begun, s.dropped
}

func (s *listingSink) get(dir string) ([][]string, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.committed[dir]), s.started[dir]
}

// TestMountHandsOverCompleteListings: a readdir that served every page of a folder, in order and
// without an error, hands the folder's keys and subfolders (as the bucket names them) over, stamped with
// its first page's request time, whether its pages were listed ahead or not; a readdir that failed on
// a page, or was stopped before the last page, hands nothing over.
func TestMountHandsOverCompleteListings(t *testing.T) {
	for _, tc := range []struct {
		name      string
		listAhead int
	}{
		{"pages listed ahead", 0},
		{"no list-ahead", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := newListingSink()
			e, p := setupProxied(t, func(o *s3mount.Options) {
				o.PageSize, o.ListAhead, o.Listings = 3, tc.listAhead, sink
			})
			var want []string
			// 100 names at 3 a page: the kernel's first READDIR (4 KiB of readdirplus entries, a few
			// dozen) does not reach the last page.
			for i := range 100 {
				k := "job/shared/sst-" + itoa(i)
				e.put(t, k, "s")
				want = append(want, k)
			}
			e.put(t, "job/shared/sub/x", "x")
			want = append(want, "job/shared/sub")
			slices.Sort(want)

			// Complete: every page served.
			before := time.Now()
			if got := names(t, e.path("job/shared")); len(got) != 101 {
				t.Fatalf("readdir job/shared = %v", got)
			}
			got, started := sink.get("job/shared")
			if len(got) != 1 {
				t.Fatalf("%d listings of job/shared handed over, want 1", len(got))
			}
			keys := slices.Sorted(slices.Values(got[0]))
			if !slices.Equal(keys, want) {
				t.Errorf("handed over %v, want %v", keys, want)
			}
			if tc.listAhead < 0 && started.Before(before) {
				t.Errorf("stamped %s, before the readdir began (%s)", started, before)
			}
			if started.After(time.Now()) || started.IsZero() {
				t.Errorf("stamped %s, want the first page's request time", started)
			}
			if tc.listAhead >= 0 {
				return
			}

			// Failed: the second page's listing fails (the client's 3 attempts) while the first is served;
			// a retry of the readdir continues and ends, but the listing had an error: nothing is handed over.
			p.SetLatency(200 * time.Millisecond)
			f, err := os.Open(e.path("job/shared"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			buf := make([]byte, 64) // the kernel still asks for a READDIR of its own size
			if _, err := syscall.Getdents(int(f.Fd()), buf); err != nil {
				t.Fatal(err)
			}
			p.FailNext("ListObjectsV2", 3, false) // the prefetch of the next page is held in the proxy
			var derr error
			for range 50 {
				n, err := syscall.Getdents(int(f.Fd()), buf)
				if err != nil {
					derr = err
					continue // the readdir is retried, as ls or find would not, to reach the end anyway
				}
				if n == 0 {
					break
				}
			}
			p.SetLatency(0)
			if derr == nil {
				t.Fatal("no page failed: the fault was not injected where the test meant it")
			}
			if got, _ := sink.get("job/shared"); len(got) != 1 {
				t.Errorf("%d listings of job/shared handed over after a failed page, want still 1", len(got))
			}
			f.Close()

			// Stopped: a readdir closed after its first page hands nothing over.
			g, err := os.Open(e.path("job/shared"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := syscall.Getdents(int(g.Fd()), buf); err != nil {
				t.Fatal(err)
			}
			g.Close()
			time.Sleep(100 * time.Millisecond) // the prefetched page lands, and is never served
			if got, _ := sink.get("job/shared"); len(got) != 1 {
				t.Errorf("%d listings of job/shared handed over after a stopped readdir, want still 1", len(got))
			}
			// Every listing begun was handed over or dropped (what it held is released).
			if begun, dropped := sink.counts(); begun != dropped+len(got) {
				t.Errorf("%d listings begun, %d dropped, %d handed over: some never ended", begun, dropped, len(got))
			}
		})
	}
}
