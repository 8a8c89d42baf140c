// Package pacetest has the fake clock of the tests of paced work (pace.Limiter and its users).
package pacetest

import (
	"context"
	"sync"
	"time"
)

// Clock is a pace.Clock that advances only by what its callers sleep: Sleep moves the time forward
// by d at once, so a paced run takes no wall time and its gaps are exact.
type Clock struct {
	mu    sync.Mutex
	now   time.Time
	slept time.Duration
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now is the start plus everything slept.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep advances the clock by d (nothing for d <= 0) and returns ctx's error.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	if d > 0 {
		c.now = c.now.Add(d)
		c.slept += d
	}
	c.mu.Unlock()
	return ctx.Err()
}

// Slept is the time slept in all.
func (c *Clock) Slept() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slept
}
