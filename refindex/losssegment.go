package refindex

import (
	"context"
	"fmt"
)

// A pass of the loss check runs segment by segment (LossChecker.Check): each segment's requests are
// launched beside the previous one's and its answer is taken before the next is planned.

// segmentCheck is a segment of a pass whose requests are under way (launch) and its answer.
type segmentCheck struct {
	units    []lossUnit
	alone    []string
	keys     int // referenced keys of the units
	done     chan struct{}
	gone     map[string]bool
	requests int
	err      error
}

// launch starts the requests of a segment's units and known losses (alone) and returns at once.
func (lc *LossChecker) launch(ctx context.Context, units []lossUnit, alone []string, sem chan struct{}, rt *requestTimes) *segmentCheck {
	c := &segmentCheck{units: units, alone: alone, done: make(chan struct{})}
	for _, u := range units {
		c.keys += len(u.keys)
	}
	go func() {
		defer close(c.done)
		c.gone, c.requests, c.err = lc.ix.checkUnits(ctx, units, alone, sem, lc.o.Pacer, lc.o.Evidence, rt)
	}()
	return c
}

// finish waits for a launched segment and takes its answer into rep and the known losses.
func (lc *LossChecker) finish(rep *LossReport, c *segmentCheck) error {
	<-c.done
	if c.err != nil {
		return c.err
	}
	rep.Requests += c.requests
	checked := c.alone
	for _, u := range c.units {
		checked = append(checked, u.keys...)
	}
	rep.Checked += len(checked)
	if len(c.alone) > 0 {
		rep.Checked -= len(c.alone) - countNotIn(c.alone, c.units) // a known loss in its unit counts once
	}
	for _, k := range checked {
		if c.gone[k] {
			if !lc.missing[k] {
				lc.missing[k] = true
				lc.since[k] = rep.Time
			}
		} else {
			delete(lc.missing, k)
			delete(lc.since, k)
		}
	}
	return nil
}

// countRestStretch is how many keys the count of a rotation reads in one read transaction: a snapshot
// held for the whole table (tens of millions of entries) would pin the memtables it reads all along.
const countRestStretch = 1 << 20

// countRest hands count every referenced key after `after`, a stretch of keys per read transaction.
func (lc *LossChecker) countRest(ctx context.Context, after string, count func([]byte)) error {
	for {
		v, err := lc.ix.acquire()
		if err != nil {
			return err
		}
		n := 0
		var last []byte
		done, err := scanReferenced(ctx, v.snap.txn, v.st, after, func(k []byte) bool {
			if n == countRestStretch {
				return false
			}
			n++
			count(k)
			last = append(last[:0], k...)
			return true
		})
		if n > 0 {
			after = string(last)
		}
		v.release()
		lc.ix.releaseTablePages()
		if err != nil {
			return fmt.Errorf("loss check: count the rotation: %w", err)
		}
		if done {
			return nil
		}
	}
}

// countNotIn counts the keys of ks that no unit of units holds.
func countNotIn(ks []string, units []lossUnit) int {
	in := map[string]bool{}
	for _, u := range units {
		for _, k := range u.keys {
			in[k] = true
		}
	}
	n := 0
	for _, k := range ks {
		if !in[k] {
			n++
		}
	}
	return n
}
