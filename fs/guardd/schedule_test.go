package guardd

import (
	"context"
	"testing"
	"time"
)

// fakeClock moves only when the loop waits (After) or a fake sync takes its time.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time { return c.t }
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.t = c.t.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.t
	return ch
}

// TestSyncLoopLagBound drives the daemon's sync loop with syncs of given durations and checks the index
// lag it leaves (the time since the start of the last complete sync, as the index counts it): it must
// never exceed --max-staleness because the loop waited a full interval after a long sync had ended.
func TestSyncLoopLagBound(t *testing.T) {
	const interval = 30 * time.Second
	tests := []struct {
		name  string
		first time.Duration   // the initial build, before the loop starts
		syncs []time.Duration // the loop's syncs, in order
		// maxLag is the largest lag allowed just before each loop sync completes.
		maxLag time.Duration
	}{
		{name: "long first build then fast syncs", first: 283 * time.Second,
			syncs: []time.Duration{7 * time.Second, 7 * time.Second, 7 * time.Second}, maxLag: 290 * time.Second},
		{name: "fast syncs keep the interval", first: time.Second,
			syncs: []time.Duration{time.Second, time.Second, time.Second}, maxLag: interval + time.Second},
		{name: "every sync longer than the interval", first: 100 * time.Second,
			syncs: []time.Duration{90 * time.Second, 80 * time.Second, 95 * time.Second}, maxLag: 190 * time.Second},
		{name: "sync exactly one interval", first: interval,
			syncs: []time.Duration{interval, interval}, maxLag: 2 * interval},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			start := clk.t
			clk.t = clk.t.Add(tc.first) // the initial build ran
			prevStart, prevEnd := start, clk.t
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			n := 0
			l := &syncLoop{interval: interval, clk: clk, last: start, sync: func(context.Context) {
				s := clk.t
				if s.Before(prevEnd) {
					t.Fatalf("sync %d started at %v, before the previous one ended at %v", n, s, prevEnd)
				}
				// A sync is due an interval after the previous one started, or at once when that has passed.
				want := prevStart.Add(interval)
				if want.Before(prevEnd) {
					want = prevEnd
				}
				if !s.Equal(want) {
					t.Errorf("sync %d started %v after the previous one ended; want %v", n, s.Sub(prevEnd), want.Sub(prevEnd))
				}
				clk.t = clk.t.Add(tc.syncs[n])
				if lag := clk.t.Sub(prevStart); lag > tc.maxLag {
					t.Errorf("sync %d: index lag reached %v before it completed; want at most %v", n, lag, tc.maxLag)
				}
				prevStart, prevEnd = s, clk.t
				n++
				if n == len(tc.syncs) {
					cancel()
				}
			}}
			if err := l.run(ctx, make(chan struct{})); err != context.Canceled {
				t.Fatalf("run returned %v, want context.Canceled", err)
			}
			if n != len(tc.syncs) {
				t.Fatalf("ran %d syncs, want %d", n, len(tc.syncs))
			}
		})
	}
}

// TestSyncLoopStops checks that an unmount or a signal already asked for wins over a sync that is due.
func TestSyncLoopStops(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cancel  bool
		unmount bool
		want    error
	}{
		{name: "unmounted", unmount: true, want: nil},
		{name: "signal", cancel: true, want: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(0, 0)}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			gone := make(chan struct{})
			if tc.cancel {
				cancel()
			}
			if tc.unmount {
				close(gone)
			}
			l := &syncLoop{interval: time.Second, clk: clk, last: time.Unix(-100, 0), sync: func(context.Context) {
				t.Error("synced after the stop was asked for")
			}}
			if err := l.run(ctx, gone); err != tc.want {
				t.Fatalf("run returned %v, want %v", err, tc.want)
			}
		})
	}
}
