package s3hold_test

// Benchmarks of the legal holds (issue 31): the cost per reference of a hold and of its release on
// versitygw through the fault proxy at 0 and 20 ms added latency, and the holder's own cost of a pass
// over a real index of 100 k and 1 M referenced objects (server answers in-process, so what is measured
// is the index scan, the ledger and its fsyncs). Figures: docs/OPERATIONS.md, "Protection outside the
// mount".

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ckguard/ckguard/fs/hold"
	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3hold"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

var quiet = slog.New(slog.DiscardHandler)

// keysIndex protects a fixed set of keys (on) or none; Decide allows every unlink of a key it does
// not protect.
type keysIndex struct {
	keys []string
	on   bool
}

func (ix *keysIndex) ProtectedKeys(ctx context.Context, fn func(string, refindex.ProtectedKind) bool) error {
	if !ix.on {
		return nil
	}
	for _, k := range ix.keys {
		if !fn(k, refindex.ProtectedObject) {
			return nil
		}
	}
	return ctx.Err()
}

func (ix *keysIndex) Decide(context.Context, string, verdict.Op, ...store.ObjectInfo) verdict.Decision {
	return verdict.Decision{Allow: !ix.on}
}

// BenchmarkHoldRelease: one iteration holds n referenced objects (a HEAD and a PutObjectLegalHold ON
// each, 8 in flight, the ledger's intents synced per batch of 64) and releases them (a Decide and a
// PutObjectLegalHold OFF each) on versitygw with Object Lock, through the proxy at the added latency.
// Unpaced: a mount paces these with the loss check's budget (--loss-check-rate).
func BenchmarkHoldRelease(b *testing.B) {
	srv := s3server.StartVersioned(b)
	bucket := srv.ObjectLockBucket(b, "holdbench")
	ctx := context.Background()
	const n = 256
	keys := make([]string, n)
	direct, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: bucket})
	if err != nil {
		b.Fatal(err)
	}
	for i := range keys {
		keys[i] = fmt.Sprintf("job/shared/%04d", i)
		if _, err := direct.API().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(keys[i]), Body: strings.NewReader("x")}); err != nil {
			b.Fatal(err)
		}
	}
	for _, lat := range []time.Duration{0, 20 * time.Millisecond} {
		b.Run(fmt.Sprintf("latency=%dms", lat.Milliseconds()), func(b *testing.B) {
			p := s3server.NewProxy(b, srv.Endpoint)
			p.SetLatency(lat)
			cfg := srv.Config()
			cfg.Endpoint = p.URL
			c, err := s3client.New(ctx, cfg, s3client.Location{Bucket: bucket})
			if err != nil {
				b.Fatal(err)
			}
			ledger, err := hold.OpenLedger(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer ledger.Close()
			ix := &keysIndex{keys: keys}
			h := s3hold.New(s3hold.Options{Server: c, Hold: hold.Options{Index: ix, Ledger: ledger, Logger: quiet, Mode: hold.ModeRequired}})
			var hold, release time.Duration
			r0, _ := p.Stats()
			for b.Loop() {
				ix.on = true
				t0 := time.Now()
				if err := h.Pass(ctx); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				ix.on = false
				if err := h.Pass(ctx); err != nil {
					b.Fatal(err)
				}
				hold, release = hold+t1.Sub(t0), release+time.Since(t1)
				if st := h.Status(); st.Held != 0 || st.Failed != 0 {
					b.Fatalf("after the release: %+v", st)
				}
			}
			r1, _ := p.Stats()
			iters := float64(b.N)
			b.ReportMetric(float64(hold.Microseconds())/iters/n/1000, "ms/hold")
			b.ReportMetric(float64(release.Microseconds())/iters/n/1000, "ms/release")
			b.ReportMetric(float64(r1-r0)/iters/n, "requests/ref")
		})
	}
}

// presentStore says every referenced object exists (the generated store holds only `_metadata`).
type presentStore struct{ store.Store }

func (s presentStore) Stat(ctx context.Context, p string) (store.ObjectInfo, error) {
	oi, err := s.Store.Stat(ctx, p)
	if errors.Is(err, fs.ErrNotExist) && filepath.Base(p) != "_metadata" {
		return store.ObjectInfo{Path: p, Size: 1, ModTime: time.Now().Add(-48 * time.Hour)}, nil
	}
	return oi, err
}

