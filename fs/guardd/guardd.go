// Package guardd runs one guard mount, over any backend, from start to clean stop: it opens and syncs
// the index (with progress), opens the audit log, mounts, serves the control socket and metrics, re-syncs
// periodically for changes made to the store directly, and on cancellation (SIGINT/SIGTERM) or an external
// unmount tears everything down in order. Serve takes the backend (its store and its FUSE tree: see
// Backend); Run is Serve over a local directory, and s3backend/s3guardd and hdfsbackend/hdfsguardd are
// the S3 and HDFS ones. cmd/ckguard's `mount` is a thin flag parser over them.
package guardd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/fs/mountutil"
	"github.com/ckguard/ckguard/fs/procs"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinkrest"
	"github.com/ckguard/ckguard/refindex/pace"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// Config is everything a mount needs.
type Config struct {
	StoreDir      string
	IndexDir      string
	Mountpoint    string
	Policy        refindex.Policy
	IndexOptions  []refindex.Option
	AllowOther    bool
	SyncInterval  time.Duration // 0: 30 s
	RefuseErrno   syscall.Errno // 0: EPERM
	AuditLog      string        // "": <index>/audit.jsonl
	AuditFsync    time.Duration // see audit.Options
	ControlSocket string        // "": control.DefaultSocket(index)
	LogFile       string        // the daemon's log file, when it has one (checked like the index: CheckPlacement)
	MetricsAddr   string        // "": no metrics endpoint
	Debug         bool
	Logger        *slog.Logger
	Progress      io.Writer // initial sync progress (nil: none)
	// ServeProcs is GOMAXPROCS while the mount only answers requests; index work raises it back for as
	// long as it runs (fs/procs explains why). 0 leaves GOMAXPROCS alone.
	ServeProcs int
	// LossCheckBudget caps the requests of one loss check pass besides a stat per known-missing object
	// (0: the backend's default; negative: every object in every pass).
	LossCheckBudget int
	// LossCheckRate caps the loss check's requests per second (0: the backend's default; negative:
	// unpaced, and a pass is followed by a rest of lossDuty-1 times its duration instead).
	LossCheckRate float64
	// Ready is called once the mount is usable (daemon mode tells its parent, systemd gets READY=1).
	Ready func(m *Mounted)
	// Quarantine, when positive, stages every deletion the guard allows in the store's quarantine folder
	// and purges entries older than it (package quarantine); 0: deletions are final.
	Quarantine time.Duration
	// Hold is --hold: off (""), best-effort or required: server-side holds on what live checkpoints
	// reference, where the backend has them (Backend.Holds).
	Hold string
	// QuarantineNow is the quarantine's clock (nil: time.Now).
	QuarantineNow func() time.Time
	// QuarantineBound bounds the quarantine's space: over it, the sweeper purges the oldest entries
	// first, before their TTL, each logged and audited (cause space). Zero: the TTL alone.
	QuarantineBound quarantine.Bound
	// FlinkREST are the --flink-rest endpoints, polled before every sync (flink.go); their URLs must
	// be Policy.FlinkREST.
	FlinkREST []*flinkrest.Client
	// Shared is --shared: pins come from the store's shared state folder (package shared) and the
	// mount heartbeats into its registry, where the backend has one (Backend.Shared).
	Shared bool
	// SharedReadOnly is --shared-read-only: the shared pins protect here, but this mount writes nothing
	// into the shared area (no heartbeat, no pins through it, no sweeping).
	SharedReadOnly bool
	// Version is the ckguard version the mount reports in the registry ("": the build's).
	Version string
}

// Mounted describes a running mount, for the Ready callback and tests.
type Mounted struct {
	Mountpoint    string
	ControlSocket string
	AuditLog      string
	MetricsAddr   string // the bound address ("" when disabled)
	Passthrough   bool
}

