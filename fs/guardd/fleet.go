package guardd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/shared"
)

// fleet is this mount's part in the store's shared state (--shared, package shared): its pins come
// from the area (refindex.WithSharedPins), and after every sync it writes its heartbeat into the
// registry of mounts. Nothing of it runs under a lock of the enforcer or the index.
type fleet struct {
	cas  shared.CAS
	pins *shared.Pins
	log  *slog.Logger
	rec  shared.Mount
	met  *metrics.Metrics

	readOnly bool                // --shared-read-only: nothing is written into the area
	beat     *shared.Heartbeater // used by afterSync only (one sync at a time)

	indexDir string
	// old: the mounts of the registry named as outdated (id → what was said), and when the registry
	// was last read for them (afterSync only).
	old      map[string]string
	oldCheck time.Time

	mu       sync.Mutex
	samples  []refusalSample // refusals counted at each heartbeat, for the last hour's
	stale    bool            // ckguard_shared_state_stale
	lastOK   time.Time       // the last heartbeat written
	hbErrLog bool
	// idTakenUntil: another live mount was found writing this mount's record; until then (two of its
	// sync intervals on, as long as it counts as live) the shared state counts as stale.
	idTakenUntil time.Time
}

type refusalSample struct {
	at    time.Time
	total float64
}

// staleAfter is how old this mount's view of the shared state may get before it counts as stale:
// two sync intervals (one missed sync is not yet worth an alert).
func staleAfter(interval time.Duration) time.Duration { return 2 * interval }

func newFleet(c Config, cas shared.CAS, log *slog.Logger) *fleet {
	host, _ := os.Hostname()
	idx, _ := filepath.Abs(c.IndexDir)
	mnt, _ := filepath.Abs(c.Mountpoint)
	ver := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		ver = bi.Main.Version
	}
	if c.Version != "" {
		ver = c.Version
	}
	f := &fleet{cas: cas, pins: shared.NewPins(cas, host), log: log, beat: shared.NewHeartbeater(cas)}
	f.indexDir = c.IndexDir
	f.rec = shared.Mount{ID: shared.MountID(host, idx), Host: host, Version: ver, Layout: shared.Version, Protocol: shared.Protocol,
		Store: c.StoreDir, Mountpoint: mnt, Index: idx, Started: time.Now().UTC(), SyncInterval: c.SyncInterval.Seconds()}
	return f
}

// register adds the stale gauge to the mount's metrics.
func (f *fleet) register(met *metrics.Metrics) {
	f.met = met
	met.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ckguard_shared_state_stale",
		Help: "1 while this mount's view of the store's shared state (--shared: pins made on any host, the registry of mounts) is older than two sync intervals or its last read or heartbeat failed: a pin made on another host may not protect here yet (while the read fails no checkpoint is retired); 0 when fresh."},
		func() float64 {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.stale {
				return 1
			}
			return 0
		}))
}

