package pace

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/pace/pacetest"
)

// TestLimiterPaces: n requests take (n-1)/Rate, none sooner; while the foreground is busy the slots are
// Yield times further apart, and the pace comes back once it is idle; an idle limiter gives no burst.
func TestLimiterPaces(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rate     float64
		yield    float64
		busy     func(i int) bool // for the i-th request
		n        int
		wantTook time.Duration
	}{
		{"idle foreground", 50, 0, nil, 101, 2 * time.Second},
		{"busy foreground, default yield", 50, 0, func(int) bool { return true }, 101, 10 * time.Second},
		{"busy foreground, yield 2", 10, 2, func(int) bool { return true }, 11, 2 * time.Second},
		{"busy for the first half", 10, 4, func(i int) bool { return i < 5 }, 11, 5*400*time.Millisecond + 5*100*time.Millisecond},
		{"unpaced", 0, 0, func(int) bool { return true }, 1000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := pacetest.NewClock(time.Unix(1e9, 0))
			i := 0
			l := &Limiter{Rate: tc.rate, Yield: tc.yield, Clock: clk}
			if tc.busy != nil {
				l.Busy = func(time.Time) bool { return tc.busy(i) }
			}
			t0 := clk.Now()
			var last time.Time
			for i = 0; i < tc.n; i++ {
				release, err := l.Wait(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				release()
				last = clk.Now()
			}
			if took := last.Sub(t0); took != tc.wantTook {
				t.Errorf("%d requests took %s, want %s", tc.n, took, tc.wantTook)
			}
			if tc.rate > 0 && l.Sent() != int64(tc.n) {
				t.Errorf("Sent() = %d, want %d", l.Sent(), tc.n)
			}
		})
	}
}

// TestLimiterNoBurstAfterIdle: after a long idle time the next two requests are still a slot apart.
func TestLimiterNoBurstAfterIdle(t *testing.T) {
	clk := pacetest.NewClock(time.Unix(1e9, 0))
	l := &Limiter{Rate: 10, Clock: clk}
	ctx := context.Background()
	_, _ = l.Wait(ctx)
	_ = clk.Sleep(ctx, time.Hour)
	t0 := clk.Now()
	_, _ = l.Wait(ctx)
	_, _ = l.Wait(ctx)
	if d := clk.Now().Sub(t0); d != 100*time.Millisecond {
		t.Fatalf("two requests after an idle hour %s apart, want 100ms", d)
	}
}

// TestLimiterRealClockConcurrent: with the wall clock, 16 callers at once get their slots a gap apart
// (the limiter is shared, not per caller), and a cancelled context ends a wait at once.
func TestLimiterRealClockConcurrent(t *testing.T) {
	l := &Limiter{Rate: 200}
	t0 := time.Now()
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				release, err := l.Wait(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				release()
			}
		}()
	}
	wg.Wait()
	if d := time.Since(t0); d < 63*5*time.Millisecond {
		t.Fatalf("64 requests at 200/s took %s, want at least 315ms", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	slow := &Limiter{Rate: 0.01}
	_, _ = slow.Wait(ctx) // the first slot is now
	cancel()
	t1 := time.Now()
	if _, err := slow.Wait(ctx); err == nil || time.Since(t1) > time.Second {
		t.Fatalf("a cancelled wait returned %v after %s", err, time.Since(t1))
	}
}

// TestLimiterBusyInflight: while the foreground is busy a request waits until the one in flight is
// released (BusyInflight 1); while it is idle requests overlap freely.
func TestLimiterBusyInflight(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	busy := true
	l := &Limiter{Rate: 1000, Busy: func(time.Time) bool { mu.Lock(); defer mu.Unlock(); return busy }}
	first, err := l.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan func())
	go func() {
		r, err := l.Wait(ctx)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	select {
	case <-done:
		t.Fatal("a second request went out while the foreground was busy and one was in flight")
	case <-time.After(200 * time.Millisecond):
	}
	first()
	first() // a second release counts once
	var second func()
	select {
	case second = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the held request did not go out after the one in flight was released")
	}
	mu.Lock()
	busy = false
	mu.Unlock()
	third, err := l.Wait(ctx) // idle: beside the second, not after it
	if err != nil {
		t.Fatal(err)
	}
	second()
	third()
	ctx2, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	mu.Lock()
	busy = true
	mu.Unlock()
	held, _ := l.Wait(ctx)
	if _, err := l.Wait(ctx2); err == nil {
		t.Fatal("a held request did not end with its context")
	}
	held()
}