// Backend is what differs between storage backends: the store the index reads and the FUSE tree served
// over it. Everything else (index, audit log, control socket, metrics, periodic sync, signals, teardown) is
// the same daemon, here.
type Backend struct {
	// Store is what the index reads.
	Store store.Store
	// Mount mounts the guard tree at the configured mountpoint, refusing through enf.
	Mount func(ctx context.Context, enf *guard.Enforcer, met *metrics.Metrics) (Mount, error)
	// SyncLogAttrs, when non-nil, adds backend figures to the "index synced" debug line.
	SyncLogAttrs func() []any
	// NoIndexGauges skips the gauges that walk the whole store (referenced and orphaned bytes): over S3
	// that would list the bucket. The gauges the index answers from memory (the lag above all) are set
	// after every sync on every backend.
	NoIndexGauges bool
	// LossCheckBudget is the backend's default Config.LossCheckBudget (0: every referenced object in
	// every pass; S3: DefaultS3LossCheckBudget, a request costs money).
	LossCheckBudget int
	// LossCheckRate is the backend's default Config.LossCheckRate (0: unpaced; S3:
	// DefaultS3LossCheckRate).
	LossCheckRate float64
	// Traffic, when set, counts the store requests the mount sends itself (FUSE operations, syncs, the
	// delete queue); the loss check marks its context Background and slows down while the count moves.
	Traffic Traffic
	// Quarantine, when set, is asked whether a referenced object found missing is held in quarantine.
	Quarantine refindex.QuarantineFinder
	// Space, when set, reads the size and free space of the store's filesystem after every sync
	// (ckguard_store_free_bytes; a WARN when under lowSpaceFraction): local, NFS and HDFS stores.
	Space func(ctx context.Context) (quarantine.Space, error)
	// Listings, when set, holds the mount's complete folder listings: the loss check takes a folder the
	// mount listed at most lossEvidenceAge ago from there (refindex.ListingEvidence), and its bound
	// counts the listing's age.
	Listings *refindex.ListingEvidence
	// Holds, when set, starts the backend's server-side holds (--hold): kicked after every successful
	// sync, asked to heal every missing object the loss check reports.
	Holds func(HoldEnv) Holds
	// Shared opens the store's shared state area (package shared) for --shared.
	Shared func(ctx context.Context) (shared.CAS, error)
}

// Mount is a running FUSE mount, as the daemon drives it.
type Mount interface {
	Mountpoint() string
	Unmount() error
	Wait()
}

// passthrougher is implemented by mounts that may serve reads through the kernel's FUSE passthrough.
type passthrougher interface{ Passthrough() bool }

// defaults fills the zero fields of c.
func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
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
}

// CheckPlacement refuses an index, audit log, control socket or log file inside the store or below the
// mountpoint: inside the store, the cleanup the mount exists for deletes them through it
// (rm -rf of the store's top folder truncates the audit log and removes the index under the running
// daemon); below the mountpoint, the daemon would write its own index through itself. The CLI calls it
// before it creates any of them; Serve calls it again.
func (c Config) CheckPlacement() error {
	c.defaults()
	type place struct{ flag, path string }
	ours := []place{{"--index", c.IndexDir}, {"--audit-log", c.AuditLog}, {"--control-socket", c.ControlSocket}}
	if c.LogFile != "" {
		ours = append(ours, place{"--log-file", c.LogFile})
	}
	var around []place
	if c.StoreDir != "" && !strings.Contains(c.StoreDir, "://") { // an S3 store has no local path
		around = append(around, place{"the store", c.StoreDir})
	}
	around = append(around, place{"the mountpoint", c.Mountpoint})
	if c.StoreDir != "" && !strings.Contains(c.StoreDir, "://") {
		// The mount shows the store: a mountpoint inside the store hides the part of the store below it
		// from the index (it lists the store through the mount's own shadow), and a store inside the
		// mountpoint is hidden by the mount itself.
		st, mp := resolvePath(c.StoreDir), resolvePath(c.Mountpoint)
		switch {
		case st == mp:
			return fmt.Errorf("the mountpoint %s is the store %s: mount the store somewhere else (e.g. /mnt/flink-checkpoints)", c.Mountpoint, c.StoreDir)
		case within(mp, st):
			return fmt.Errorf("the mountpoint %s is inside the store %s (by its path, or through a bind mount of the store): the mount would hide that part of the store from the index and from the cleanup; mount it outside the store", c.Mountpoint, c.StoreDir)
		case within(st, mp):
			return fmt.Errorf("the store %s is inside the mountpoint %s: the mount would hide the store it guards; mount it outside the store", c.StoreDir, c.Mountpoint)
		}
	}
	for _, o := range ours {
		for _, a := range around {
			if within(o.path, a.path) {
				return fmt.Errorf("%s %s is inside %s %s: cleanup through the mount could delete it, or the daemon would write it through itself; put the index, the audit log and the control socket outside both the store and the mountpoint", o.flag, o.path, a.flag, a.path)
			}
		}
	}
	return nil
}

