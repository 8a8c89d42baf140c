package s3shared_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/store/shared/sharedtest"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3shared"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestConformanceVersity: the CAS suite on versitygw (conditional PutObject with If-None-Match and
// If-Match honoured), each subtest in its own prefix.
func TestConformanceVersity(t *testing.T) {
	srv := s3server.Start(t)
	srv.Bucket(t, "bkt")
	var n atomic.Int64
	sharedtest.Run(t, func(t *testing.T) shared.CAS {
		c, err := s3client.New(context.Background(), srv.Config(), s3client.Location{Bucket: "bkt", Prefix: fmt.Sprintf("store%d/", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		return s3shared.New(c)
	})
}

// TestFaultsUnderConcurrency: writers racing on one record through the fault proxy, whose PutObjects
// are answered 503 before or after the server applied them (the client's retries then meet 412 for
// their own write), and some time out while the server still applies them: no update lost or applied
// twice.
func TestFaultsUnderConcurrency(t *testing.T) {
	srv := s3server.Start(t)
	srv.Bucket(t, "bkt")
	proxy := s3server.NewProxy(t, srv.Endpoint)
	cfg := srv.Config()
	cfg.Endpoint = proxy.URL
	cfg.OpTimeout = 2 * time.Second
	open := func(prefix string) shared.CAS {
		c, err := s3client.New(context.Background(), cfg, s3client.Location{Bucket: "bkt", Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return s3shared.New(c)
	}

	t.Run("503", func(t *testing.T) {
		proxy.SetFailRate(0.15)
		defer proxy.SetFailRate(0)
		_, f0 := proxy.Stats()
		sharedtest.CheckUpdates(t, open("f503/"), 4, 6)
		_, f1 := proxy.Stats()
		if f1 == f0 {
			t.Fatal("the proxy failed no request")
		}
		t.Logf("%d requests answered 503", f1-f0)
	})
	t.Run("503AfterApplied", func(t *testing.T) {
		c := open("applied/")
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Add(1)
		go func() { // keep arming an applied failure of the next PutObject while the writers run
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(15 * time.Millisecond):
					proxy.FailNext("PutObject", 1, true)
				}
			}
		}()
		_, f0 := proxy.Stats()
		sharedtest.CheckUpdates(t, c, 4, 6)
		_, f1 := proxy.Stats()
		t.Logf("%d PutObjects applied and answered 503", f1-f0)
		if f1 == f0 {
			t.Fatal("the proxy failed no request")
		}
		close(stop)
		wg.Wait()
		proxy.FailNext("PutObject", 0, false)
	})
	t.Run("Timeouts", func(t *testing.T) {
		cfg := cfg
		cfg.OpTimeout = 150 * time.Millisecond
		cfg.MaxAttempts = 1
		// Requests arriving in a slow phase outlive their timeout, the others are answered: the phases
		// alternate while the writers run, so timeouts happen whatever the machine's speed.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for slow := true; ; slow = !slow {
				if slow {
					proxy.SetLatency(300 * time.Millisecond)
				} else {
					proxy.SetLatency(0)
				}
				select {
				case <-stop:
					return
				case <-time.After(40 * time.Millisecond):
				}
			}
		}()
		defer func() { close(stop); wg.Wait(); proxy.SetLatency(0) }()
		c, err := s3client.New(context.Background(), cfg, s3client.Location{Bucket: "bkt", Prefix: "timeouts/"})
		if err != nil {
			t.Fatal(err)
		}
		var timeouts atomic.Int64
		sharedtest.CheckUpdates(t, countErrs{s3shared.New(c), &timeouts}, 3, 5)
		t.Logf("%d requests timed out", timeouts.Load())
		if timeouts.Load() == 0 {
			t.Fatal("no request timed out")
		}
	})
}

// countErrs counts the CAS calls that failed other than by a conflict.
type countErrs struct {
	shared.CAS
	n *atomic.Int64
}

// Get retries a read that failed (counted): a read changes nothing, and the check's final read of the
// record must not fail on a slow phase of the proxy.
func (c countErrs) Get(ctx context.Context, name string) ([]byte, string, error) {
	for attempt := 0; ; attempt++ {
		b, v, err := c.CAS.Get(ctx, name)
		if err == nil || errors.Is(err, fs.ErrNotExist) || attempt == 20 || ctx.Err() != nil {
			return b, v, err
		}
		c.n.Add(1)
	}
}

func (c countErrs) Put(ctx context.Context, name string, data []byte, prev string) (string, error) {
	v, err := c.CAS.Put(ctx, name, data, prev)
	if err != nil && !errors.Is(err, shared.ErrConflict) {
		c.n.Add(1)
	}
	return v, err
}
