// Package s3guardd runs one guard mount over S3 from start to clean stop, exactly as fs/guardd does for a
// local directory (same Config, same index, audit log, control socket, metrics and periodic sync), with the
// S3 store (s3store) and the S3 FUSE tree (s3mount) in place of the local ones.
package s3guardd

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/fs/mountutil"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/s3backend/s3cli"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3store"
)

// Run mounts c.StoreDir (an s3:// URL) and serves until ctx is cancelled or the filesystem is unmounted
// from outside. tune, when non-nil, adjusts the S3 mount options (tests, benchmarks).
func Run(ctx context.Context, c guardd.Config, s3cfg s3client.Config, tune func(*s3mount.Options)) (err error) {
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	if c.SyncInterval <= 0 {
		c.SyncInterval = 30 * time.Second
	}
	if c.AuditLog == "" {
		c.AuditLog = filepath.Join(c.IndexDir, "audit.jsonl")
	}
	if c.ControlSocket == "" {
		c.ControlSocket = control.DefaultSocket(c.IndexDir)
	}
	if _, err := mountutil.Prepare(c.Mountpoint); err != nil {
		return err
	}
	st, err := s3cli.OpenStore(ctx, c.StoreDir, s3cfg)
	if err != nil {
		return err
	}
	// One attribute cache for the mount and the index's store: deciding an unlink of a listed object
	// costs no extra HEAD (see s3store.Options.Attrs for why that is safe).
	attrs := s3client.NewAttrCache(s3mount.DefaultCacheEntries)
	// That sharing, and the mount's cached ETags, are safe only because deletes carry If-Match: check the
	// server honours it; where it does not (or the probe cannot tell), decide on a fresh HEAD every time.
	ifMatch, perr := s3mount.ProbeIfMatch(ctx, st.Client())
	switch {
	case perr != nil:
		log.Warn("could not check that the S3 server honours If-Match on deletes; every decision stats the object afresh", "err", perr)
	case !ifMatch:
		log.Warn("the S3 server ignores If-Match on DeleteObject; every decision stats the object afresh (slower, and an object replaced between that HEAD and the delete is not detected)")
	}
	sopts := s3store.Options{}
	if ifMatch {
		sopts.Attrs = attrs
	}
	st = s3store.New(st.Client(), sopts)
	// Flink pointed at the mountpoint writes file:<mountpoint>/… references: they are store keys (unless
	// --map says otherwise).
	mntAbs, err := filepath.Abs(c.Mountpoint)
	if err != nil {
		return err
	}
	opts := append([]refindex.Option{refindex.WithLogger(log)}, c.IndexOptions...)
	opts = append(opts, refindex.WithMountpoint(mntAbs))
	if c.Progress != nil {
		opts = append(opts, refindex.WithProgress(c.Progress))
	}
	ix, err := refindex.Open(c.IndexDir, st, c.Policy, opts...)
	if err != nil {
		return fmt.Errorf("open index: %w", err)
	}
	defer func() {
		if cerr := ix.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close index: %w", cerr)
		}
	}()

	met := metrics.New()
	syncOnce := func() error {
		t0 := time.Now()
		serr := ix.Sync(ctx)
		met.Sync(time.Since(t0), serr)
		if serr != nil {
			log.Error("index sync failed; refusing every deletion until a sync succeeds", "store", c.StoreDir, "err", serr)
		} else {
			s := st.Stats()
			log.Debug("index synced", "took", time.Since(t0), "full_walks", s.FullWalks, "targeted", s.TargetedListings)
		}
		return serr
	}
	log.Info("syncing index with the store", "store", c.StoreDir, "index", c.IndexDir)
	if err := syncOnce(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Warn("mounting with a failed index sync: every deletion will be refused until a sync succeeds", "err", err)
	}

	al, err := audit.Open(c.AuditLog, audit.Options{FsyncInterval: c.AuditFsync})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := al.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	enf, err := guard.NewEnforcer(guard.Config{Checker: refindex.Checker(ix), Audit: al, Metrics: met,
		RefuseErrno: c.RefuseErrno, Logger: log})
	if err != nil {
		return err
	}
	srvCtx, stopServers := context.WithCancel(context.Background())
	defer stopServers()
	var metricsAddr string
	if c.MetricsAddr != "" {
		a, err := met.Serve(srvCtx, c.MetricsAddr, log)
		if err != nil {
			return err
		}
		metricsAddr = a.String()
	}
	ctl, err := control.ServeQuerier(c.ControlSocket, ix, log)
	if err != nil {
		return err
	}
	defer ctl.Close()

	mo := s3mount.Options{Client: st.Client(), Mountpoint: c.Mountpoint, Enforcer: enf, Metrics: met, Attrs: attrs,
		AllowOther: c.AllowOther, Debug: c.Debug, Logger: log, FreshETags: !ifMatch}
	if tune != nil {
		tune(&mo)
	}
	m, err := s3mount.Mount(ctx, mo)
	if err != nil {
		return err
	}
	log.Info("mounted", "store", c.StoreDir, "mountpoint", m.Mountpoint(), "control_socket", c.ControlSocket,
		"audit_log", c.AuditLog, "metrics", metricsAddr)
	if c.Ready != nil {
		c.Ready(&guardd.Mounted{Mountpoint: m.Mountpoint(), ControlSocket: c.ControlSocket, AuditLog: c.AuditLog,
			MetricsAddr: metricsAddr})
	}
	gone := make(chan struct{})
	go func() { m.Wait(); close(gone) }()
	tick := time.NewTicker(c.SyncInterval)
	defer tick.Stop()
	for {
		select {
		case <-gone:
			log.Info("unmounted from outside; shutting down", "mountpoint", m.Mountpoint())
			return nil
		case <-tick.C:
			_ = syncOnce()
		case <-ctx.Done():
			log.Info("signal received; unmounting", "mountpoint", m.Mountpoint())
			if err := m.Unmount(); err != nil {
				log.Warn("mount busy; detaching lazily", "mountpoint", m.Mountpoint(), "err", err)
				if derr := mountutil.Unmount(m.Mountpoint(), true); derr != nil {
					return fmt.Errorf("unmount %s: %v; lazy detach: %w", m.Mountpoint(), err, derr)
				}
			}
			select {
			case <-gone:
			case <-time.After(10 * time.Second):
			}
			return nil
		}
	}
}
