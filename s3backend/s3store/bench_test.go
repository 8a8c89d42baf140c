package s3store_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3store"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// BenchmarkS3SyncLatency measures the index's work on a big bucket at 0 ms and at 20 ms per request (the
// test proxy's fixed delay in front of versitygw), side by side, and prints the ratios and the requests of
// each step, from which larger buckets extrapolate:
//
//   - steady-state sync (nothing changed): the default descent, and the full-walk discovery for comparison;
//   - a burst sync: 50 new checkpoints of 2,000 references each (50 jobs checkpointing once), which must stay
//     a sync (same index generation), in the same order of time as a no-change sync;
//   - a full walk of the bucket (the reconciliation walk, parallel) against one sequential paged walk;
//   - a rebuild (walk plus a read of every _metadata).
//
// The store is generated directly in versitygw's posix folder: CKGUARD_BENCH_S3_OBJECTS objects (default
// 100,000) in jobs of 5,000 SSTs and 10 checkpoints of 2,000 references (1 M objects: 2,000 checkpoints,
// 4 M references, as in the measurement). Run it alone, once:
//
//	go test ./s3backend/s3store/ -run '^$' -bench S3SyncLatency -benchtime 1x -timeout 2h
func BenchmarkS3SyncLatency(b *testing.B) {
	objects := envInt(b, "CKGUARD_BENCH_S3_OBJECTS", 100_000)
	ctx := context.Background()
	root, bucket, proxy, cfg := benchBucket(b, objects)
	maps := []pathnorm.Mapping{{From: "file:" + root}}
	pol := refindex.DefaultPolicy()
	pol.MaxStaleness = 0

	type step struct {
		took   time.Duration
		ops    map[string]int64
		alloc  uint64
		cpu    time.Duration // this process's CPU (user+system): the machine may be loaded
		detail string
	}
	results := map[time.Duration]map[string]step{}
	latencies := []time.Duration{0, 20 * time.Millisecond}
	measure := func(f func() string) step {
		proxy.Ops()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		c0 := cpuTime()
		t := time.Now()
		detail := f()
		took := time.Since(t)
		c1 := cpuTime()
		runtime.ReadMemStats(&m1)
		return step{took: took, ops: proxy.Ops(), alloc: m1.TotalAlloc - m0.TotalAlloc, cpu: c1 - c0, detail: detail}
	}
	for li, lat := range latencies {
		proxy.SetLatency(lat)
		res := map[string]step{}
		results[lat] = res
		c, err := s3client.New(ctx, cfg, s3client.Location{Bucket: bucket})
		if err != nil {
			b.Fatal(err)
		}
		st := s3store.New(c, s3store.Options{ReconcileEvery: -1})
		ix, err := refindex.Open(filepath.Join(b.TempDir(), "index"), st, pol, refindex.WithPathMap(maps, ""), refindex.WithLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		res["rebuild"] = measure(func() string {
			if err := ix.Rebuild(ctx); err != nil {
				b.Fatal(err)
			}
			return ""
		})
		s0, _ := ix.Stats(ctx)
		for i := range 3 {
			res[fmt.Sprintf("sync, no change #%d", i+1)] = measure(func() string {
				if err := ix.Sync(ctx); err != nil {
					b.Fatal(err)
				}
				return ""
			})
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Printf("%v: live heap after the syncs %d MiB (index open, %d checkpoints), load %s\n", lat, ms.HeapAlloc>>20, s0.Checkpoints, loadavg())
		burst := treegen.LargeSpec{Jobs: 50, CheckpointsPerJob: 1, RefsPerCheckpoint: 2000, NewPerCheckpoint: 0, Seed: fmt.Sprintf("burst%d", li)}
		if _, err := treegen.Large(root, burst, time.Now().Add(-time.Hour)); err != nil {
			b.Fatal(err)
		}
		res["sync, 50 new checkpoints x 2,000 refs"] = measure(func() string {
			if err := ix.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			s1, _ := ix.Stats(ctx)
			if s1.Generation != s0.Generation {
				b.Errorf("the burst sync rebuilt the index (generation %d → %d)", s0.Generation, s1.Generation)
			}
			return fmt.Sprintf("generation %d → %d, %d → %d checkpoints", s0.Generation, s1.Generation, s0.Checkpoints, s1.Checkpoints)
		})
		ix.Close()
		full := s3store.New(c, s3store.Options{FullWalk: true})
		ixf, err := refindex.Open(filepath.Join(b.TempDir(), "index"), full, pol, refindex.WithPathMap(maps, ""), refindex.WithLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		if err := ixf.Rebuild(ctx); err != nil {
			b.Fatal(err)
		}
		res["sync, no change, --s3-full-walk"] = measure(func() string {
			if err := ixf.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			return ""
		})
		ixf.Close()
		res["full walk, parallel (reconciliation)"] = measure(func() string {
			n := 0
			if err := st.ListAllMetadata(ctx, func(store.ObjectInfo) error { n++; return nil }); err != nil {
				b.Fatal(err)
			}
			return fmt.Sprintf("%d _metadata", n)
		})
		res["full walk, sequential pages"] = measure(func() string {
			n := 0
			if err := c.Walk(ctx, "", func(s3client.Object) error { n++; return nil }); err != nil {
				b.Fatal(err)
			}
			return fmt.Sprintf("%d objects", n)
		})
	}
	var names []string
	for n := range results[0] {
		names = append(names, n)
	}
	sort.Strings(names)
	var out strings.Builder
	fmt.Fprintf(&out, "\n%-42s %10s %10s %7s %9s %9s  %-40s %s\n", "step", "0 ms", "20 ms", "ratio", "cpu 0ms", "cpu 20ms", "requests (20 ms)", "allocated (20 ms)")
	for _, n := range names {
		a, z := results[0][n], results[20*time.Millisecond][n]
		var ops []string
		for op, k := range z.ops {
			ops = append(ops, fmt.Sprintf("%s=%d", strings.TrimSuffix(strings.TrimSuffix(op, "Object"), "ObjectsV2"), k))
		}
		sort.Strings(ops)
		fmt.Fprintf(&out, "%-42s %9.2fs %9.2fs %7.2f %8.2fs %8.2fs  %-40s %d MiB %s\n", n, a.took.Seconds(), z.took.Seconds(), z.took.Seconds()/max(a.took.Seconds(), 1e-9),
			a.cpu.Seconds(), z.cpu.Seconds(), strings.Join(ops, " "), z.alloc>>20, z.detail)
	}
	// Extrapolation by request counts: the descent's requests grow with job folders and checkpoints
	// (a bucket ten times larger of the same shape has ten times of both), a walk's and a rebuild's
	// with objects; at a fixed number in flight the time at 20 ms grows with the requests.
	fmt.Fprintf(&out, "\nextrapolated from the 20 ms figures (same shape: x10 and x100 objects, checkpoints and requests)\n")
	for _, n := range names {
		z := results[20*time.Millisecond][n]
		var req int64
		for _, k := range z.ops {
			req += k
		}
		fmt.Fprintf(&out, "%-42s %8d requests now: %9.1fs at %dx objects, %9.1fs at %dx\n", n, req, 10*z.took.Seconds(), 10, 100*z.took.Seconds(), 100)
	}
	// Printed, not logged: the benchmark log is truncated.
	fmt.Println(out.String())
}

// benchBucket starts versitygw and generates the bench-s3-scale store (objects objects in jobs of 5,000
// SSTs, 10 checkpoints of 2,000 references each) directly in its bucket's posix folder, printing its
// size and the load. It returns that folder, the bucket, a proxy in front of the server (latency 0)
// and a client configuration that goes through the proxy.
func benchBucket(b *testing.B, objects int) (root, bucket string, proxy *s3server.Proxy, cfg s3client.Config) {
	b.Helper()
	srv := s3server.Start(b)
	bucket = srv.Bucket(b, "bench")
	root = filepath.Join(srv.DataDir, bucket)
	spec := treegen.LargeSpec{Jobs: max(1, objects/5000), CheckpointsPerJob: 10, RefsPerCheckpoint: 2000, NewPerCheckpoint: 333, DataFiles: true, Seed: "bench"}
	t0 := time.Now()
	lr, err := treegen.Large(root, spec, time.Now().Add(-48*time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	fmt.Printf("store: %d objects, %d checkpoints, %d references, generated in %s, load %s\n", lr.Distinct, lr.Checkpoints, lr.References, time.Since(t0).Round(time.Second), loadavg())
	proxy = s3server.NewProxy(b, srv.Endpoint)
	cfg = srv.Config()
	cfg.Endpoint = proxy.URL
	return root, bucket, proxy, cfg
}

// cpuTime is the CPU this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadavg is the machine's 1-minute load (the figures above depend on it).
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// BenchmarkS3SyncCheckpoints measures the per-sync cost that grows with checkpoints rather than objects:
// CKGUARD_BENCH_S3_CHECKPOINTS (default 2,000) live checkpoints in jobs of 10, _metadata only (the
// descent never lists shared/, so the SSTs of a real store add nothing to a sync; 20,000 checkpoints is
// the 10 M-object store), plus CKGUARD_BENCH_S3_EXCLUSIVE (default 0) files in every checkpoint
// folder (exclusive state: with many, the flat listing of checkpoint folders gives way to HEADs). The
// descent is measured even though a walk of this SST-less bucket would be cheaper (the store then walks
// instead; with the SSTs of 10 M objects it would not). Side by side, at 0 ms and 20 ms per request,
// with request counts and client CPU:
//
//   - a no-change sync with a HEAD per checkpoint (the descent before the flat listing) and with the
//     default (one flat listing of each job's checkpoint folders);
//
//   - a sync that retires one checkpoint in each of 10 jobs (Flink deleted their _metadata): it lists
//     the store twice (the second time before it retires), with the second listing as the first and
//     with the default second listing of new keys only (store.NewLister).
//
//     CKGUARD_BENCH_S3_CHECKPOINTS=20000 go test ./s3backend/s3store/ -run '^$' -bench S3SyncCheckpoints -benchtime 1x
func BenchmarkS3SyncCheckpoints(b *testing.B) {
	n := envInt(b, "CKGUARD_BENCH_S3_CHECKPOINTS", 2000)
	exclusive := envInt(b, "CKGUARD_BENCH_S3_EXCLUSIVE", 0)
	ctx := context.Background()
	srv := s3server.Start(b)
	bucket := srv.Bucket(b, "bench")
	root := filepath.Join(srv.DataDir, bucket)
	t0 := time.Now()
	spec := treegen.LargeSpec{Jobs: max(1, n/10), CheckpointsPerJob: 10, RefsPerCheckpoint: 10, NewPerCheckpoint: 1, Seed: "ckpt"}
	lr, err := treegen.Large(root, spec, time.Now().Add(-48*time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	for j := range spec.Jobs {
		for c := range spec.CheckpointsPerJob {
			dir := filepath.Join(root, filepath.FromSlash(fmt.Sprintf("%s/chk-%d", treegen.LargeJob(spec.Seed, j), 1000+c)))
			for f := range exclusive {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%08x-exclusive", f)), []byte("x"), 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	fmt.Printf("store: %d checkpoints, %d references, %d exclusive files per checkpoint folder, generated in %s, load %s\n",
		lr.Checkpoints, lr.References, exclusive, time.Since(t0).Round(time.Second), loadavg())
	proxy := s3server.NewProxy(b, srv.Endpoint)
	cfg := srv.Config()
	cfg.Endpoint = proxy.URL
	maps := []pathnorm.Mapping{{From: "file:" + root}}
	pol := refindex.DefaultPolicy()
	pol.MaxStaleness = 0
	c, err := s3client.New(ctx, cfg, s3client.Location{Bucket: bucket})
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(b.TempDir(), "index")
	{
		st := s3store.New(c, s3store.Options{ReconcileEvery: -1})
		ix, err := refindex.Open(dir, st, pol, refindex.WithPathMap(maps, ""), refindex.WithLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		if err := ix.Rebuild(ctx); err != nil {
			b.Fatal(err)
		}
		ix.Close()
	}
	retired := 0 // checkpoints of the first 10 jobs retired so far (one per job per retiring sync)
	retire := func() {
		for j := range min(10, spec.Jobs) {
			k := fmt.Sprintf("%s/chk-%d/_metadata", treegen.LargeJob(spec.Seed, j), 1000+retired)
			if err := os.Remove(filepath.Join(root, filepath.FromSlash(k))); err != nil {
				b.Fatal(err)
			}
		}
		retired++
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%-46s %8s %9s %9s %8s  %s\n", "sync", "latency", "seconds", "cpu", "load", "requests")
	for _, mode := range []struct {
		name         string
		heads, plain bool // plain: the second listing of a retiring sync is a whole one
		noChange     bool // measure the no-change sync too
	}{
		{"HEAD per checkpoint", true, true, true},
		{"flat listing, second listing whole", false, true, false},
		{"default (flat listing, new keys only)", false, false, true},
	} {
		st := s3store.New(c, s3store.Options{ReconcileEvery: -1})
		s3store.DescendOnly(st) // without the SSTs a walk is cheaper here; a 10 M-object bucket's is not
		if mode.heads {
			s3store.HeadsOnly(st)
		}
		var ist store.Store = st
		if mode.plain {
			ist = listOnly{st, st, st}
		}
		ix, err := refindex.Open(dir, ist, pol, refindex.WithPathMap(maps, ""), refindex.WithLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		for _, retiring := range []bool{false, true} {
			if !retiring && !mode.noChange {
				continue // the same no-change sync as the default's
			}
			for _, lat := range []time.Duration{0, 20 * time.Millisecond} {
				proxy.SetLatency(0)
				if retiring {
					retire()
				}
				s0, _ := ix.Stats(ctx)
				proxy.SetLatency(lat)
				load := loadavg()
				proxy.Ops()
				c0 := cpuTime()
				t := time.Now()
				if err := ix.Sync(ctx); err != nil {
					b.Fatal(err)
				}
				took := time.Since(t)
				cpu := cpuTime() - c0
				var ops []string
				for op, k := range proxy.Ops() {
					ops = append(ops, fmt.Sprintf("%s=%d", op, k))
				}
				sort.Strings(ops)
				s1, _ := ix.Stats(ctx)
				what := "no change"
				if retiring {
					what = fmt.Sprintf("retiring %d", s0.Checkpoints-s1.Checkpoints)
					if s0.Checkpoints-s1.Checkpoints != min(10, spec.Jobs) {
						b.Errorf("%s: the retiring sync went from %d to %d checkpoints", mode.name, s0.Checkpoints, s1.Checkpoints)
					}
				}
				fmt.Fprintf(&out, "%-46s %8v %8.2fs %8.2fs %8s  %s\n", what+", "+mode.name, lat, took.Seconds(), cpu.Seconds(), load, strings.Join(ops, " "))
			}
		}
		ix.Close()
	}
	fmt.Println(out.String())
}

// listOnly is an S3 store without store.NewLister (a sync that retires lists the store twice in full).
type listOnly struct {
	store.Store
	store.FullLister
	store.Clock
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return n
}
