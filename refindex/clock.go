package refindex

import (
	"context"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
)

// minClockSkew is the smallest difference between the store's clock and this host's that the index
// acts on. Smaller ones are within the measurement's error (S3's Date header has whole seconds).
const minClockSkew = 2 * time.Second

// readStoreClock compares the store's clock (store.Clock) with this host's, at the start of every
// sync and rebuild. Grace and the active window measure ages of store modification times; when the
// store's clock is behind this host's, files look older here than they are, and a file of an
// in-flight checkpoint could leave its grace period early. The index then measures those ages by the
// store's clock. A store clock ahead of this host's only makes files look younger (protected longer),
// so it is left alone: the correction can only ever extend protection.
func (ix *Index) readStoreClock(ctx context.Context) {
	c, ok := ix.st.(store.Clock)
	if !ok {
		return
	}
	storeNow, err := c.StoreTime(ctx)
	// Read after the store answered: storeNow (rounded down) minus this reading never overstates the
	// store's clock relative to this host's.
	hostNow := time.Now()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err != nil {
		// Once per failure, not at every sync (a read-only store fails every time).
		if !ix.clockFailed {
			ix.log.Warn("cannot read the store's clock; grace keeps the last correction", "store", ix.st.Root(), "correction", ix.skew, "err", err)
		}
		ix.clockFailed = true
		return
	}
	ix.clockFailed = false
	diff := storeNow.Sub(hostNow)
	skew := time.Duration(0)
	if diff < -minClockSkew {
		skew = diff.Truncate(time.Millisecond)
	}
	ahead := diff > minClockSkew
	if d := skew - ix.skew; d > minClockSkew || d < -minClockSkew || (skew == 0) != (ix.skew == 0) || ahead != ix.clockAhead {
		switch {
		case skew < 0:
			ix.log.Warn("the store's clock is behind this host's: grace and the active window are measured by the store's clock; fix the clocks (NTP)",
				"store", ix.st.Root(), "behind", (-skew).Round(time.Second))
		case ahead:
			ix.log.Warn("the store's clock is ahead of this host's: its files look younger here and stay protected longer than --grace; fix the clocks (NTP)",
				"store", ix.st.Root(), "ahead", diff.Round(time.Second))
		default:
			ix.log.Info("the store's clock agrees with this host's again", "store", ix.st.Root())
		}
	}
	ix.skew, ix.clockAhead = skew, ahead
}

// now is this host's time (or the policy's clock in tests): the time sync staleness is judged by.
func (v *view) now() time.Time {
	if v.pol.Now != nil {
		return v.pol.Now()
	}
	return time.Now()
}

// storeNow is the time ages of store modification times are measured against: hostNow moved back
// by how far the store's clock is behind (readStoreClock).
func (v *view) storeNow(hostNow time.Time) time.Time { return hostNow.Add(v.skew) }
