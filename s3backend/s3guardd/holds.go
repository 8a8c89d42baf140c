package s3guardd

import (
	"context"
	"fmt"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/hold"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3hold"
)

// setupHolds checks --hold against the bucket before anything is mounted: with required a bucket that
// cannot hold (no Object Lock, no permission) refuses the start; with best-effort the mount runs
// without holds and says so (an ERROR line now, and in `ckguard hold status`, `stats` and the
// ckguard_hold_active gauge). nil: --hold off.
func setupHolds(ctx context.Context, c guardd.Config, cl *s3client.Client) (func(guardd.HoldEnv) guardd.Holds, error) {
	mode, err := hold.ParseMode(c.Hold)
	if err != nil || mode == hold.ModeOff {
		return nil, err
	}
	log := c.Logger
	perr := s3hold.Probe(ctx, cl)
	note := ""
	switch {
	case perr != nil && mode == hold.ModeRequired:
		return nil, fmt.Errorf("--hold required: %s cannot hold referenced objects: %w (use --hold best-effort to run without holds, or --hold off)", c.StoreDir, perr)
	case perr != nil:
		note = "holds are OFF: " + perr.Error()
		log.Error("--hold best-effort: legal holds are NOT applied; referenced objects are protected only by the mount's own decisions (deletions beside the mount are only detected by the loss check)", "store", c.StoreDir, "err", perr)
	default:
		log.Info("legal holds on: every object a live checkpoint references, and its _metadata, gets an S3 legal hold after the sync that finds it; a delete marker put on one beside the mount is removed by the loss check", "store", c.StoreDir, "mode", mode)
	}
	ledger, err := hold.OpenLedger(c.IndexDir)
	if err != nil {
		return nil, fmt.Errorf("--hold: %w", err)
	}
	if n := ledger.Damaged(); n > 0 {
		log.Warn("legal holds: lines of the hold ledger could not be read (a torn last line after a crash is one); the next pass holds again what they named", "lines", n)
	}
	return func(env guardd.HoldEnv) guardd.Holds {
		h := s3hold.New(s3hold.Options{Server: cl, Audit: env.Audit, Hold: hold.Options{Index: env.Index, Ledger: ledger, Pacer: env.Pacer, Fleet: env.Fleet,
			Logger: log, Mode: mode, Note: note, Inactive: perr != nil, StatusDir: c.IndexDir}})
		if err := s3hold.Register(env.Metrics.Registry, h); err != nil {
			log.Warn("legal holds: metrics not registered", "err", err)
		}
		return h
	}, nil
}
