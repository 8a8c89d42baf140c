package integration

import (
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestFleetS3Cost measures, at 20 ms per request (the fault proxy's latency), the requests a --shared
// mount sends to the shared state per sync, and the lag from a pin through one mount to protection on
// another; it fails when a sync at rest costs more than 2 such requests (LIST of the pins, PUT of the
// heartbeat) or the lag exceeds one sync interval plus a sync.
func TestFleetS3Cost(t *testing.T) {
	e := s3Start(t)
	tr := e.tree(t, incident{"IncidentTwo", treegen.IncidentTwo}, s3Root)
	e.proxy.SetLatency(20 * time.Millisecond)
	const interval = 3 * time.Second
	var addrs []string
	var ps []*mntProc
	for range 2 {
		a := freePort(t)
		addrs = append(addrs, a)
		ps = append(ps, mntStart(t, s3Root, "", e.mountArgs("--shared", "--sync-interval", interval.String(), "--metrics-addr", a)...))
	}
	syncs := func() float64 {
		total := 0.0
		for _, a := range addrs {
			v, _ := metricValue(mntHTTPGet(t, "http://"+a+"/metrics"), "ckguard_sync_duration_seconds_count")
			total += v
		}
		return total
	}
	var mu sync.Mutex
	ops := map[string]int{}
	e.proxy.SetTrace(func(op, target string, _ time.Time, _ time.Duration) {
		if strings.Contains(target, ".ckguard/") || strings.Contains(target, ".ckguard%2F") {
			mu.Lock()
			ops[op]++
			mu.Unlock()
		}
	})
	s0 := syncs()
	time.Sleep(4 * interval)
	s1 := syncs()
	e.proxy.SetTrace(nil)
	mu.Lock()
	total := 0
	var parts []string
	for op, n := range ops {
		total += n
		parts = append(parts, op+"="+strconv.Itoa(n))
	}
	mu.Unlock()
	sort.Strings(parts)
	if s1 <= s0 {
		t.Fatalf("no sync in %s", 4*interval)
	}
	per := float64(total) / (s1 - s0)
	t.Logf("shared state at rest: %d requests over %.0f syncs of two mounts = %.2f per sync (%s), 20 ms each", total, s1-s0, per, strings.Join(parts, " "))
	if per > 2.5 {
		t.Errorf("%.2f shared-state requests per sync at rest, want at most 2", per)
	}

	state := func(p *mntProc, key string) string {
		buf := make([]byte, 256)
		n, err := syscall.Getxattr(p.m(key), "user.ckguard.state", buf)
		if err != nil {
			t.Fatalf("state of %s: %v", key, err)
		}
		return string(buf[:n])
	}
	var target string
	for m := range tr.Live {
		if state(ps[0], m) == "deletable" {
			target = m
			break
		}
	}
	if target == "" {
		t.Fatal("no deletable checkpoint")
	}
	for round := range 3 {
		start := time.Now()
		if out, code := ps[0].cli(append([]string{"pin", path.Dir(target)}, e.mountArgs()...)...); code != 0 {
			t.Fatalf("pin: %s", out)
		}
		pinned := time.Since(start)
		for state(ps[1], target) == "deletable" {
			if time.Since(start) > 2*interval+10*time.Second {
				t.Fatalf("not protected on mount 2 after %s", time.Since(start))
			}
			time.Sleep(20 * time.Millisecond)
		}
		lag := time.Since(start)
		t.Logf("round %d: pin command took %s; protected on mount 2 %s after it started (sync interval %s, 20 ms per request)", round+1, pinned.Round(time.Millisecond), lag.Round(time.Millisecond), interval)
		if lag > interval+5*time.Second {
			t.Errorf("lag %s above one sync interval plus a sync", lag)
		}
		if out, code := ps[0].cli(append([]string{"unpin", path.Dir(target)}, e.mountArgs()...)...); code != 0 {
			t.Fatalf("unpin: %s", out)
		}
		for state(ps[1], target) != "deletable" {
			if time.Since(start) > 4*interval+20*time.Second {
				t.Fatal("not released on mount 2")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
