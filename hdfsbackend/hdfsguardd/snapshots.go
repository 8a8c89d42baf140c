package hdfsguardd

import (
	"context"
	"fmt"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfssnap"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsstore"
)

// setupSnapshots checks --hold against the cluster before anything is mounted: the store root is
// made snapshottable where the mount's user may, and a probe snapshot is taken and deleted. With
// required a root that cannot be snapshotted refuses the start; with best-effort the mount runs
// without snapshots and says so (an ERROR line). nil: --hold off.
func setupSnapshots(ctx context.Context, c guardd.Config, st *hdfsstore.Store) (func(guardd.HoldEnv) guardd.Holds, error) {
	switch c.Hold {
	case "", "off":
		return nil, nil
	case "best-effort", "required":
	default:
		return nil, fmt.Errorf("--hold %q: want off, best-effort or required", c.Hold)
	}
	snaps, ok := st.FS().(hdfsclient.Snapshots)
	var err error
	if !ok {
		err = fmt.Errorf("this HDFS client has no snapshot calls")
	} else {
		err = hdfssnap.Probe(ctx, snaps, st.Dir(), time.Now())
	}
	switch {
	case err != nil && c.Hold == "required":
		return nil, fmt.Errorf("--hold required: %s cannot be snapshotted: %w (use --hold best-effort to run without snapshots, or --hold off)", c.StoreDir, err)
	case err != nil:
		c.Logger.Error("--hold best-effort: HDFS snapshots are NOT taken; referenced files are protected only by the mount's own decisions (deletions beside the mount are only detected by the loss check, and cannot be restored by restore-lost)", "store", c.StoreDir, "err", err)
		// Said in the metrics too (ckguard_hold_active 0, the CkguardHoldsFailing alert), never silently.
		return func(env guardd.HoldEnv) guardd.Holds {
			if err := hdfssnap.RegisterInactive(env.Metrics.Registry); err != nil {
				c.Logger.Warn("HDFS snapshots: metrics not registered", "err", err)
			}
			return noSnapshots{}
		}, nil
	}
	c.Logger.Info("HDFS snapshots on: the store root is snapshotted after each sync that finds a new checkpoint (ckguard-<time>); a file deleted beside the mount is restored from the newest snapshot holding it with `ckguard restore-lost --apply`",
		"store", c.StoreDir, "dir", st.Dir(), "keep", hdfssnap.DefaultKeep)
	return func(env guardd.HoldEnv) guardd.Holds {
		s := hdfssnap.New(hdfssnap.Options{FS: st.FS(), Snaps: snaps, Dir: st.Dir(), Index: env.Index, Logger: c.Logger, Audit: env.Audit})
		if err := s.Register(env.Metrics.Registry); err != nil {
			c.Logger.Warn("HDFS snapshots: metrics not registered", "err", err)
		}
		return s
	}, nil
}

// noSnapshots is --hold best-effort on a store root that cannot be snapshotted: nothing to take,
// nothing to heal (it exists so the metrics say the holds are off).
type noSnapshots struct{}

func (noSnapshots) Kick()                   {}
func (noSnapshots) Run(ctx context.Context) { <-ctx.Done() }
func (noSnapshots) Heal(context.Context, string, string) (bool, error) {
	return false, nil
}
