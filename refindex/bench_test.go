package refindex_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// benchStore returns a generated store of refs references (10,000 checkpoints × 1,000 references for
// the default 10M; CKGUARD_BENCH_REFS overrides), cached under CKGUARD_BENCH_DIR (default
// $TMPDIR/ckguard-bench-<refs>) so that it is generated once.
func benchStore(b *testing.B) (string, *treegen.LargeResult) {
	refs := 10_000_000
	if s := os.Getenv("CKGUARD_BENCH_REFS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		refs = n
	}
	dir := os.Getenv("CKGUARD_BENCH_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("ckguard-bench-%d", refs))
	}
	marker := filepath.Join(dir, "store.json")
	var lr treegen.LargeResult
	if b2, err := os.ReadFile(marker); err == nil && json.Unmarshal(b2, &lr) == nil {
		return dir, &lr
	}
	os.RemoveAll(dir)
	cks := refs / 1000
	jobs := max(1, cks/100)
	t0 := time.Now()
	res, err := treegen.Large(filepath.Join(dir, "store"), treegen.LargeSpec{Jobs: jobs, CheckpointsPerJob: cks / jobs,
		RefsPerCheckpoint: 1000, NewPerCheckpoint: 50, Seed: "bench"}, time.Now().Add(-24*time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("generated %d checkpoints / %d references (%d MB of _metadata) in %s", res.Checkpoints, res.References, res.MetadataBytes>>20, time.Since(t0).Round(time.Second))
	j, _ := json.Marshal(res)
	if err := os.WriteFile(marker, j, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir, res
}

// benchIndex opens (building once) the index of the benchmark store.
func benchIndex(b *testing.B) (*refindex.Index, *treegen.LargeResult) {
	dir, lr := benchStore(b)
	st, err := localstore.New(filepath.Join(dir, "store"))
	if err != nil {
		b.Fatal(err)
	}
	pol := refindex.DefaultPolicy()
	pol.MaxStaleness = 0
	ix, err := refindex.Open(filepath.Join(dir, "index"), st, pol, refindex.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	if s, _ := ix.Stats(context.Background()); s.LastSync.IsZero() || s.References != lr.References {
		t0 := time.Now()
		if err := ix.Rebuild(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Logf("built the index of %d references in %s", lr.References, time.Since(t0).Round(time.Millisecond))
	}
	return ix, lr
}

// BenchmarkDecide measures decision latency against an index of 10M references (p50/p99 reported;
// target p99 ≤ 20µs): referenced files (refused after one prefix scan), unreferenced files (the full
// rule chain, including a stat of the store), and _metadata (policy rules).
func BenchmarkDecide(b *testing.B) {
	ix, lr := benchIndex(b)
	defer ix.Close()
	ctx := context.Background()
	var metas []string
	res, _ := ix.Checkpoints(ctx, "")
	for _, j := range res.Jobs {
		for i, c := range j.Checkpoints {
			if i%10 == 0 {
				metas = append(metas, c.Metadata)
			}
		}
	}
	// The first decision starts building the reference filter of the opened generation in the
	// background; measure once it is in place (a mount runs with it after its first seconds).
	t0 := time.Now()
	for ix.Decide(ctx, lr.SampleUnreferenced[0], verdict.OpUnlink); !refindex.FilterReady(ix); {
		if time.Since(t0) > 5*time.Minute {
			b.Fatal("the reference filter was not built within 5 minutes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Logf("reference filter built in %s", time.Since(t0).Round(time.Millisecond))
	for _, bc := range []struct {
		name  string
		paths []string
		allow bool
	}{
		{"referenced", lr.SampleReferenced, false},
		{"unreferenced", lr.SampleUnreferenced, true},
		{"metadata", metas, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// Wall-clock latency includes time the thread was preempted (on a loaded machine that
			// dominates p99); on-CPU latency (the thread's CPU clock) is the work a decision costs.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			lat := make([]time.Duration, 0, b.N)
			cpu := make([]time.Duration, 0, b.N)
			var c0, c1 unix.Timespec
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := bc.paths[i%len(bc.paths)]
				unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &c0)
				t0 := time.Now()
				d := ix.Decide(ctx, p, verdict.OpUnlink)
				lat = append(lat, time.Since(t0))
				unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &c1)
				cpu = append(cpu, time.Duration(c1.Nano()-c0.Nano()))
				if bc.name != "metadata" && d.Allow != bc.allow {
					b.Fatalf("%s: %+v", p, d)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			slices.Sort(cpu)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
			b.ReportMetric(float64(cpu[len(cpu)/2].Nanoseconds())/1e3, "p50-cpu-µs")
			b.ReportMetric(float64(cpu[len(cpu)*99/100].Nanoseconds())/1e3, "p99-cpu-µs")
		})
	}
}

// BenchmarkRebuild measures a full rebuild of the benchmark store (CKGUARD_BENCH_REFS, default 10M;
// scripts/bench-index.sh runs it as a separate process to measure peak RSS).
func BenchmarkRebuild(b *testing.B) {
	dir, lr := benchStore(b)
	st, err := localstore.New(filepath.Join(dir, "store"))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		ix, err := refindex.Open(b.TempDir(), st, refindex.DefaultPolicy(), refindex.WithLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := ix.Rebuild(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(t0).Seconds(), "s/rebuild")
		b.ReportMetric(float64(lr.References)/time.Since(t0).Seconds(), "refs/s")
		ix.Close()
	}
}
