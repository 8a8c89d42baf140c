// Package pace spaces out the requests of background work (the mount's loss check) so that it costs the
// store a bounded request rate and gives way to the mount's own traffic.
//
// A Limiter hands out one slot per request, 1/Rate apart (a token bucket of depth one: no burst after
// an idle time, so the rate holds over any window longer than a slot). While the foreground is busy
// (Busy: the mount sent requests of its own lately), slots are Yield times further apart and at most
// BusyInflight background requests are in flight: on a server slower than the rate (a listing page that
// takes a second to produce) the spacing alone would still keep many of them under way. The background
// work slows down but never stops, so a round that cannot keep up shows as a long round (its caller
// warns), never as a silent gap.
package pace

import (
	"context"
	"sync"
	"time"
)

// Clock is the limiter's time source (the real one in the daemon, a fake one in tests).
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx is done (then it returns ctx's error).
	Sleep(ctx context.Context, d time.Duration) error
}

// Real is the wall clock.
type Real struct{}

// Now is time.Now.
func (Real) Now() time.Time { return time.Now() }

// Sleep waits d or until ctx is done.
func (Real) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DefaultYield is how many times further apart the slots are while the foreground is busy.
const DefaultYield = 5

// Limiter paces requests. The zero value, and a nil *Limiter, let every request through at once.
type Limiter struct {
	// Rate is the requests per second (0: unpaced).
	Rate float64
	// Yield stretches the slots while Busy says the foreground is busy (0: DefaultYield).
	Yield float64
	// Busy, when set, reports whether the foreground is busy at now (the mount's own S3 requests,
	// counted by its client). It is called under the limiter's lock.
	Busy func(now time.Time) bool
	// BusyInflight bounds the background requests in flight while the foreground is busy (0: 1).
	BusyInflight int
	// Clock is the time source (nil: the wall clock).
	Clock Clock

	mu       sync.Mutex
	next     time.Time // the earliest time of the next slot
	sent     int64     // slots handed out
	inflight int       // slots handed out and not released
}

// busyPoll is how often a request held back by BusyInflight looks again.
const busyPoll = 20 * time.Millisecond

// Wait blocks until the caller may send one request, or ctx is done (it then returns ctx's error and
// the slot is not used). The caller calls release once the request has ended.
func (l *Limiter) Wait(ctx context.Context) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if l == nil || l.Rate <= 0 {
		return func() {}, nil
	}
	clk := l.clock()
	for {
		l.mu.Lock()
		now := clk.Now()
		gap := time.Duration(float64(time.Second) / l.Rate)
		if l.Busy != nil && l.Busy(now) {
			if l.inflight >= max(1, l.BusyInflight) {
				l.mu.Unlock()
				if err := clk.Sleep(ctx, busyPoll); err != nil {
					return nil, err
				}
				continue
			}
			y := l.Yield
			if y <= 0 {
				y = DefaultYield
			}
			gap = time.Duration(float64(gap) * y)
		}
		at := l.next
		if at.Before(now) {
			at = now // an idle limiter gives no burst: the slot is now, the next one a gap later
		}
		l.next = at.Add(gap)
		l.sent++
		l.inflight++
		l.mu.Unlock()
		var once sync.Once
		release = func() {
			once.Do(func() {
				l.mu.Lock()
				l.inflight--
				l.mu.Unlock()
			})
		}
		if err := clk.Sleep(ctx, at.Sub(now)); err != nil {
			release()
			return nil, err
		}
		return release, nil
	}
}

// SetBusy changes Yield and BusyInflight while the limiter is in use (the daemon fits the busy pace
// to the store's size after each pass).
func (l *Limiter) SetBusy(yield float64, inflight int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Yield, l.BusyInflight = yield, inflight
}

// Sent is the number of slots handed out (the requests paced so far).
func (l *Limiter) Sent() int64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent
}

// RoundTime is how long n requests take at the limiter's rate when the foreground is idle (0 unpaced).
func (l *Limiter) RoundTime(n int) time.Duration {
	if l == nil || l.Rate <= 0 || n <= 0 {
		return 0
	}
	return time.Duration(float64(n) / l.Rate * float64(time.Second))
}

func (l *Limiter) clock() Clock {
	if l.Clock != nil {
		return l.Clock
	}
	return Real{}
}
