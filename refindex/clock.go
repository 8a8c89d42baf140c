package refindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
)

// minClockSkew is the smallest difference between the store's clock and this host's that the index
// acts on. Smaller ones are within the measurement's error (S3's Date header has whole seconds).
const minClockSkew = 2 * time.Second

// clockFile keeps the readings that still hold the correction (clockState) across restarts, beside the
// generations like the pins: a process started after the store's clock was fixed must still correct
// the ages of files stamped while it was behind.
const clockFile = "clock.json"

// clockReading is one reading of how far the store's clock was behind this host's (whole seconds,
// rounded up). Superseded is when the next reading was taken (zero: the latest reading).
type clockReading struct {
	Behind     time.Duration `json:"behind_ns"`
	Superseded time.Time     `json:"superseded,omitzero"`
}

// clockState decides how far ages of store modification times are corrected.
//
// A file's modification time was stamped by the store's clock as it was when the file was written. A
// reading therefore keeps applying after a later one says the clocks agree (the store's clock was
// stepped forward, say): files stamped before the step look older than they are until they are past
// every age rule. So the correction is the largest "behind" among the readings superseded less than
// hold (the longest age rule: grace, active window) ago, and the latest reading. Readings within
// minClockSkew count as 0, and a store clock ahead of this host's is never corrected: files only look
// younger (protected longer).
type clockState struct {
	readings []clockReading // oldest first, Behind strictly decreasing: a reading whose Behind a later one reaches adds nothing
}

// add records a reading taken at now (host time), behind ≥ 0.
func (c *clockState) add(behind time.Duration, now time.Time) {
	if behind < minClockSkew {
		behind = 0
	} else if r := behind % time.Second; r != 0 {
		behind += time.Second - r
	}
	if n := len(c.readings); n > 0 && c.readings[n-1].Superseded.IsZero() {
		c.readings[n-1].Superseded = now
	}
	c.readings = slices.DeleteFunc(c.readings, func(r clockReading) bool { return r.Behind <= behind })
	c.readings = append(c.readings, clockReading{Behind: behind})
}

// expire drops readings superseded more than hold before now.
func (c *clockState) expire(now time.Time, hold time.Duration) {
	c.readings = slices.DeleteFunc(c.readings, func(r clockReading) bool {
		return !r.Superseded.IsZero() && now.Sub(r.Superseded) > hold
	})
}

// behind is the correction: how far ages are measured short.
func (c *clockState) behind() time.Duration {
	var b time.Duration
	for _, r := range c.readings {
		b = max(b, r.Behind)
	}
	return b
}

// persisted returns what is worth saving: the readings that correct anything.
func (c *clockState) persisted() []clockReading {
	return slices.DeleteFunc(slices.Clone(c.readings), func(r clockReading) bool { return r.Behind == 0 })
}

// clockHold is how long a reading keeps applying after the next one: the longest rule that measures
// the age of a store modification time.
func clockHold(p Policy) time.Duration { return max(p.Grace, p.ActiveWindow) }

// loadClock reads clockFile at Open. The latest reading of the previous process counts as superseded
// now: the store's clock may have been fixed while nothing was watching.
func (ix *Index) loadClock() error {
	b, err := os.ReadFile(filepath.Join(ix.dir, clockFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Join(ix.dir, clockFile), err)
	}
	var rs []clockReading
	if err := json.Unmarshal(b, &rs); err != nil {
		return fmt.Errorf("%s: %w (remove the file: it holds how far the store's clock was behind, and the next sync reads the clock again)", filepath.Join(ix.dir, clockFile), err)
	}
	now := time.Now()
	for i := range rs {
		if rs[i].Superseded.IsZero() || rs[i].Superseded.After(now) {
			rs[i].Superseded = now
		}
	}
	ix.mu.clock.readings = rs
	ix.mu.clock.expire(now, clockHold(ix.mu.pol))
	ix.mu.skew = -ix.mu.clock.behind()
	return nil
}

// readStoreClock compares the store's clock (store.Clock) with this host's, at the start of every
// sync and rebuild. Grace and the active window measure ages of store modification times; when the
// store's clock is behind this host's, files look older here than they are, and a file of an
// in-flight checkpoint could leave its grace period early. The index then measures those ages by the
// store's clock (clockState says for how long).
func (ix *Index) readStoreClock(ctx context.Context) {
	c, ok := ix.st.(store.Clock)
	if !ok {
		return
	}
	storeNow, err := c.StoreTime(ctx)
	// Read after the store answered: storeNow (rounded down) minus this reading never overstates the
	// store's clock relative to this host's.
	hostNow := time.Now()
	if err != nil {
		ix.mu.Lock()
		first := !ix.mu.clockFailed
		ix.mu.clockFailed = true
		skew := ix.mu.skew
		ix.mu.Unlock()
		if first { // once per failure, not at every sync (a read-only store fails every time)
			ix.log.Warn("cannot read the store's clock; grace keeps the last correction", "store", ix.st.Root(), "behind", -skew, "err", err)
		}
		return
	}
	diff := storeNow.Sub(hostNow)
	ix.mu.Lock()
	ix.mu.clockFailed = false
	before, wasAhead := -ix.mu.skew, ix.mu.clockAhead
	saved := ix.mu.clock.persisted()
	ix.mu.clock.add(max(-diff, 0), hostNow)
	ix.mu.clock.expire(hostNow, clockHold(ix.mu.pol))
	behind := ix.mu.clock.behind()
	ahead := diff > minClockSkew
	ix.mu.skew, ix.mu.clockAhead = -behind, ahead
	save := ix.mu.clock.persisted()
	ix.mu.Unlock()

	if !slices.Equal(save, saved) {
		var err error
		if len(save) == 0 {
			err = os.Remove(filepath.Join(ix.dir, clockFile))
			if errors.Is(err, fs.ErrNotExist) {
				err = nil
			}
		} else {
			b, _ := json.Marshal(save)
			err = writeFileAtomic(ix.dir, clockFile, b)
		}
		if err != nil {
			ix.log.Warn("cannot save the store clock's readings; a restart forgets them", "index", ix.dir, "err", err)
		}
	}
	switch {
	case behind > 0 && (behind-before > minClockSkew || before-behind > minClockSkew || before == 0):
		ix.log.Warn("the store's clock is or was behind this host's: ages of store files are measured by the store's clock; fix the clocks (NTP)",
			"store", ix.st.Root(), "behind_now", max(-diff, 0).Round(time.Second), "correction", behind)
	case behind == 0 && before > 0:
		ix.log.Info("the store's clock agrees with this host's again; no correction", "store", ix.st.Root())
	}
	if ahead && !wasAhead {
		ix.log.Warn("the store's clock is ahead of this host's: its files look younger here and stay protected longer than --grace; fix the clocks (NTP)",
			"store", ix.st.Root(), "ahead", diff.Round(time.Second))
	}
}

// now is this host's time (or the policy's clock in tests): the time sync staleness is judged by.
func (v *view) now() time.Time {
	if v.pol.Now != nil {
		return v.pol.Now()
	}
	return time.Now()
}

// storeNow is the time ages of store modification times are measured against: hostNow moved back
// by the correction (clockState).
func (v *view) storeNow(hostNow time.Time) time.Time { return hostNow.Add(v.skew) }