// resolvePath returns p absolute and with symlinks resolved as far as it exists (an index directory is
// created later), so that two spellings of one place compare equal.
func resolvePath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
		if dir == filepath.Dir(dir) {
			return abs
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// Serve runs the daemon until ctx is cancelled or the filesystem is unmounted from outside, over the
// backend that open returns (it gets c with its defaults filled in).
func Serve(ctx context.Context, c Config, open func(context.Context, Config) (Backend, error)) (err error) {
	c.defaults()
	if err := c.CheckPlacement(); err != nil {
		return err
	}
	log := c.Logger
	raiseFileLimit(log)
	// Check the mountpoint before opening the store and the (possibly long) initial sync, so a typo fails
	// in a second.
	if err := mountutil.PrepareLogged(c.Mountpoint, log); err != nil {
		return err
	}
	b, err := open(ctx, c)
	if err != nil {
		return err
	}
	// The mount's logger last: it wins over a logger among the caller's options. Flink pointed at the
	// mountpoint writes file:<mountpoint>/… references: they are store keys (unless --map says otherwise).
	mntAbs, err := filepath.Abs(c.Mountpoint)
	if err != nil {
		return err
	}
	met := metrics.New()
	// Until Serve (after the initial sync) the process keeps its GOMAXPROCS; a nil governor is off. It
	// watches the FUSE requests the metrics count, to serve several clients with every P.
	gov := procs.New(c.ServeProcs, procs.Runtime(), met.Concurrency)
	defer gov.Stop()
	ix, fl, err := openIndex(ctx, c, b, mntAbs, gov, met)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := closeIndex(ix, log); cerr != nil && err == nil {
			err = cerr
		}
	}()

	// No GOGC tuning (the mount command only sets a soft memory limit, far above this), measured: the
	// open index keeps about 60 MB live, so the default GOGC=100 sets the next collection past 120 MB,
	// and an rm -rf of 10,000 files through the mount allocates about 36 MB (3.6 KB, 78 objects per file,
	// nearly all in go-fuse and the loopback; the enforcer, audit and metrics path allocates nothing per decision): no allocation-paced GC runs
	// during it. The GCs that do run are forced by go-fuse (debug.FreeOSMemory when its inode table has
	// shrunk 100-fold), which no GC setting changes; a higher GOGC would only raise the daemon's footprint.
	stats := &gauges{walk: !b.NoIndexGauges}
	var space spaceWatch
	var q refindex.Querier = ix
	fw := newFlinkWatch(ctx, c.FlinkREST, ix, met, log, c.SyncInterval)
	defer fw.wait() // before the index closes
	sy := &syncer{c: c, b: b, ix: ix, q: q, met: met, gov: gov, log: log, fw: fw, fl: fl, stats: stats, space: &space}
	syncOnce := func() error { return sy.once(ctx) }
	t0 := time.Now()
	firstSync := sy.first(ctx)
	if firstSync != nil && ctx.Err() != nil {
		return nil // interrupted during the initial sync: not mounting
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
	// The loss check starts after the first successful sync and runs pass after pass beside the sync
	// loop (outside any lock of the enforcer).
	lw, pacer, staged := newLossWatch(c, b, ix, al, met, log, fw)
	// Passes run beside the sync loop; the running one ends before the index and the audit log close.
	lossCtx, stopLoss := context.WithCancel(ctx)
	if b.Traffic != nil {
		lossCtx = b.Traffic.Background(lossCtx)
	}
	// sweep is the store's sweeper lease (--shared): the quarantine's purge and the release of holds
	// no mount needs run under it.
	var sweep *sweepLease
	if fl != nil {
		sweep = newSweepLease(fl, c.SyncInterval, log)
		defer sweep.release()
	}
	holds, beforeChange, unguard := startHoldsFor(lossCtx, b, HoldEnv{Index: ix, Audit: al, Metrics: met, Pacer: pacer}, fl, sweep, lw)
	defer unguard()
	defer func() { stopLoss(); lw.wait(); holds.wait() }()
	enf, err := guard.NewEnforcer(guard.Config{Checker: ix, Audit: al, Metrics: met,
		RefuseErrno: c.RefuseErrno, Logger: log, BeforeChange: beforeChange, BeforeDecide: fw.hook()})
	if err != nil {
		return err
	}

	srvCtx, stopServers := context.WithCancel(context.Background())
	defer stopServers()
	metricsAddr, closeCtl, err := serveQueries(srvCtx, c, met, q)
	if err != nil {
		return err
	}
	defer closeCtl()

	m, err := b.Mount(ctx, enf, met)
	if err != nil {
		return err
	}
	passthrough := false
	if p, ok := m.(passthrougher); ok {
		passthrough = p.Passthrough()
	}
	stage, closeStaging, err := serveStaging(ctx, c, m, enf, al, met, log, fl, sweep, staged)
	if err != nil {
		_ = m.Unmount()
		return err
	}
	defer closeStaging()
	gov.Serve()
	log.Info("mounted", "store", c.StoreDir, "mountpoint", m.Mountpoint(), "passthrough", passthrough,
		"control_socket", c.ControlSocket, "audit_log", c.AuditLog, "metrics", metricsAddr,
		"serve_procs", gov.Procs())
	if c.Ready != nil {
		c.Ready(&Mounted{Mountpoint: m.Mountpoint(), ControlSocket: c.ControlSocket, AuditLog: c.AuditLog,
			MetricsAddr: metricsAddr, Passthrough: passthrough})
	}

	gone := make(chan struct{})
	go func() { m.Wait(); close(gone) }()
	if firstSync == nil {
		holds.kick()
		lw.kick(lossCtx) // after Ready: on a large store it takes a while, and the mount serves meanwhile
	}
	// The next sync is due an interval after the initial one STARTED (syncLoop says why): a long first
	// build is followed by a sync at once, not a full interval after it ended.
	loop := &syncLoop{interval: c.SyncInterval, clk: realClock{}, last: t0, sync: func(ctx context.Context) {
		if syncOnce() == nil {
			holds.kick()
			lw.kick(lossCtx)
		}
		if stage != nil {
			stage.tick(ctx)
		}
	}}
	if fl != nil && !fl.readOnly {
		defer fl.stop()
	}
	if loop.run(ctx, gone) == nil {
		// The kernel dropped the mount: `ckguard umount`, umount(8) or fusermount -u (all normal).
		log.Info("unmounted; shutting down", "mountpoint", m.Mountpoint())
		return nil
	}
	log.Info("signal received; unmounting", "mountpoint", m.Mountpoint())
	return unmount(m, gone, log)
}

// openIndex opens the daemon's index over the backend's store, in its private index folder, with
// the shared pins of the store's fleet (--shared). WithFreshIndex: an index generation that cannot
// be opened (damaged by a crash or a full disk, another schema after an upgrade) is set aside and the
// index rebuilt from the store by the initial sync, before the mount serves anything. The index is
// derived data; refusing to start would stop every cleanup until someone runs `ckguard index
// rebuild` by hand.
func openIndex(ctx context.Context, c Config, b Backend, mntAbs string, gov *procs.Governor, met *metrics.Metrics) (*refindex.Index, *fleet, error) {
	log := c.Logger
	opts := append(append([]refindex.Option{}, c.IndexOptions...), refindex.WithLogger(log), refindex.WithMountpoint(mntAbs),
		refindex.WithWork(gov.Work), refindex.WithFreshIndex())
	if c.Progress != nil {
		opts = append(opts, refindex.WithProgress(c.Progress))
	}
	// The index directory is the daemon's alone, whatever mode it was given: it holds the audit log and the
	// control socket by default, and the index's own files, which badger creates 0666 and the local mount
	// (which clears the process's umask, see localfs.Mount) leaves at that.
	if err := privateDir(c.IndexDir); err != nil {
		return nil, nil, err
	}
	warnVolatile(c.IndexDir, log)
	fl, opts, err := openFleet(ctx, c, b, met, opts)
	if err != nil {
		return nil, nil, err
	}
	ix, err := refindex.Open(c.IndexDir, b.Store, c.Policy, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("open index: %w", err)
	}
	return ix, fl, nil
}

// openFleet opens the store's shared state area for --shared and --shared-read-only (nil without
// either) and returns the index options that take the shared pins from it.
func openFleet(ctx context.Context, c Config, b Backend, met *metrics.Metrics, opts []refindex.Option) (*fleet, []refindex.Option, error) {
	if !c.Shared && !c.SharedReadOnly {
		return nil, opts, nil
	}
	log := c.Logger
	if b.Shared == nil {
		return nil, nil, fmt.Errorf("--shared: this store kind has no shared state area in this version; mount it without --shared")
	}
	if c.SharedReadOnly && b.Holds != nil {
		// Its holds would be in no mount's record of the store: none would ever release them,
		// and it could release what the others need.
		return nil, nil, fmt.Errorf("--hold with --shared-read-only: an observer writes nothing into the store's shared state, where the --shared mounts record which holds each needs; set --hold on the --shared mounts and mount the observer with --hold off")
	}
	cas, err := b.Shared(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("--shared: %w", err)
	}
	fl := newFleet(c, cas, log)
	fl.register(met)
	if c.SharedReadOnly {
		fl.readOnly = true
		log.Info("shared state, read-only: pins from the store's shared area protect here; this mount writes nothing there (no heartbeat, no pins through it)", "area", cas.Where())
		return fl, append(opts, refindex.WithSharedPins(readOnlyPins{fl.pins})), nil
	}
	log.Info("shared state: pins from the store's shared area, heartbeat after every sync", "area", cas.Where(), "mount_id", fl.rec.ID)
	return fl, append(opts, refindex.WithSharedPins(fl.pins)), nil
}

// syncer is one index sync of the daemon with what follows it: Flink's report first (a job that
// started before the listing is known when the listing is), then the fleet's heartbeat, the gauges
// and the free-space check.
type syncer struct {
	c     Config
	b     Backend
	ix    *refindex.Index
	q     refindex.Querier
	met   *metrics.Metrics
	gov   *procs.Governor
	log   *slog.Logger
	fw    *flinkWatch
	fl    *fleet
	stats *gauges
	space *spaceWatch
}

func (sy *syncer) once(ctx context.Context) error {
	t0 := time.Now()
	sy.fw.poll(ctx)
	serr := sy.ix.Sync(ctx)
	sy.met.Sync(time.Since(t0), serr)
	if serr != nil {
		sy.log.Error("index sync failed; refusing every deletion until a sync succeeds", "store", sy.c.StoreDir, "err", serr)
	} else {
		attrs := []any{"took", time.Since(t0)}
		if sy.b.SyncLogAttrs != nil {
			attrs = append(attrs, sy.b.SyncLogAttrs()...)
		}
		sy.log.Debug("index synced", attrs...)
	}
	if sy.fl != nil {
		sy.fl.afterSync(ctx, sy.ix, serr, sy.c.SyncInterval)
	}
	if sy.c.MetricsAddr != "" {
		sy.stats.refresh(ctx, sy.q, sy.met, sy.gov, sy.log)
	}
	if sy.b.Space != nil {
		sy.space.check(ctx, sy.b.Space, sy.met, sy.log)
	}
	return serr
}

// first runs the initial sync. A failed one still mounts, failing closed: reads work, every
// deletion is refused with the reason, and the periodic sync retries.
func (sy *syncer) first(ctx context.Context) error {
	sy.log.Info("syncing index with the store", "store", sy.c.StoreDir, "index", sy.c.IndexDir)
	t0 := time.Now()
	err := sy.once(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		sy.log.Info("interrupted during the initial sync; not mounting")
	case err != nil:
		sy.log.Warn("mounting with a failed index sync: every deletion will be refused until a sync succeeds", "err", err)
	default:
		sy.log.Info("index in sync", "took", time.Since(t0).Round(time.Millisecond))
	}
	return err
}

// serveQueries serves the metrics (with --metrics) and the control socket's queries until ctx ends
// and closeCtl is called; addr is where the metrics listen.
func serveQueries(ctx context.Context, c Config, met *metrics.Metrics, q refindex.Querier) (addr string, closeCtl func(), err error) {
	if c.MetricsAddr != "" {
		a, err := met.Serve(ctx, c.MetricsAddr, c.Logger)
		if err != nil {
			return "", nil, err
		}
		addr = a.String()
	}
	ctl, err := control.ServeQuerier(c.ControlSocket, q, c.Logger)
	if err != nil {
		return "", nil, err
	}
	return addr, func() { _ = ctl.Close() }, nil
}

// newLossWatch builds the loss check of the daemon, its pacer, and (with --quarantine) the finder
// of the mount's own staged deletions, which the loss check asks first, then the backend (a delete
// marker on a versioned bucket hides the object of a deletion made outside the mount).
func newLossWatch(c Config, b Backend, ix *refindex.Index, al *audit.Log, met *metrics.Metrics, log *slog.Logger, fw *flinkWatch) (*lossWatch, *pace.Limiter, *finder) {
	qfind := b.Quarantine
	var staged *finder
	if c.Quarantine > 0 {
		staged = &finder{restore: "ckguard quarantine restore --store " + c.StoreDir + " --index " + c.IndexDir}
		if qfind != nil {
			qfind = chainFinder{staged, qfind}
		} else {
			qfind = staged
		}
	}
	budget := lossBudget(c.LossCheckBudget, b.LossCheckBudget)
	pacer := lossPacer(c.LossCheckRate, b.LossCheckRate, b.Traffic)
	if b.Listings != nil {
		b.Listings.SetMaxAge(lossEvidenceAge(c.SyncInterval))
	}
	lw := &lossWatch{met: met, audit: al, log: log, interval: c.SyncInterval, pacer: pacer, budget: budget, listings: b.Listings}
	lw.lc = ix.NewLossChecker(refindex.LossCheckOptions{Budget: budget, Quarantine: qfind, Pacer: pacer,
		Chunk: lossChunk(c.SyncInterval, pacer), Progress: lw.progress, Evidence: b.Listings, FlinkRefresh: fw.lossRefresh()})
	return lw, pacer, staged
}

// startHoldsFor starts the backend's holds (--hold; nil runner and hook without) and ties them to
// the loss check (healing, observed losses) and the index (the guard of retiring a held
// _metadata); unguard undoes the index's part.
func startHoldsFor(ctx context.Context, b Backend, env HoldEnv, fl *fleet, sweep *sweepLease, lw *lossWatch) (holds *holdRunner, beforeChange func(verdict.Op, string), unguard func()) {
	unguard = func() {}
	if b.Holds == nil {
		return nil, nil, unguard
	}
	if fl != nil {
		env.Fleet = fleetHolds{shared.NewHolds(fl.cas, fl.rec.ID), sweep}
	}
	h := b.Holds(env)
	lw.heal = h.Heal
	if bc, ok := h.(changeHook); ok {
		beforeChange = bc.BeforeChange
	}
	if o, ok := h.(LossObserver); ok {
		lw.observe = o.ObserveLoss
	}
	if g, ok := h.(RetireGuarder); ok {
		env.Index.SetRetireGuard(g.GuardRetire)
		unguard = func() { env.Index.SetRetireGuard(nil) }
	}
	return startHolds(ctx, h), beforeChange, unguard
}

// serveStaging serves the quarantine of a mount that stages its deletions on the quarantine socket
// (with --shared, restores claim their entries in the shared area) and returns what closes it; an
// error when --quarantine is asked of a mount that cannot stage.
func serveStaging(ctx context.Context, c Config, m Mount, enf *guard.Enforcer, al *audit.Log, met *metrics.Metrics, log *slog.Logger, fl *fleet, sweep *sweepLease, staged *finder) (*stager, func(), error) {
	area := stagingOf(m)
	if area == nil {
		if c.Quarantine > 0 {
			return nil, nil, fmt.Errorf("--quarantine: this store's mount cannot stage deletions yet; mount it with --quarantine 0")
		}
		return nil, func() {}, nil
	}
	var rc *restoreClaims
	if fl != nil {
		rc = newRestoreClaims(fl)
	}
	stage := newStager(c, area, enf, al, met, log, rc)
	var served quarantine.Service = stage.svc
	if fl != nil {
		stage.sweep = sweep
		served = restoreService{stage.svc, rc}
	}
	if staged != nil {
		staged.area.Store(&stagingBox{area})
	}
	qs, err := control.ServeQuarantine(QuarantineSocket(c.ControlSocket), served, log)
	if err != nil {
		return nil, nil, err
	}
	stage.tick(ctx)
	return stage, func() { _ = qs.Close() }, nil
}

// unmount unmounts cleanly, or — when files are still open on the mount — detaches it lazily: the mount
// leaves the namespace at once and the daemon exits; decisions still asked by open descriptors are then
// refused because the index is closed (fail closed).
func unmount(m Mount, gone <-chan struct{}, log *slog.Logger) error {
	if err := m.Unmount(); err != nil {
		log.Warn("mount busy; detaching lazily", "mountpoint", m.Mountpoint(), "err", err)
		if derr := mountutil.Unmount(m.Mountpoint(), true); derr != nil {
			return fmt.Errorf("unmount %s: %v; lazy detach: %w", m.Mountpoint(), err, derr)
		}
	}
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		log.Warn("FUSE server still has open requests after unmount; closing anyway", "mountpoint", m.Mountpoint())
	}
	return nil
}

