package s3client_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// oddKeys are keys whose XML needs entities or whose paths look special.
var oddKeys = []string{
	"a&b", "a<b>c", `q"uo'te`, "sp ace/x y", " lead", "trail ", "tab\tx", "ü/日本/😀", "a..b/..c", ".hidden", // versitygw stores "x/./y" as "x/y"
	"chk-1/_metadata", "shared/a+b=c%2F", "end/", "amp&amp;", "lt&lt;", "num&#65;", "cdata<![CDATA[x]]>",
}

// listAll collects every page of one listing, as ListPage returns them.
func listAll(t *testing.T, c *s3client.Client, prefix string, delim bool, startAfter string, maxKeys int32) []s3client.Page {
	t.Helper()
	var pages []s3client.Page
	token := ""
	for {
		pg, err := c.ListPage(context.Background(), prefix, delim, token, startAfter, maxKeys)
		if err != nil {
			t.Fatalf("list %q delim %v after %q max %d: %v", prefix, delim, startAfter, maxKeys, err)
		}
		pg.Started = pg.Started.Truncate(0)
		pages = append(pages, pg)
		if pg.Next == "" {
			return pages
		}
		token = pg.Next
	}
}

func samePages(t *testing.T, what string, lean, sdk []s3client.Page) {
	t.Helper()
	if len(lean) != len(sdk) {
		t.Fatalf("%s: %d pages lean, %d SDK", what, len(lean), len(sdk))
	}
	for i := range lean {
		l, s := lean[i], sdk[i]
		l.Started = s.Started
		for j := range l.Objects {
			if j < len(s.Objects) && l.Objects[j].ModTime.Equal(s.Objects[j].ModTime) {
				l.Objects[j].ModTime = s.Objects[j].ModTime
			}
		}
		if !reflect.DeepEqual(l, s) {
			t.Fatalf("%s page %d:\nlean %+v\nSDK  %+v", what, i, l, s)
		}
	}
}