// afterSync writes the heartbeat and updates the staleness (called after every sync, outside locks).
func (f *fleet) afterSync(ctx context.Context, ix *refindex.Index, syncErr error, interval time.Duration) {
	ps := ix.SharedPinsStatus()
	now := time.Now().UTC()
	total := f.refusalsTotal() // before f.mu: gathering calls the stale gauge, which takes it
	f.mu.Lock()
	rec := f.rec
	rec.Heartbeat = now
	rec.PinsLoaded, rec.PinsError = ps.Loaded, ps.Error
	if syncErr == nil {
		rec.LastSync, rec.SyncError = now, ""
	} else {
		rec.SyncError = syncErr.Error()
	}
	rec.Refusals1h = f.refusalsLastHour(now, total)
	f.mu.Unlock()
	var err error
	if !f.readOnly {
		hctx, cancel := context.WithTimeout(ctx, max(interval, 10*time.Second))
		defer cancel()
		err = f.beat.Beat(hctx, rec)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rec.LastSync, f.rec.SyncError = rec.LastSync, rec.SyncError
	var taken *shared.MountIDTakenError
	switch {
	case errors.As(err, &taken):
		// Written, but another live mount writes the same record: said at every beat that finds it
		// (ERROR), and the shared state counts as stale so the alert fires.
		f.log.Error("two ckguard mounts of this store share one mount id", "area", f.cas.Where(), "err", err)
		other := time.Duration(taken.Other.SyncInterval * float64(time.Second))
		if other <= 0 {
			other = 30 * time.Second
		}
		f.idTakenUntil = now.Add(2*other + 10*time.Second)
	case err != nil:
		if !f.hbErrLog {
			f.log.Warn("cannot write this mount's heartbeat into the shared state; other hosts' `ckguard fleet` will show it stale", "area", f.cas.Where(), "err", err)
		}
		f.hbErrLog = true
	default:
		if f.hbErrLog {
			f.log.Info("heartbeat written into the shared state again", "area", f.cas.Where())
		}
		f.hbErrLog = false
		f.lastOK = now
	}
	f.stale = ps.Error != "" || ps.Loaded.IsZero() || time.Since(ps.Loaded) > staleAfter(interval) || err != nil || now.Before(f.idTakenUntil)
	if time.Since(f.oldCheck) >= oldCheckEvery {
		f.oldCheck = time.Now()
		f.checkOld(ctx, interval) // a listing of the registry, bounded: no lock is held here
	}
}

// oldCheckEvery is how often a mount reads the registry for outdated mounts (one listing and one read
// per mount record).
const oldCheckEvery = 5 * time.Minute

// FleetStatusName is the file in the index folder where a --shared mount writes what it found in the
// registry (FleetStatus): `ckguard stats` shows it.
const FleetStatusName = "fleet-status.json"

// FleetStatus is what a mount last found in the store's registry of mounts.
type FleetStatus struct {
	Checked time.Time  `json:"checked"`
	Old     []OldMount `json:"old_mounts,omitempty"`
}

// OldMount is a live mount of the store that does less in the shared area than this version relies on.
type OldMount struct {
	ID       string `json:"id"`
	Host     string `json:"host"`
	Version  string `json:"version"`
	Layout   string `json:"layout"`
	Protocol int    `json:"protocol"`
	Why      string `json:"why"`
}

// ReadFleetStatus reads what the mount wrote in dir (os.ErrNotExist: no --shared mount wrote one).
func ReadFleetStatus(dir string) (FleetStatus, error) {
	var s FleetStatus
	b, err := os.ReadFile(filepath.Join(dir, FleetStatusName))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", filepath.Join(dir, FleetStatusName), err)
	}
	return s, nil
}

// checkOld reads the registry and names every live mount of an older layout or protocol: a WARN line
// once per mount and version (and an INFO line when it is gone), and the fleet status file. A mount too
// old to know the shared area writes no record: it cannot be seen here (see docs/OPERATIONS.md).
func (f *fleet) checkOld(ctx context.Context, interval time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, max(interval, 10*time.Second))
	defer cancel()
	mounts, err := shared.Mounts(ctx, f.cas)
	if err != nil {
		f.log.Warn("cannot read the store's registry of mounts to look for outdated mounts; retried later", "area", f.cas.Where(), "err", err)
		return
	}
	now := time.Now()
	st := FleetStatus{Checked: now.UTC()}
	seen := map[string]bool{}
	for _, m := range mounts {
		if m.ID == f.rec.ID || !shared.Live(m, now) {
			continue
		}
		why := shared.Outdated(m)
		if why == "" {
			continue
		}
		st.Old = append(st.Old, OldMount{ID: m.ID, Host: m.Host, Version: m.Version, Layout: m.Layout, Protocol: shared.ProtocolOf(m), Why: why})
		seen[m.ID] = true
		said := m.Version + "/" + why
		if f.old[m.ID] != said {
			f.log.Warn("an outdated ckguard mount works on this store: "+why, "mount", m.ID, "host", m.Host, "version", m.Version,
				"layout", m.Layout, "protocol", shared.ProtocolOf(m), "this_protocol", shared.Protocol)
		}
		if f.old == nil {
			f.old = map[string]string{}
		}
		f.old[m.ID] = said
	}
	for id := range f.old {
		if !seen[id] {
			f.log.Info("the outdated mount no longer runs on this store (stopped, upgraded or silent)", "mount", id)
			delete(f.old, id)
		}
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	tmp := filepath.Join(f.indexDir, FleetStatusName+".tmp")
	err = os.WriteFile(tmp, append(b, '\n'), 0o600)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(f.indexDir, FleetStatusName))
	}
	if err != nil {
		f.log.Warn("cannot write the fleet status file for `ckguard stats`", "dir", f.indexDir, "err", err)
	}
}

// stop marks the record stopped (a clean unmount), so the fleet view tells it from a crash.
func (f *fleet) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f.mu.Lock()
	rec := f.rec
	f.mu.Unlock()
	rec.Heartbeat, rec.Stopped = time.Now().UTC(), true
	if _, err := shared.Heartbeat(ctx, f.cas, rec); err != nil {
		f.log.Warn("cannot mark this mount stopped in the shared state", "area", f.cas.Where(), "err", err)
	}
}