// indexCloseTimeout bounds the index's shutdown. Badger retries a memtable flush that cannot succeed (for
// example the index directory was removed under a running mount) forever; the index is derived data and
// crash-safe, so the daemon gives up waiting rather than never exiting.
const indexCloseTimeout = 30 * time.Second

func closeIndex(ix *refindex.Index, log *slog.Logger) error {
	done := make(chan error, 1)
	go func() { done <- ix.Close() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("close index: %w", err)
		}
		return nil
	case <-time.After(indexCloseTimeout):
		log.Error("the index did not close in time; exiting anyway (it is rebuilt or recovered at the next start)", "timeout", indexCloseTimeout)
		return fmt.Errorf("close index: timed out after %v", indexCloseTimeout)
	}
}

// raiseFileLimit raises the soft descriptor limit to the hard one (Go does so at start too; said here,
// because everything depends on it): the mount opens a store file for every open through it, the index
// holds its files open, and the metrics and control servers hold at most metrics.ServerLimits().MaxConns
// and control.ServerLimits().MaxConns connections, so no number of clients can take the rest.
func raiseFileLimit(log *slog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			log.Warn("cannot raise the open file limit", "err", err)
			_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		}
	}
	if lim.Cur < 4096 {
		log.Warn("few file descriptors: every file open through the mount takes one; raise LimitNOFILE (systemd) or ulimit -n", "limit", lim.Cur)
	}
}

// warnVolatile warns when the index directory is on memory-backed storage (tmpfs, ramfs). The index
// itself is rebuilt from the store, but the state kept beside it is not: `ckguard pin` decisions, the
// correction for a store clock that was behind, the S3 delete journal, the audit log. A reboot drops
// them, and a pinned checkpoint older than the active window is then deletable again.
func warnVolatile(dir string, log *slog.Logger) {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return
	}
	if st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC {
		log.Warn("the index directory is in memory (tmpfs): a reboot loses the pins (`ckguard pin`), the store clock's correction, the S3 delete journal and the audit log kept there, which the store cannot give back (a pinned checkpoint would be deletable again); put --index on persistent storage",
			"index", dir)
	}
}

// privateDir makes dir (and its missing parents) and gives it mode 0700.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("index directory %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("index directory %s: make it private (0700): %w", dir, err)
	}
	return nil
}