// Real versitygw answers decode to the same pages with the lean decoder as with the SDK's, for odd keys,
// every page size, delimiters, StartAfter and continuation tokens.
func TestLeanListMatchesSDKOnVersitygw(t *testing.T) {
	srv := s3server.Start(t)
	srv.Bucket(t, "bkt")
	lean, err := s3client.New(context.Background(), srv.Config(), s3client.Location{Bucket: "bkt", Prefix: "root/"})
	if err != nil {
		t.Fatal(err)
	}
	sdk, _ := s3client.New(context.Background(), srv.Config(), s3client.Location{Bucket: "bkt", Prefix: "root/"})
	s3client.UseSDKListDecoder(sdk, true)
	var keys []string
	for _, k := range oddKeys {
		body := k
		if strings.HasSuffix(k, "/") {
			body = "" // a folder marker
		}
		if _, err := lean.Put(context.Background(), k, strings.NewReader(body), int64(len(body)), s3client.PutOptions{}); err != nil {
			t.Logf("versitygw refuses the key %q: %v", k, err)
			continue
		}
		keys = append(keys, k)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := 0; i < 1300; i++ {
		k := fmt.Sprintf("job/shared/f&%04d", i)
		if i%3 == 0 {
			k = fmt.Sprintf("job/chk-%d/x y<%d>", i%7, i)
		}
		keys = append(keys, k)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := lean.Put(context.Background(), k, strings.NewReader("x"), 1, s3client.PutOptions{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	sort.Strings(keys)
	for _, tc := range []struct {
		prefix     string
		delim      bool
		startAfter string
		maxKeys    int32
	}{
		{"", false, "", 1000}, {"", true, "", 1000}, {"", false, "", 7}, {"job/", true, "", 2}, {"job/", false, "job/chk-3", 1000},
		{"job/shared/", false, "", 0}, {"sp ace/", false, "", 1}, {"", true, "a", 3}, {"nothing/", false, "", 1000},
	} {
		what := fmt.Sprintf("prefix %q delim %v after %q max %d", tc.prefix, tc.delim, tc.startAfter, tc.maxKeys)
		l := listAll(t, lean, tc.prefix, tc.delim, tc.startAfter, tc.maxKeys)
		samePages(t, what, l, listAll(t, sdk, tc.prefix, tc.delim, tc.startAfter, tc.maxKeys))
		if tc.prefix == "" && !tc.delim && tc.startAfter == "" {
			var got []string
			for _, pg := range l {
				for _, o := range pg.Objects {
					got = append(got, o.Key)
				}
			}
			sort.Strings(got) // versitygw's posix backend lists in its directory walk's order
			if !reflect.DeepEqual(got, keys) {
				for i := range got {
					if i >= len(keys) || got[i] != keys[i] {
						t.Errorf("%s: key %d is %q, want %q", what, i, got[i], keys[min(i, len(keys)-1)])
						break
					}
				}
				t.Errorf("%s: %d keys, want the %d written", what, len(got), len(keys))
			}
		}
	}
}

// Through the fault proxy (a third of the requests answered 503 SlowDown) the lean decoder's listing is
// retried like the SDK's and complete.
func TestLeanListRetriesThroughFaults(t *testing.T) {
	srv := s3server.Start(t)
	srv.Bucket(t, "bkt")
	direct, _ := s3client.New(context.Background(), srv.Config(), s3client.Location{Bucket: "bkt"})
	for i := 0; i < 30; i++ {
		if _, err := direct.Put(context.Background(), fmt.Sprintf("k&%02d", i), strings.NewReader("x"), 1, s3client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p := s3server.NewProxy(t, srv.Endpoint)
	cfg := srv.Config()
	cfg.Endpoint = p.URL
	cfg.MaxAttempts = 10
	c, _ := s3client.New(context.Background(), cfg, s3client.Location{Bucket: "bkt"})
	p.SetFailRate(0.33)
	pages := listAll(t, c, "", false, "", 4)
	_, failed := p.Stats()
	p.SetFailRate(0)
	n := 0
	for _, pg := range pages {
		n += len(pg.Objects)
	}
	if n != 30 || failed == 0 {
		t.Errorf("%d objects listed with %d injected failures, want 30 and some failures", n, failed)
	}
	samePages(t, "through faults", pages, listAll(t, direct, "", false, "", 4))
	// Errors are the SDK's: a missing bucket is ENOENT.
	gone, _ := s3client.New(context.Background(), srv.Config(), s3client.Location{Bucket: "nobucket"})
	if _, err := gone.ListPage(context.Background(), "", false, "", "", 10); s3client.Errno(err) == 0 || !strings.Contains(err.Error(), "NoSuchBucket") {
		t.Errorf("listing a missing bucket: %v (errno %v), want NoSuchBucket", err, s3client.Errno(err))
	}
}

// BenchmarkS3WalkDecoders walks a bucket of CKGUARD_BENCH_S3_OBJECTS objects (default 100,000, written
// straight into versitygw's posix folder) with the lean decoder and with the SDK's, at 0 ms and 20 ms per
// request through the test proxy, and prints wall time, the client's CPU per page and the ratios. Run it
// alone:
//
//	go test ./s3backend/s3client/ -run '^$' -bench S3WalkDecoders -benchtime 1x
func BenchmarkS3WalkDecoders(b *testing.B) {
	n := 100_000
	if v := os.Getenv("CKGUARD_BENCH_S3_OBJECTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	srv := s3server.Start(b)
	srv.Bucket(b, "bench")
	for i := 0; i < n; i++ {
		dir := filepath.Join(srv.DataDir, "bench", fmt.Sprintf("job-%03d/shared", i/1000))
		if i%1000 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("8f3c2d5e-1b2a-4c3d-9e8f-%012d", i)), []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for i := 0; i < b.N; i++ {
		for _, lat := range []time.Duration{0, 20 * time.Millisecond} {
			p := s3server.NewProxy(b, srv.Endpoint)
			p.SetLatency(lat)
			cfg := srv.Config()
			cfg.Endpoint = p.URL
			var wall, cpus [2]time.Duration
			pages := 0
			for rep := 0; rep < 2; rep++ {
				for d, sdk := range []bool{false, true} {
					c, err := s3client.New(context.Background(), cfg, s3client.Location{Bucket: "bench"})
					if err != nil {
						b.Fatal(err)
					}
					s3client.UseSDKListDecoder(c, sdk)
					got := 0
					pages = 0
					t0, c0 := time.Now(), cpu()
					if err := c.WalkPages(context.Background(), "", func() { pages++ }, func(s3client.Object) error { got++; return nil }); err != nil {
						b.Fatal(err)
					}
					w, u := time.Since(t0), cpu()-c0
					if got != n {
						b.Fatalf("walked %d objects, want %d", got, n)
					}
					if rep == 0 || w < wall[d] {
						wall[d], cpus[d] = w, u
					}
				}
			}
			b.Logf("%d objects at %v per request (best of 2, load %s): lean %.2f s (client CPU %.1f ms/page), SDK %.2f s (%.1f ms/page); SDK/lean wall %.2f, CPU %.2f",
				n, lat, loadavg(), wall[0].Seconds(), float64(cpus[0].Microseconds())/1000/float64(pages), wall[1].Seconds(),
				float64(cpus[1].Microseconds())/1000/float64(pages), wall[1].Seconds()/wall[0].Seconds(), cpus[1].Seconds()/cpus[0].Seconds())
			p.Close()
		}
	}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
