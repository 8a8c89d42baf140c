package s3guardd_test

// BenchmarkHoldSyncScale is issue 31's "sync time at 1 M objects with holds on", against the real server:
// versitygw with an Object Lock bucket, the store generated locally (jobs of 5,000 SSTs, 10 checkpoints
// of 2,000 references) and uploaded with PutObject, 32 in flight (a file put into the posix folder by
// hand has no version id, and the holder rightly refuses to hold what it cannot name by version), the
// index over S3 (s3store), the legal
// holds by s3hold's holder with the real client through the test proxy, unpaced (a mount paces them with
// --loss-check-rate, which only stretches the pass). For each size of CKGUARD_BENCH_HOLD_OBJECTS
// (default "10000,100000"; 1,000,000 takes about 10 times the 100,000 run, see the docs):
//
//   - sync, no change, holds off: the baseline (three syncs, the median);
//   - the first hold pass (a HEAD and a PutObjectLegalHold per referenced object and live _metadata),
//     with no-change syncs run back to back beside it: their median is the sync time with holds on
//     (the sync never waits for holds; what the pass costs it is the server and the CPU it shares);
//   - a new checkpoint of 2,000 new objects: its sync, then the pass holding them (a rescan of the index
//     and the ledger plus 2,000 holds);
//   - a sync and a pass that changed nothing (the pass skips on the index's version).
//
// Run alone, once:
//
//	go test ./s3backend/s3guardd/ -run '^$' -bench HoldSyncScale -benchtime 1x -timeout 3h
import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/hold"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3hold"
	"github.com/ckguard/ckguard/s3backend/s3store"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

func BenchmarkHoldSyncScale(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if v := os.Getenv("CKGUARD_BENCH_HOLD_OBJECTS"); v != "" {
		sizes = sizes[:0]
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("CKGUARD_BENCH_HOLD_OBJECTS=%q: want sizes like 10000,100000", v)
			}
			sizes = append(sizes, n)
		}
	}
	lat := time.Duration(0)
	if v := os.Getenv("CKGUARD_BENCH_HOLD_LATENCY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		lat = d
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) { holdSyncScale(b, n, lat) })
	}
}

