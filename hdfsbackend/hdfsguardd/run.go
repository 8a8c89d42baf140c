// Package hdfsguardd runs one guard mount over HDFS: the fs/guardd daemon (same Config, index, audit
// log, control socket, metrics, periodic sync and teardown) over the HDFS store (hdfsstore) and the HDFS
// FUSE tree (hdfsmount). With --quarantine the mount stages allowed deletions in the store's quarantine
// folder (hdfsquarantine) instead of the HDFS trash; guardd serves its socket, purge and gauges.
package hdfsguardd

import (
	"context"
	"fmt"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsshared"
	"github.com/ckguard/ckguard/refindex/store/shared"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/hdfsbackend/hdfscli"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsmount"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// Run mounts c.StoreDir (an hdfs:// URI) and serves until ctx is cancelled or the filesystem is
// unmounted from outside.
func Run(ctx context.Context, c guardd.Config, o hdfscli.Options) error {
	return guardd.Serve(ctx, c, func(ctx context.Context, c guardd.Config) (guardd.Backend, error) {
		if o.Logger == nil {
			o.Logger = c.Logger // the ticket-cache WARNs go where the daemon's log goes
		}
		st, err := hdfscli.OpenStore(ctx, c.StoreDir, o)
		if err != nil {
			return guardd.Backend{}, err
		}
		holds, err := setupSnapshots(ctx, c, st)
		if err != nil {
			return guardd.Backend{}, err
		}
		var area *hdfsquarantine.Area
		if c.Quarantine > 0 {
			if area, err = hdfsquarantine.Open(ctx, st.FS(), st.Dir(), c.QuarantineNow); err != nil {
				return guardd.Backend{}, fmt.Errorf("--quarantine: %s: %w", c.StoreDir, err)
			}
			if area.ByPath() && c.Logger != nil {
				c.Logger.Warn("the NameNode resolves no inode paths (/.reserved/.inodes), so the quarantine folder is named by its path: a user who can write the store directory could swap it for one of their own while the mount runs; make the store directory writable only by the Flink jobs' user and the mount's (sticky bit: hdfs dfs -chmod +t)",
					"folder", hdfsclient.Join(st.Dir(), store.QuarantineDir))
			}
		}
		return guardd.Backend{
			Store: st,
			Shared: func(ctx context.Context) (shared.CAS, error) {
				return hdfsshared.Open(ctx, st.FS(), st.Dir())
			},
			Mount: func(ctx context.Context, enf *guard.Enforcer, met *metrics.Metrics) (guardd.Mount, error) {
				return hdfsmount.Mount(ctx, hdfsmount.Options{FS: st.FS(), Dir: st.Dir(), Name: st.Root(), Mountpoint: c.Mountpoint,
					Enforcer: enf, Metrics: met, AllowOther: c.AllowOther, Debug: c.Debug, Logger: c.Logger, Quarantine: area})
			},
			// The referenced/orphaned-bytes gauges walk the whole store: not at every sync over HDFS.
			NoIndexGauges: true,
			// The cluster's free space or the store root's space quota, whichever is tighter
			// (ckguard_store_free_bytes; the low-space WARN).
			Space: func(ctx context.Context) (quarantine.Space, error) {
				return hdfsquarantine.StoreSpace(ctx, st.FS(), st.Dir())
			},
			Holds: holds,
		}, nil
	})
}
