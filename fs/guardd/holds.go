package guardd

import (
	"context"
	"sync"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/hold"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// HoldEnv is what a backend's server-side holds get when the daemon starts them (after the index is
// open and the audit log too).
type HoldEnv struct {
	Index   *refindex.Index
	Audit   audit.Sink
	Metrics *metrics.Metrics
	// Pacer is the loss check's limiter: holds share its request budget.
	Pacer refindex.Pacer
	// Fleet, with --shared, is the store's shared record of held objects (nil without): a hold is
	// released only once no mount of the store needs it, by the holder of the sweeper lease.
	Fleet hold.Fleet
}

// Holds is a backend's second line of defence outside the mount (fs/hold): it runs beside
// the sync loop, never under the enforcer's lock, and the mount's decisions never wait for it.
type Holds interface {
	// Kick asks for a reconciliation after a successful sync.
	Kick()
	// Run reconciles once per Kick until ctx ends.
	Run(ctx context.Context)
	// Heal is asked about every referenced object the loss check finds missing: it brings back what
	// it held (healed: it did).
	Heal(ctx context.Context, key, checkpoint string) (healed bool, err error)
}

// LossObserver is implemented by Holds that need every loss-check report (HDFS snapshots: which
// referenced files are missing now, and when a pass was complete, decide which snapshot may go).
// ObserveLoss must not block: it runs in the pass.
type LossObserver interface {
	ObserveLoss(rep *refindex.LossReport)
}

// RetireGuarder is implemented by Holds that bring back a `_metadata` deleted beside the mount before
// a sync retires it (refindex.RetireGuard): the daemon sets it on the index.
type RetireGuarder interface {
	GuardRetire(ctx context.Context, gone, incoming []string)
}

// holdRunner runs a backend's Holds beside the daemon.
type holdRunner struct {
	h  Holds
	wg sync.WaitGroup
}

func startHolds(ctx context.Context, h Holds) *holdRunner {
	r := &holdRunner{h: h}
	r.wg.Add(1)
	go func() { defer r.wg.Done(); h.Run(ctx) }()
	return r
}

func (r *holdRunner) kick() {
	if r != nil {
		r.h.Kick()
	}
}

func (r *holdRunner) wait() {
	if r != nil {
		r.wg.Wait()
	}
}

// changeHook is implemented by holds the mount must lift before it changes a file itself (the local
// immutable flag): the enforcer calls it under its lock for every path of an allowed change.
type changeHook interface {
	BeforeChange(op verdict.Op, key string)
}

// fleetHolds is hold.Fleet over the store's shared area: the records of shared.Holds, and the
// sweeper lease (the quarantine purge's: one lease for all store-wide maintenance).
type fleetHolds struct {
	*shared.Holds
	sweep *sweepLease
}

func (f fleetHolds) MayRelease(ctx context.Context) bool { return f.sweep.hold(ctx) }

func (f fleetHolds) StillMayRelease() bool {
	v, _ := f.sweep.l.Valid()
	return v
}