func holdSyncScale(b *testing.B, objects int, lat time.Duration) {
	ctx := context.Background()
	srv := s3server.StartVersioned(b)
	bucket := srv.ObjectLockBucket(b, "holdscale")
	root := filepath.Join(b.TempDir(), "tree")
	direct, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: bucket})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	lr, err := treegen.Large(root, treegen.LargeSpec{Jobs: max(1, objects/5000), CheckpointsPerJob: 10, RefsPerCheckpoint: 2000,
		NewPerCheckpoint: 333, DataFiles: true, Seed: "holdscale"}, time.Now().Add(-48*time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	gen := time.Since(t0)
	t0 = time.Now()
	up := uploadTree(b, direct, root, nil)
	fmt.Printf("hold scale: %d referenced objects, %d checkpoints, %d references, generated in %s, %d objects uploaded in %s, load %s\n",
		lr.Distinct, lr.Checkpoints, lr.References, gen.Round(time.Second), len(up), time.Since(t0).Round(time.Second), loadAvg())
	proxy := s3server.NewProxy(b, srv.Endpoint)
	proxy.SetLatency(lat)
	cfg := srv.Config()
	cfg.Endpoint = proxy.URL
	c, err := s3client.New(ctx, cfg, s3client.Location{Bucket: bucket})
	if err != nil {
		b.Fatal(err)
	}
	pol := refindex.DefaultPolicy()
	pol.MaxStaleness = 0
	ix, err := refindex.Open(filepath.Join(b.TempDir(), "index"), s3store.New(c, s3store.Options{ReconcileEvery: -1}), pol,
		refindex.WithPathMap([]pathnorm.Mapping{{From: "file:" + root}}, ""), refindex.WithLogger(slogQuiet))
	if err != nil {
		b.Fatal(err)
	}
	defer ix.Close()
	sync1 := func() time.Duration {
		t := time.Now()
		if err := ix.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(t)
	}
	build := sync1()
	var base []time.Duration
	for range 3 {
		base = append(base, sync1())
	}

	ledger, err := hold.OpenLedger(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer ledger.Close()
	h := s3hold.New(s3hold.Options{Server: c, Hold: hold.Options{Index: ix, Ledger: ledger, Logger: slogQuiet, Mode: hold.ModeRequired}})
	proxy.Ops()
	var (
		besideMu sync.Mutex
		beside   []time.Duration
	)
	syncsBeside := func() []time.Duration {
		besideMu.Lock()
		defer besideMu.Unlock()
		return append([]time.Duration(nil), beside...)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			t := time.Now()
			if err := ix.Sync(ctx); err != nil {
				b.Error(err) // not Fatal: this is not the benchmark's goroutine
				return
			}
			d := time.Since(t)
			besideMu.Lock()
			beside = append(beside, d)
			besideMu.Unlock()
		}
	}()
	t1 := time.Now()
	// Progress once a minute (a first pass at 1,000,000 objects takes most of an hour): the time so far
	// and the syncs beside it (the holder's counts are settled at the end of a pass).
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Minute)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				sb := syncsBeside()
				fmt.Printf("hold scale %d objects: first pass %s in, %d syncs beside it (median %s), load %s\n",
					lr.Distinct, time.Since(t1).Round(time.Second), len(sb), median(sb).Round(time.Millisecond), loadAvg())
			}
		}
	}()
	if err := h.Pass(ctx); err != nil {
		b.Fatal(err)
	}
	first := time.Since(t1)
	close(done)
	wg.Wait()
	firstOps := proxy.Ops()
	st := h.Status()
	if b.Failed() {
		b.FailNow()
	}
	if st.Failed != 0 || st.Pending != 0 || st.Held < lr.Distinct {
		b.Fatalf("after the first pass: %+v, want %d referenced objects held", st, lr.Distinct)
	}

	// A new checkpoint of 2,000 new objects (a new job checkpointing once).
	if _, err := treegen.Large(root, treegen.LargeSpec{Jobs: 1, CheckpointsPerJob: 1, RefsPerCheckpoint: 2000, NewPerCheckpoint: 2000,
		DataFiles: true, Seed: "holdscale-new"}, time.Now().Add(-time.Hour)); err != nil {
		b.Fatal(err)
	}
	uploadTree(b, direct, root, up)
	newSync := sync1()
	proxy.Ops()
	t2 := time.Now()
	if err := h.Pass(ctx); err != nil {
		b.Fatal(err)
	}
	newPass := time.Since(t2)
	newOps := proxy.Ops()
	if st2 := h.Status(); st2.Held < st.Held+2000 {
		b.Fatalf("after the new checkpoint's pass: %d held, want %d", st2.Held, st.Held+2000)
	}
	idleSync := sync1()
	t3 := time.Now()
	if err := h.Pass(ctx); err != nil {
		b.Fatal(err)
	}
	idlePass := time.Since(t3)

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Printf("hold scale %d objects (latency %s, load %s): index build %s; no-change sync %.1f ms without holds, %.1f ms (median of %d) beside the first hold pass\n",
		lr.Distinct, lat, loadAvg(), build.Round(time.Millisecond), ms(median(base)), ms(median(beside)), len(beside))
	fmt.Printf("hold scale %d objects: first pass %s for %d holds (%.2f ms per object, %d requests: %v); new checkpoint of 2,000 objects: sync %.1f ms, pass %s (%d requests); no change: sync %.1f ms, pass %s\n",
		lr.Distinct, first.Round(time.Millisecond), st.Held, ms(first)/float64(st.Held), sumOps(firstOps), firstOps, ms(newSync), newPass.Round(time.Millisecond), sumOps(newOps), ms(idleSync), idlePass.Round(time.Microsecond))
	b.ReportMetric(ms(median(base)), "ms/sync-holds-off")
	b.ReportMetric(ms(median(beside)), "ms/sync-beside-first-pass")
	b.ReportMetric(first.Seconds(), "s/first-pass")
	b.ReportMetric(ms(first)/float64(st.Held), "ms/hold")
	b.ReportMetric(ms(newSync), "ms/sync-new-checkpoint")
	b.ReportMetric(ms(newPass), "ms/pass-new-checkpoint")
}

var slogQuiet = slog.New(slog.DiscardHandler)

// uploadTree puts every file below root not in done at its relative key, 32 in flight, data files
// before _metadata (as Flink completes a checkpoint), and returns done with them added.
func uploadTree(b *testing.B, c *s3client.Client, root string, done map[string]bool) map[string]bool {
	b.Helper()
	if done == nil {
		done = map[string]bool{}
	}
	var data, metas []string
	if err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if done[rel] {
			return nil
		}
		if d.Name() == "_metadata" {
			metas = append(metas, rel)
		} else {
			data = append(data, rel)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	for _, keys := range [][]string{data, metas} {
		ch := make(chan string)
		errs := make(chan error, 32)
		var wg sync.WaitGroup
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range ch {
					body, err := os.ReadFile(filepath.Join(root, k))
					if err == nil {
						_, err = c.Put(context.Background(), filepath.ToSlash(k), bytes.NewReader(body), int64(len(body)), s3client.PutOptions{})
					}
					if err != nil {
						select {
						case errs <- fmt.Errorf("put %s: %w", k, err):
						default:
						}
					}
				}
			}()
		}
		for _, k := range keys {
			ch <- k
		}
		close(ch)
		wg.Wait()
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		for _, k := range keys {
			done[k] = true
		}
	}
	return done
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func sumOps(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// loadAvg is the machine's 1-minute load (the figures depend on it).
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}
