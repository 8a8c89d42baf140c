package s3store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3store"
)

// headOnly is the S3 store without its folder listing (only the Store interface and a fresh stat):
// the loss check then HEADs every object.
type headOnly struct {
	store.Store
	s *s3store.Store
}

func (h headOnly) StatFresh(ctx context.Context, p string) (store.ObjectInfo, error) {
	return h.s.StatFresh(ctx, p)
}

var (
	_ store.Store       = headOnly{}
	_ store.FreshStater = headOnly{}
)

// BenchmarkS3LossCheck measures one complete loss check pass at 20 ms per request (the test proxy's
// delay in front of versitygw) on the bench-s3-scale store (CKGUARD_BENCH_S3_OBJECTS objects, default
// 100,000; jobs of 5,000 SSTs, 10 checkpoints of 2,000 references): folders listed against one HEAD per
// object, with the requests of each and the ratio. The HEAD pass is measured on its first
// CKGUARD_BENCH_S3_HEADS objects (default 5,000; a budget) and extrapolated per request. Run it alone:
//
//	go test ./s3backend/s3store/ -run '^$' -bench S3LossCheck -benchtime 1x -timeout 1h
func BenchmarkS3LossCheck(b *testing.B) {
	objects, heads := envInt(b, "CKGUARD_BENCH_S3_OBJECTS", 100_000), envInt(b, "CKGUARD_BENCH_S3_HEADS", 5_000)
	ctx := context.Background()
	root, bucket, proxy, cfg := benchBucket(b, objects)
	// versitygw's posix backend reads every listed file's attributes: a 1,000-key page takes seconds on
	// a loaded machine, longer than the test configuration's 20 s per operation allows with 16 in flight.
	cfg.OpTimeout = 5 * time.Minute
	c, err := s3client.New(ctx, cfg, s3client.Location{Bucket: bucket})
	if err != nil {
		b.Fatal(err)
	}
	st := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	pol := refindex.DefaultPolicy()
	pol.MaxStaleness = 0
	open := func(s store.Store) *refindex.Index {
		ix, err := refindex.Open(filepath.Join(b.TempDir(), "index"), s, pol, refindex.WithPathMap([]pathnorm.Mapping{{From: "file:" + root}}, ""), refindex.WithLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ix.Close() })
		if err := ix.Rebuild(ctx); err != nil {
			b.Fatal(err)
		}
		return ix
	}
	listed, headed := open(st), open(headOnly{st, st})
	proxy.SetLatency(20 * time.Millisecond)
	pass := func(ix *refindex.Index, budget int) (*refindex.LossReport, time.Duration, int64) {
		lc := ix.NewLossChecker(refindex.LossCheckOptions{Budget: budget})
		proxy.Ops()
		t := time.Now()
		rep, err := lc.Check(ctx)
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(t)
		var ops int64
		for _, n := range proxy.Ops() {
			ops += n
		}
		return rep, took, ops
	}
	lrep, ltook, lops := pass(listed, 0)
	fmt.Printf("listing: %d referenced objects in %s, %d requests (%d at the proxy), complete %v, load %s\n",
		lrep.Objects, ltook.Round(time.Millisecond), lrep.Requests, lops, lrep.Complete, loadavg())
	drep, _, _ := pass(listed, 1000)
	fmt.Printf("listing with the S3 default budget (1,000 requests): %d passes for a complete check\n", drep.RoundPasses)
	hrep, htook, hops := pass(headed, heads)
	perReq := htook / time.Duration(max(1, hrep.Requests))
	full := perReq * time.Duration(hrep.Objects)
	fmt.Printf("HEAD each: %d of %d objects in %s, %d requests (%d at the proxy); full pass extrapolated %s, load %s\n",
		hrep.Checked, hrep.Objects, htook.Round(time.Millisecond), hrep.Requests, hops, full.Round(time.Second), loadavg())
	fmt.Printf("ratio HEAD-each / listing: time %.1f, requests %.1f\n", float64(full)/float64(ltook), float64(hrep.Objects)/float64(max(1, lrep.Requests)))
	for range b.N {
	}
}
