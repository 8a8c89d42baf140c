// Package guarddtest runs a guard daemon (guardd.Serve over any backend) for tests of the packages that
// build one: localbackend/localguardd for local stores (the tests of fs/guardd run over it),
// s3backend/s3guardd for S3, and checks they share.
package guarddtest

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// Start runs run(ctx, cfg) in the background and returns once the mount is ready (cfg.Ready, if set, is
// still called). stop cancels the daemon, checks that it stopped cleanly and detaches anything left on
// the mountpoint; it runs at cleanup too, and more calls do nothing.
func Start(t testing.TB, cfg guardd.Config, run func(context.Context, guardd.Config) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	userReady := cfg.Ready
	cfg.Ready = func(m *guardd.Mounted) {
		if userReady != nil {
			userReady(m)
		}
		close(ready)
	}
	go func() { done <- run(ctx, cfg) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("daemon stopped: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("mount not ready")
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("daemon: %v", err)
			}
			_ = exec.Command("fusermount3", "-uz", cfg.Mountpoint).Run()
		})
	}
	t.Cleanup(stop)
	return stop
}

// RestoreMetadataLive restores, through the mount's quarantine service q, the staged entry among
// entries whose path ends in metaSuffix (a checkpoint's `_metadata`), and checks through the mount's
// control socket ctlSock that the checkpoint is live again at once: verify reports it broken, missing
// the files it references that are still staged. It returns the entry and those missing keys.
func RestoreMetadataLive(t testing.TB, ctx context.Context, q quarantine.Service, ctlSock string, entries []quarantine.Entry, metaSuffix string) (quarantine.Entry, map[string]bool) {
	t.Helper()
	var meta quarantine.Entry
	for _, e := range entries {
		if strings.HasSuffix(e.Path, metaSuffix) {
			meta = e
		}
	}
	if meta.ID == "" {
		t.Fatalf("%s was not staged: %+v", metaSuffix, entries)
	}
	if rr, err := q.Restore(ctx, []string{meta.ID}); err != nil || len(rr.Restored) != 1 {
		t.Fatalf("restore %s: %+v %v", meta.Path, rr, err)
	}
	referenced := map[string]bool{}
	b := Broken(t, ctx, ctlSock, meta.Path)
	if b != nil {
		for _, m := range b.Missing {
			referenced[m] = true
		}
	}
	if len(referenced) == 0 {
		t.Fatalf("verify after restoring %s alone: %+v; want it live and missing its staged files", meta.Path, b)
	}
	return meta, referenced
}

// Broken runs verify through the mount's control socket ctlSock and returns what it reports of the
// checkpoint whose `_metadata` is metaPath: nil when it is not broken.
func Broken(t testing.TB, ctx context.Context, ctlSock, metaPath string) *refindex.BrokenCheckpoint {
	t.Helper()
	qr, err := control.DialQuerier(ctlSock)
	if err != nil {
		t.Fatal(err)
	}
	defer qr.Close()
	v, err := qr.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range v.Broken {
		if b.Metadata == metaPath {
			return &b
		}
	}
	return nil
}

// Clock is a fake clock a test moves (Config.QuarantineNow: TTL tests never wait a day).
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts a Clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// Metrics reads the metrics endpoint at addr (host:port): each series, named with its labels as
// exposed (`ckguard_refusals_total{op="unlink",reason="referenced"}`), to its value.
func Metrics(t testing.TB, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		l := sc.Text()
		i := strings.LastIndexByte(l, ' ')
		if i < 0 || strings.HasPrefix(l, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
			got[l[:i]] = v
		}
	}
	return got
}

// ReferencesOnly is the default policy with no grace, no active window and no savepoint kept: only
// references (and pins) keep a file, so a test decides by what the index knows alone.
func ReferencesOnly() refindex.Policy {
	pol := refindex.DefaultPolicy()
	pol.Grace, pol.ActiveWindow, pol.SavepointKeepNewest, pol.SavepointRetention = 0, 0, false, 0
	return pol
}
