// Package s3guardd runs one guard mount over S3: the fs/guardd daemon (same Config, index, audit log,
// control socket, metrics, periodic sync and teardown) over the S3 store (s3store) and the S3 FUSE tree
// (s3mount). What is here is only what is S3-specific: the client, the If-Match probe and the shared
// attribute cache.
package s3guardd

import (
	"context"
	"errors"
	"fmt"
	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/s3backend/s3shared"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/s3backend/s3cli"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3quarantine"
	"github.com/ckguard/ckguard/s3backend/s3store"
)

// Run mounts c.StoreDir (an s3:// URL) and serves until ctx is cancelled or the filesystem is unmounted
// from outside. tune, when non-nil, adjusts the S3 mount options (tests, benchmarks).
func Run(ctx context.Context, c guardd.Config, s3cfg s3client.Config, tune func(*s3mount.Options)) error {
	return guardd.Serve(ctx, c, func(ctx context.Context, c guardd.Config) (guardd.Backend, error) {
		return open(ctx, c, s3cfg, tune)
	})
}

func open(ctx context.Context, c guardd.Config, s3cfg s3client.Config, tune func(*s3mount.Options)) (guardd.Backend, error) {
	log := c.Logger
	// The client counts the mount's own requests: the loss check slows down while they flow.
	traffic := &s3client.Traffic{}
	s3cfg.Traffic = traffic
	st, err := s3cli.OpenStore(ctx, c.StoreDir, s3cfg)
	if err != nil {
		return guardd.Backend{}, err
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
	// Queued deletions go in DeleteObjects batches only where the server is shown to honour per-key ETags;
	// elsewhere as parallel conditional DeleteObject requests (s3backend/deleteq).
	batch := false
	if ifMatch {
		var berr error
		if batch, berr = s3mount.ProbeBatchIfMatch(ctx, st.Client()); berr != nil {
			log.Warn("could not check that the S3 server honours per-key ETags in DeleteObjects; queued deletions are sent one request per object", "err", berr)
		}
	}
	sopts := s3store.Options{FullWalk: s3cfg.FullWalk, ReconcileEvery: s3cfg.ReconcileEvery, Logger: log}
	if ifMatch {
		sopts.Attrs = attrs
	}
	st = s3store.New(st.Client(), sopts)
	// On a versioned bucket a referenced object deleted outside the mount is usually only hidden by a
	// delete marker: the loss check names the marker and the command that removes it.
	var markers refindex.QuarantineFinder
	if v, verr := s3quarantine.Versioned(ctx, st.Client()); verr == nil && v {
		markers = s3quarantine.NewMarkerFinder(st.Client())
	} else if verr != nil && !errors.Is(verr, s3client.ErrNotImplemented) {
		log.Warn("could not read the bucket's versioning (s3:GetBucketVersioning); the loss check will not look for delete markers hiding a missing object", "err", verr)
	}
	var area s3mount.Area
	if c.Quarantine > 0 {
		// On a versioned bucket the delete marker is the quarantine (nothing is copied); elsewhere a
		// server-side copy. Restore must never replace an object created at the original key:
		// If-None-Match on the copy where the server refuses to replace with it, else a HEAD right
		// before the copy; on a versioned bucket a restore only removes delete markers.
		a, info, qerr := s3quarantine.Open(ctx, st.Client(), c.QuarantineNow)
		if qerr != nil {
			return guardd.Backend{}, fmt.Errorf("--quarantine: the quarantine area %s of %s: %w", s3quarantine.Prefix, c.StoreDir, qerr)
		}
		switch {
		case info.Versioned:
			log.Info("the bucket has versioning enabled: a quarantined deletion is its delete marker (restore removes the marker, purge deletes the hidden version)")
		case info.VersioningErr != nil:
			log.Warn("could not read the bucket's versioning (s3:GetBucketVersioning); quarantine copies objects aside, which on a versioned bucket also leaves a hidden version per deletion", "err", info.VersioningErr)
		}
		if !info.Versioned && !info.IfNoneMatch {
			log.Info("the S3 server ignores If-None-Match on CopyObject; a quarantine restore checks with a HEAD right before its copy that nothing is at the original key")
		}
		area = a
	}
	holds, err := setupHolds(ctx, c, st.Client())
	if err != nil {
		return guardd.Backend{}, err
	}
	// The mount's complete folder listings spare the loss check requests while a find walks the bucket;
	// the daemon sets how old a listing it takes may be (guardd.Backend.Listings).
	listings := refindex.NewListingEvidence(0, nil)
	return guardd.Backend{
		Store:    st,
		Listings: listings,
		Shared:   func(context.Context) (shared.CAS, error) { return s3shared.New(st.Client()), nil },
		Mount: func(ctx context.Context, enf *guard.Enforcer, met *metrics.Metrics) (guardd.Mount, error) {
			mo := s3mount.Options{Client: st.Client(), Mountpoint: c.Mountpoint, Enforcer: enf, Metrics: met, Attrs: attrs,
				AllowOther: c.AllowOther, Debug: c.Debug, Logger: log, FreshETags: !ifMatch,
				DeleteQueueDir: c.IndexDir, DeleteBatch: batch, Quarantine: area, Listings: listings}
			if tune != nil {
				tune(&mo)
			}
			return s3mount.Mount(ctx, mo)
		},
		SyncLogAttrs: func() []any {
			s := st.Stats()
			return []any{"full_walks", s.FullWalks, "descents", s.TargetedListings, "listings", s.LastListings, "heads", s.LastHeads,
				"reconciliations", s.Reconciliations, "reconcile_found", s.ReconcileFound}
		},
		NoIndexGauges:   true,
		LossCheckBudget: guardd.DefaultS3LossCheckBudget,
		LossCheckRate:   guardd.DefaultS3LossCheckRate,
		Traffic:         traffic,
		Quarantine:      markers,
		Holds:           holds,
	}, nil
}
