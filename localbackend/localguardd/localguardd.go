// Package localguardd is the daemon of a local (or NFS) store: guardd.Serve over localstore, the
// localfs mount, the immutable flag of localhold for --hold, and the store's filesystem for the space
// gauges (the S3 and HDFS daemons are s3backend/s3guardd and hdfsbackend/hdfsguardd).
package localguardd

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/hold"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/localbackend/localfs"
	"github.com/ckguard/ckguard/localbackend/localhold"
	"github.com/ckguard/ckguard/localbackend/localquarantine"
	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/shared"
)

// Run mounts the local directory c.StoreDir and serves until ctx is cancelled or the filesystem is
// unmounted from outside.
func Run(ctx context.Context, c guardd.Config) error {
	return guardd.Serve(ctx, c, func(_ context.Context, c guardd.Config) (guardd.Backend, error) {
		st, err := localstore.New(c.StoreDir)
		if err != nil {
			return guardd.Backend{}, fmt.Errorf("store %s: %w", c.StoreDir, err)
		}
		holds, err := setupHolds(c, st)
		if err != nil {
			return guardd.Backend{}, err
		}
		return guardd.Backend{Store: st, Holds: holds, Shared: func(context.Context) (shared.CAS, error) { return shared.NewLocal(c.StoreDir) }, Space: func(context.Context) (quarantine.Space, error) { return dirSpace(c.StoreDir) },
			Mount: func(_ context.Context, enf *guard.Enforcer, met *metrics.Metrics) (guardd.Mount, error) {
				return localfs.Mount(localfs.Options{Store: c.StoreDir, Mountpoint: c.Mountpoint, Enforcer: enf,
					Metrics: met, AllowOther: c.AllowOther, Debug: c.Debug, Logger: c.Logger,
					Quarantine: c.Quarantine > 0, Now: c.QuarantineNow})
			}}, nil
	})
}

// setupHolds checks --hold against the local store before anything is mounted: the immutable
// flag is probed on the store's filesystem; with required a filesystem (or a process) that cannot set
// it refuses the start, with best-effort the mount runs without it and says so (an ERROR line now, and
// in `ckguard hold status`, `stats` and the ckguard_hold_active gauge). nil: --hold off.
func setupHolds(c guardd.Config, st *localstore.Store) (func(guardd.HoldEnv) guardd.Holds, error) {
	mode, err := hold.ParseMode(c.Hold)
	if err != nil || mode == hold.ModeOff {
		return nil, err
	}
	log := c.Logger
	perr := localhold.Probe(st.Root())
	note := ""
	switch {
	case perr != nil && mode == hold.ModeRequired:
		return nil, fmt.Errorf("--hold required: %s cannot keep referenced files immutable: %w (use --hold best-effort to run without the flag, or --hold off)", c.StoreDir, perr)
	case perr != nil:
		note = "the immutable flag is OFF: " + perr.Error()
		log.Error("--hold best-effort: the immutable flag is NOT applied; referenced files are protected only by the mount's own decisions (deletions beside the mount are only detected by the loss check)", "store", c.StoreDir, "err", perr)
	default:
		log.Info("immutable flag on: every file a live checkpoint references, and its _metadata, gets FS_IMMUTABLE_FL after the sync that finds it; the mount clears it before its own changes", "store", c.StoreDir, "mode", mode)
	}
	h, err := localhold.New(localhold.Options{Files: st, Dir: c.IndexDir, Logger: log, Mode: mode, Note: note, Inactive: perr != nil})
	if err != nil {
		return nil, fmt.Errorf("--hold: %w", err)
	}
	if n := h.Ledger().Damaged(); n > 0 {
		log.Warn("immutable flag: lines of the hold ledger could not be read (a torn last line after a crash is one); a file they named that keeps its flag must be cleared by hand (chattr -i)", "lines", n)
	}
	return func(env guardd.HoldEnv) guardd.Holds {
		h.SetIndex(env.Index)
		if env.Fleet != nil {
			h.SetFleet(env.Fleet)
		}
		if err := localhold.Register(env.Metrics.Registry, h); err != nil {
			log.Warn("immutable flag: metrics not registered", "err", err)
		}
		return h
	}, nil
}

// dirSpace is the size and free space of the filesystem holding dir (statfs through a descriptor).
func dirSpace(dir string) (quarantine.Space, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return quarantine.Space{}, fmt.Errorf("store %s: %w", dir, err)
	}
	defer unix.Close(fd)
	return localquarantine.FDSpace(fd)
}
