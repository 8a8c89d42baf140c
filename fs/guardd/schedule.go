package guardd

import (
	"context"
	"time"
)

// clock is the sync loop's time source (the real one in the daemon, a fake one in tests).
type clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// syncLoop re-syncs the index every interval, counted from the START of the previous sync, the first one
// (the initial build, before the mount served anything) included.
//
// Invariant: the index's lag counts from the start of its last complete listing (what it saw of the
// oldest part of the store), so a sync that took D leaves a lag of D when it ends. Counting the wait from
// the sync's end would add D to every cycle: after a 283 s first build and a 30 s interval the lag
// reached 313 s before the next sync even began, past a 300 s --max-staleness, and every deletion was
// refused as stale. Counting from its start, a sync that took longer than the interval is followed by the
// next one at once, and the lag stays within interval + the next sync's duration (or, for back-to-back
// slow syncs, the two syncs' durations), the least a loop that never overlaps syncs can give.
type syncLoop struct {
	interval time.Duration
	clk      clock
	// sync runs one sync (and whatever follows it in the same cycle: loss check, quarantine purge).
	sync func(ctx context.Context)
	// last is when the previous sync started.
	last time.Time
}

// wait is how long to wait before the next sync: zero when the previous one started an interval or more
// ago.
func (l *syncLoop) wait() time.Duration {
	d := l.last.Add(l.interval).Sub(l.clk.Now())
	if d < 0 {
		return 0
	}
	return d
}

// run syncs until ctx is cancelled (it returns ctx's error) or gone is closed (it returns nil).
func (l *syncLoop) run(ctx context.Context, gone <-chan struct{}) error {
	for {
		// A stop already asked for wins over a sync that is due: no new sync after a signal or an unmount.
		select {
		case <-gone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		select {
		case <-gone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-l.clk.After(l.wait()):
			l.last = l.clk.Now()
			l.sync(ctx)
		}
	}
}
