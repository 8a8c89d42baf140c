package s3guardd_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// skewedClock is an S3 service's clock running off this host's by off (negative: behind).
type skewedClock struct{ off atomic.Int64 }

func (c *skewedClock) Now() time.Time                  { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// TestRedteamServerClockBehind: the S3 service's clock runs 2 h behind the host's (a bastion host or
// an on-premises RGW whose NTP broke), more than --grace (1 h). An object Flink wrote a moment ago has a
// LastModified 2 h old by the host's clock; the mount must still judge it young (the service stamps
// Date with the same clock) and refuse its unlink, while an object old by the service's clock goes.
func TestRedteamServerClockBehind(t *testing.T) {
	s3server.RequireFUSE(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := &skewedClock{}
	clock.off.Store(int64(-4 * time.Hour))
	h := gofakes3.New(s3mem.New(s3mem.WithTimeSource(clock)), gofakes3.WithTimeSource(clock), gofakes3.WithTimeSkewLimit(0)).Server()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clock.Now().UTC().Format(http.TimeFormat)) // the service's clock, as a real one sends
		h.ServeHTTP(w, r)
	}))
	defer hs.Close()
	cfg := s3server.FakeConfig(hs.URL, 2)
	c := s3server.NewBucket(t, cfg, s3client.Location{Bucket: "bkt", Prefix: "flink/"})
	// Written when the service's clock read 4 h ago: 2 h old by it once it runs 2 h behind.
	if _, err := c.Put(ctx, "job/chk-1/old.sst", strings.NewReader("old"), 3, s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	clock.off.Store(int64(-2 * time.Hour))
	if _, err := c.Put(ctx, "job/chk-2/young.sst", strings.NewReader("young"), 5, s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	mnt := mountFake(t, cfg)
	if out, err := exec.Command("rm", filepath.Join(mnt, "job/chk-2/young.sst")).CombinedOutput(); err == nil || !strings.Contains(string(out), "not permitted") {
		t.Errorf("rm of an object written a moment ago by the service's clock (2 h behind the host's): %v %s, want EPERM (in grace)", err, out)
	}
	if out, err := exec.Command("rm", filepath.Join(mnt, "job/chk-1/old.sst")).CombinedOutput(); err != nil {
		t.Errorf("rm of an object 2 h old by the service's clock: %v %s", err, out)
	}
	b := make([]byte, 8)
	if n, err := c.ReadAt(ctx, "job/chk-2/young.sst", b, 0, ""); string(b[:n]) != "young" {
		t.Errorf("young object lost: %q %v", b[:n], err)
	}
}