// plainIndex hides the index's ProtectedVersion: every pass scans.
type plainIndex struct{ ix *refindex.Index }

func (p plainIndex) ProtectedKeys(ctx context.Context, fn func(string, refindex.ProtectedKind) bool) error {
	return p.ix.ProtectedKeys(ctx, fn)
}
func (p plainIndex) Decide(ctx context.Context, k string, op verdict.Op, seen ...store.ObjectInfo) verdict.Decision {
	return p.ix.Decide(ctx, k, op, seen...)
}

// memServer answers HEADs and holds in-process (one version per key).
type memServer struct{}

func (s *memServer) Head(_ context.Context, rel string) (s3client.Object, error) {
	return s3client.Object{Key: rel, Size: 1, VersionID: "v1"}, nil
}
func (s *memServer) SetLegalHold(context.Context, string, string, bool) error { return nil }
func (s *memServer) Versions(context.Context, string) ([]s3client.Version, error) {
	return nil, nil
}
func (s *memServer) DeleteVersion(context.Context, string, string) error { return nil }

// BenchmarkHoldPassScale: the holder's own cost over a real index of n referenced objects (4
// references each, 250 new per checkpoint), the server in-process: "first" is the pass that holds
// everything (one ledger fsync per batch of 64 keys, as at a mount's first start with --hold), "steady"
// a pass after a sync that found nothing new (skipped: the index version did not move), "rescan" the
// same pass scanning the index and the ledger (after a sync with a new checkpoint).
func BenchmarkHoldPassScale(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("objects=%dk", n/1000), func(b *testing.B) {
			dir := b.TempDir()
			root := filepath.Join(dir, "store")
			t0 := time.Now()
			lr, err := treegen.Large(root, treegen.LargeSpec{Jobs: 1, CheckpointsPerJob: n / 250, RefsPerCheckpoint: 1000, NewPerCheckpoint: 250, Seed: "holdbench"}, time.Now().Add(-48*time.Hour))
			if err != nil {
				b.Fatal(err)
			}
			ls, err := localstore.New(root)
			if err != nil {
				b.Fatal(err)
			}
			m, err := pathnorm.ParseMapping("file:" + root + "=")
			if err != nil {
				b.Fatal(err)
			}
			ix, err := refindex.Open(filepath.Join(dir, "index"), presentStore{ls}, refindex.DefaultPolicy(), refindex.WithLogger(quiet), refindex.WithPathMap([]pathnorm.Mapping{m}, ""))
			if err != nil {
				b.Fatal(err)
			}
			defer ix.Close()
			if err := ix.Sync(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.Logf("index of %d referenced objects in %s", lr.Distinct, time.Since(t0).Round(time.Second))
			ledger, err := hold.OpenLedger(filepath.Join(dir, "holds"))
			if err != nil {
				b.Fatal(err)
			}
			defer ledger.Close()
			h := s3hold.New(s3hold.Options{Server: &memServer{}, Hold: hold.Options{Index: ix, Ledger: ledger, Logger: quiet, Mode: hold.ModeRequired}})
			t1 := time.Now()
			if err := h.Pass(context.Background()); err != nil {
				b.Fatal(err)
			}
			first := time.Since(t1)
			st := h.Status()
			b.Logf("first pass: %d objects held in %s (%.1f µs per object)", st.Held, first.Round(time.Millisecond), float64(first.Microseconds())/float64(st.Held))
			// steady: passes after syncs that changed nothing (skipped on the index version); rescan:
			// the same pass forced to scan (an index without ProtectedVersion), what a pass after a sync
			// with a new checkpoint costs besides the new keys' requests.
			b.Run("steady", func(b *testing.B) {
				for b.Loop() {
					if err := h.Pass(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
			})
			h2 := s3hold.New(s3hold.Options{Server: &memServer{}, Hold: hold.Options{Index: plainIndex{ix}, Ledger: ledger, Logger: quiet, Mode: hold.ModeRequired}})
			b.Run("rescan", func(b *testing.B) {
				for b.Loop() {
					if err := h2.Pass(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				if st := h2.Status(); st.Held != lr.Distinct && st.Held < lr.Distinct {
					b.Fatalf("rescan: %+v", st)
				}
			})
		})
	}
}