// refusalsTotal is ckguard_refusals_total summed over its labels (without f.mu).
func (f *fleet) refusalsTotal() float64 {
	if f.met == nil {
		return 0
	}
	total := 0.0
	mfs, _ := f.met.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "ckguard_refusals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// refusalsLastHour is the refusals counted since the oldest sample of the last hour (f.mu held).
func (f *fleet) refusalsLastHour(now time.Time, total float64) int64 {
	f.samples = append(f.samples, refusalSample{at: now, total: total})
	i := 0
	for i < len(f.samples)-1 && now.Sub(f.samples[i+1].at) >= time.Hour {
		i++
	}
	f.samples = f.samples[i:]
	if len(f.samples) == 1 || now.Sub(f.samples[0].at) < time.Hour {
		// Less than an hour of samples: count from the mount's start (the counter starts at zero).
		return int64(total)
	}
	return int64(total - f.samples[0].total)
}

// sweepLease is the lease (shared.Lease "sweeper") under which one --shared mount of the store at a
// time runs the quarantine's TTL and space purges: two mounts never purge the same entry, and a
// crashed holder's lease is taken over once it has gone unrenewed for its TTL (three sync intervals).
type sweepLease struct {
	l       *shared.Lease
	observe bool // --shared-read-only: never takes the lease (the writing mounts purge)
	log     *slog.Logger
	mu      sync.Mutex // hold's: the stager and the holds both renew
	held    bool       // as last logged
	errLog  bool
}

// errLeaseLost keeps an entry when the lease lapsed during a purge (the fence).
var errLeaseLost = errors.New("this mount no longer holds the store's sweeper lease (another mount purges now)")

func newSweepLease(f *fleet, interval time.Duration, log *slog.Logger) *sweepLease {
	return &sweepLease{l: shared.NewLease(f.cas, "sweeper", f.rec.ID, 3*interval), log: log, observe: f.readOnly}
}

// fenced takes or renews the lease and returns svc with every entry's purge fenced by it: an entry is
// purged only while the lease is valid (its Referenced check fails otherwise, which keeps the entry).
// ok is false when another mount holds the lease.
func (sw *sweepLease) fenced(ctx context.Context, svc *quarantine.Direct) (*quarantine.Direct, bool) {
	if sw.observe {
		if !sw.errLog {
			sw.log.Info("read-only observer: this mount stages deletions but never purges the quarantine; the --shared mounts of the store do, under their sweeper lease")
			sw.errLog = true
		}
		return nil, false
	}
	if !sw.hold(ctx) {
		return nil, false
	}
	fenced := *svc
	inner := svc.Referenced
	fenced.Referenced = func(ctx context.Context, key string) (bool, error) {
		if v, _ := sw.l.Valid(); !v {
			return false, errLeaseLost
		}
		if inner == nil {
			return false, nil
		}
		return inner(ctx, key)
	}
	return &fenced, true
}

// hold takes or renews the lease and reports whether this mount holds it (the quarantine's purge and
// the release of holds no mount needs both call it; one Lease object serves both, so its generation
// is this mount's one view).
func (sw *sweepLease) hold(ctx context.Context) bool {
	if sw.observe {
		return false
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	ok, err := sw.l.Hold(ctx)
	if err != nil && !sw.errLog {
		sw.log.Warn("cannot renew or take the store's sweeper lease; this mount does not purge the quarantine or release holds meanwhile", "err", err)
	}
	sw.errLog = err != nil
	holder, gen := sw.l.Holder()
	if ok != sw.held {
		if ok {
			sw.log.Info("this mount holds the store's sweeper lease: it purges the quarantine and releases the holds no mount needs", "generation", gen)
		} else {
			sw.log.Info("another mount holds the store's sweeper lease: it purges the quarantine and releases the holds no mount needs", "holder", holder, "generation", gen)
		}
		sw.held = ok
	}
	return ok
}

// release gives the lease up at a clean stop.
func (sw *sweepLease) release() {
	if sw.observe {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sw.l.Release(ctx); err != nil {
		sw.log.Warn("cannot release the store's sweeper lease; another mount takes it once it expires", "err", err)
	}
}

// readOnlyPins is the shared pins of an observer (--shared-read-only): loaded, never written.
type readOnlyPins struct{ *shared.Pins }

func (readOnlyPins) Set(context.Context, string, bool, string) (time.Time, error) {
	return time.Time{}, refindex.ErrSharedReadOnly
}
