// Package metrics holds the Prometheus metrics of a guarded mount: decisions, index health and FUSE operation
// latency. Every Metrics has its own registry (no global state), so tests and several mounts in one process do
// not collide.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ckguard/ckguard/fs/internal/connlimit"
)

// IndexStats is the index state exported as gauges, refreshed after every sync.
type IndexStats struct {
	LiveCheckpoints int64
	LiveSavepoints  int64
	ReferencedBytes int64
	OrphanedBytes   int64
	LastSync        time.Time     // completion of the last successful sync; zero if none
	ClockBehind     time.Duration // how far ages of store files are corrected for the store's clock
	// UnmappedReferences: references neither mapped, inferred from the store nor --external (the files
	// they could be are refused); InferredMaps: prefix maps the store proved.
	UnmappedReferences int64
	InferredMaps       int64
	// UnknownSubtrees: store entries the last sync could not read (refused in their scope; no per-path
	// label: their number is bounded by what users create, their keys are in `ckguard stats`).
	UnknownSubtrees int64
	// Unparseable `_metadata` by what they refuse: Damaged only themselves (Flink cannot load them
	// either), Confined their own folder (an untrusted writer), Blocking every deletion.
	DamagedMetadata, ConfinedMetadata, BlockingMetadata int64
}

// Metrics is the set of collectors of one mount.
type Metrics struct {
	Registry *prometheus.Registry

	refusals       *prometheus.CounterVec
	allowed        *prometheus.CounterVec
	notifyErrors   *prometheus.CounterVec
	syncDuration   prometheus.Histogram
	syncFailures   prometheus.Counter
	fuseLatency    *prometheus.HistogramVec
	decideLatency  *prometheus.HistogramVec
	liveCkpt       prometheus.Gauge
	liveSavepoints prometheus.Gauge
	refBytes       prometheus.Gauge
	orphanBytes    prometheus.Gauge
	clockBehind    prometheus.Gauge
	unmappedRefs   prometheus.Gauge
	unparseable    *prometheus.GaugeVec
	inferredMaps   prometheus.Gauge
	unknownTrees   prometheus.Gauge
	loss           lossMetrics
	flink          flinkMetrics // --flink-rest endpoints (flink.go)
	qObjects       prometheus.Gauge
	qBytes         prometheus.Gauge
	qOldest        atomic.Int64 // unix nanoseconds of the oldest quarantine entry; 0: none
	labelsFolded   *prometheus.CounterVec
	storeFree      prometheus.Gauge
	storeSize      prometheus.Gauge
	spaceOnce      sync.Once

	// Children resolved once per label set: WithLabelValues hashes the labels and takes the vector's lock
	// on every call, and these are counted on the path of every guarded operation.
	decisions sync.Map // decisionKey -> prometheus.Counter
	decideObs sync.Map // op -> prometheus.Observer

	// FUSE requests being answered now, and counts since the last Concurrency call: requests begun, and
	// those begun while another was being answered.
	inflight, begun, overlapped atomic.Int64

	mu       sync.Mutex
	lastSync time.Time
}

type decisionKey struct {
	op, reason string
	allowed    bool
}

// New creates the collectors and registers them (plus Go runtime and process collectors) in a fresh registry.
func New() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ckguard_refusals_total",
		Help: "Guarded operations refused, by reason and operation.",
	}, []string{"reason", "op"})
	m.allowed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ckguard_allowed_total",
		Help: "Guarded operations allowed (deletions, renames, truncations), by operation.",
	}, []string{"op"})
	m.notifyErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ckguard_index_notify_errors_total",
		Help: "Changes made through the mount that the index failed to record (picked up by the next sync).",
	}, []string{"kind"})
	m.syncDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ckguard_sync_duration_seconds",
		Help:    "Duration of index syncs against the store.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	})
	m.syncFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ckguard_sync_failures_total",
		Help: "Index syncs that failed (the guard refuses everything while the index is stale).",
	})
	m.fuseLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ckguard_fuse_op_duration_seconds",
		Help:    "Time the daemon spent answering FUSE requests, by operation.",
		Buckets: prometheus.ExponentialBuckets(5e-6, 4, 10),
	}, []string{"op"})
	m.decideLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ckguard_decision_duration_seconds",
		Help:    "Time the index took to decide a guarded operation, by operation (part of the FUSE latency).",
		Buckets: prometheus.ExponentialBuckets(1e-6, 4, 10),
	}, []string{"op"})
	// One series per scope (itself, folder, store), never per path: any user can make bad files.
	m.unparseable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ckguard_unparseable_metadata",
		Help: "_metadata files the index cannot parse, by what they refuse: scope=\"itself\" (damaged: Flink cannot restore from them either, so they protect nothing but themselves), \"folder\" (a newer format or too large, written by a user who does not own the job folder: deletions in its folder), \"store\" (the same from the job folder's owner: every deletion). `ckguard stats` names them.",
	}, []string{"scope"})
	// The plain gauges, set from what the index and the quarantine report: made and registered here.
	registerGauges(m.Registry, []gaugeSpec{
		{&m.liveCkpt, prometheus.GaugeOpts{Name: "ckguard_live_checkpoints", Help: "Live checkpoints in the index."}},
		{&m.liveSavepoints, prometheus.GaugeOpts{Name: "ckguard_live_savepoints", Help: "Live savepoints in the index."}},
		{&m.refBytes, prometheus.GaugeOpts{Name: "ckguard_referenced_bytes", Help: "Bytes of store objects that are not garbage: referenced by live checkpoints/savepoints or protected by policy (store bytes minus orphaned bytes)."}},
		{&m.orphanBytes, prometheus.GaugeOpts{Name: "ckguard_orphaned_bytes", Help: "Bytes of unreferenced store objects past the grace period."}},
		{&m.unmappedRefs, prometheus.GaugeOpts{Name: "ckguard_unmapped_references", Help: "References of live checkpoints that no --map ties to the store, the store does not place and no --external declares: every store file that could be one of them is refused, and verify cannot be green."}},
		{&m.inferredMaps, prometheus.GaugeOpts{Name: "ckguard_inferred_maps", Help: "Prefix maps the store proved for references no --map covers (applied; add them as --map to make them explicit)."}},
		{&m.unknownTrees, prometheus.GaugeOpts{Name: "ckguard_unknown_subtrees", Help: "Store entries the last index sync could not read (unreadable folders, listing errors): deletions that could touch what they may hold are refused; `ckguard stats` names them."}},
		{&m.clockBehind, prometheus.GaugeOpts{Name: "ckguard_store_clock_behind_seconds", Help: "How far ages of store files are corrected because the store's clock is (or was, within --grace) behind this host's; 0 when the clocks agree."}},
		{&m.qObjects, prometheus.GaugeOpts{Name: "ckguard_quarantine_objects", Help: "Objects staged in the store's quarantine folder by deletions through the mount (--quarantine), awaiting restore or purge."}},
		{&m.qBytes, prometheus.GaugeOpts{Name: "ckguard_quarantine_bytes", Help: "Bytes of the objects staged in the quarantine folder."}},
	})
	lag := sinceGauge(prometheus.GaugeOpts{Name: "ckguard_index_lag_seconds",
		Help: "Seconds since the last successful index sync (-1 before the first)."}, &m.mu, &m.lastSync)
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ckguard_fuse_requests_in_flight",
		Help: "FUSE requests the daemon is answering now.",
	}, func() float64 { return float64(m.inflight.Load()) })
	qOldest := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ckguard_quarantine_oldest_seconds",
		Help: "Age of the oldest quarantine entry (0 when empty); past the TTL means the purge is behind.",
	}, func() float64 {
		t := m.qOldest.Load()
		if t == 0 {
			return 0
		}
		return time.Since(time.Unix(0, t)).Seconds()
	})
	m.Registry.MustRegister(m.unparseable)
	for _, sc := range []string{"itself", "folder", "store"} {
		m.unparseable.WithLabelValues(sc).Set(0)
	}
	m.labelsFolded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ckguard_metric_label_values_folded_total",
		Help: "Label values (job folders, which any user who can write the store can create) beyond MaxLabelValues of a metric, exported folded into the value \"" + OtherLabel + "\" instead of a series each, by metric; counted once per export.",
	}, []string{"metric"})
	// Registered at the first SetStoreSpace: a store without a filesystem (S3) exports no free space
	// (a 0 would read as a full disk).
	m.storeFree = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ckguard_store_free_bytes", Help: "Bytes still available to writers on the store's filesystem (statfs f_bavail of the store root; HDFS: the cluster's remaining space or the store folder's space quota left, whichever is less, over its replication); not exported for S3."})
	m.storeSize = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ckguard_store_size_bytes", Help: "Size in bytes of the store's filesystem (statfs of the store root; HDFS: the cluster's capacity or the store folder's space quota, as for ckguard_store_free_bytes); not exported for S3."})
	m.Registry.MustRegister(m.labelsFolded)
	m.Registry.MustRegister(m.refusals, m.allowed, m.notifyErrors, m.syncDuration, m.syncFailures,
		m.fuseLatency, m.decideLatency, lag, inflight, qOldest,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.loss.register(m.Registry)
	m.flink.register(m.Registry)
	return m
}

// Concurrency returns how many FUSE requests began since the last call, and how many of them began while
// another was still being answered (fs/procs reads it to tell one client working through the mount from
// several).
func (m *Metrics) Concurrency() (begun, overlapped int64) {
	return m.begun.Swap(0), m.overlapped.Swap(0)
}

// Decision counts one guarded decision.
func (m *Metrics) Decision(op string, allowed bool, reason string) {
	if m == nil {
		return
	}
	k := decisionKey{op: op, allowed: allowed}
	if !allowed {
		k.reason = reason // allowed_total has no reason label: one child per op
	}
	if c, ok := m.decisions.Load(k); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	var c prometheus.Counter
	if allowed {
		c = m.allowed.WithLabelValues(op)
	} else {
		c = m.refusals.WithLabelValues(reason, op)
	}
	m.decisions.Store(k, c) // a racing Store keeps the same child: the vector hands out one per label set
	c.Inc()
}

// DecisionLatency records how long the index took to decide op.
func (m *Metrics) DecisionLatency(op string, d time.Duration) {
	if m == nil {
		return
	}
	o, ok := m.decideObs.Load(op)
	if !ok {
		o = m.decideLatency.WithLabelValues(op)
		m.decideObs.Store(op, o)
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

// NotifyError counts a change the index failed to record; kind is "deleted", "written" or "renamed".
func (m *Metrics) NotifyError(kind string) {
	if m == nil {
		return
	}
	m.notifyErrors.WithLabelValues(kind).Inc()
}

// Sync records one index sync.
func (m *Metrics) Sync(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.syncDuration.Observe(d.Seconds())
	if err != nil {
		m.syncFailures.Inc()
	}
}

// SetQuarantine updates the quarantine gauges (oldest: zero when empty).
func (m *Metrics) SetQuarantine(objects int, bytes int64, oldest time.Time) {
	if m == nil {
		return
	}
	m.qObjects.Set(float64(objects))
	m.qBytes.Set(float64(bytes))
	if oldest.IsZero() {
		m.qOldest.Store(0)
	} else {
		m.qOldest.Store(oldest.UnixNano())
	}
}

// SetStoreSpace updates the size and free space of the store's filesystem.
func (m *Metrics) SetStoreSpace(size, free int64) {
	if m == nil {
		return
	}
	m.spaceOnce.Do(func() { m.Registry.MustRegister(m.storeFree, m.storeSize) })
	m.storeSize.Set(float64(size))
	m.storeFree.Set(float64(free))
}

// SetIndexStats updates the index gauges.
func (m *Metrics) SetIndexStats(s IndexStats) {
	if m == nil {
		return
	}
	m.SetStoreBytes(s.ReferencedBytes, s.OrphanedBytes)
	m.SetIndexCounts(s)
}

// SetStoreBytes updates the gauges that need a walk of the store (referenced and orphaned bytes).
func (m *Metrics) SetStoreBytes(referenced, orphaned int64) {
	if m == nil {
		return
	}
	m.refBytes.Set(float64(referenced))
	m.orphanBytes.Set(float64(orphaned))
}

// SetIndexCounts updates the gauges the index answers from memory: live checkpoints and savepoints,
// the store clock correction and the last sync (the lag); the byte fields of s are ignored.
func (m *Metrics) SetIndexCounts(s IndexStats) {
	if m == nil {
		return
	}
	m.liveCkpt.Set(float64(s.LiveCheckpoints))
	m.liveSavepoints.Set(float64(s.LiveSavepoints))
	m.clockBehind.Set(s.ClockBehind.Seconds())
	m.unmappedRefs.Set(float64(s.UnmappedReferences))
	m.inferredMaps.Set(float64(s.InferredMaps))
	m.unknownTrees.Set(float64(s.UnknownSubtrees))
	m.unparseable.WithLabelValues("itself").Set(float64(s.DamagedMetadata))
	m.unparseable.WithLabelValues("folder").Set(float64(s.ConfinedMetadata))
	m.unparseable.WithLabelValues("store").Set(float64(s.BlockingMetadata))
	m.mu.Lock()
	if !s.LastSync.IsZero() {
		m.lastSync = s.LastSync
	}
	m.mu.Unlock()
}

// ServerLimits bounds the metrics endpoint, which any local user can connect to: a Prometheus scrape is
// one short request every few seconds, on one keep-alive connection per scraper.
func ServerLimits() connlimit.Limits {
	return connlimit.Limits{MaxConns: 16, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: 16 << 10}
}

// Serve exposes /metrics on addr (host:port) until ctx is done, within ServerLimits(). It returns once the
// listener is bound, so a bad address is reported at mount time rather than lost in a goroutine.
func (m *Metrics) Serve(ctx context.Context, addr string, log *slog.Logger) (net.Addr, error) {
	return m.ServeWithin(ctx, addr, ServerLimits(), log)
}

// ServeWithin is Serve within lim.
func (m *Metrics) ServeWithin(ctx context.Context, addr string, lim connlimit.Limits, log *slog.Logger) (net.Addr, error) {
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	warnIfExposed(tcp.Addr(), addr, log)
	ln := connlimit.Listen(tcp, lim.MaxConns)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	srv := lim.Server(mux)
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "addr", addr, "err", err)
		}
	}()
	return ln.Addr(), nil
}

// warnIfExposed says (WARN, at start) when the endpoint listens beyond the loopback interface: the
// metrics carry job folder names, sizes and refusal counts of the store, and the endpoint has no
// authentication, so anyone who reaches the port reads them.
func warnIfExposed(bound net.Addr, asked string, log *slog.Logger) {
	ta, ok := bound.(*net.TCPAddr)
	if !ok || ta.IP.IsLoopback() {
		return
	}
	where := "address " + ta.String()
	if ta.IP.IsUnspecified() {
		where = "every interface (" + ta.String() + ")"
	}
	log.Warn("the metrics endpoint listens on "+where+", not on the loopback: anyone who can reach the port reads the store's job names, sizes and refusal counts, unauthenticated; bind it to 127.0.0.1 (--metrics-addr 127.0.0.1:PORT) or protect it (a firewall, or a TLS/authenticating proxy in front)",
		"metrics_addr", asked, "bound", ta.String())
}

// sinceGauge exports the seconds since *t, read under mu at each scrape; -1 while *t is zero (never
// happened), so a dashboard cannot mistake "not yet" for "just now".
func sinceGauge(opts prometheus.GaugeOpts, mu *sync.Mutex, t *time.Time) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(opts, func() float64 {
		mu.Lock()
		defer mu.Unlock()
		if t.IsZero() {
			return -1
		}
		return time.Since(*t).Seconds()
	})
}

// gaugeSpec is a plain gauge to make and register: where it goes and its name and help.
type gaugeSpec struct {
	gauge *prometheus.Gauge
	opts  prometheus.GaugeOpts
}

func registerGauges(r *prometheus.Registry, specs []gaugeSpec) {
	for _, g := range specs {
		*g.gauge = prometheus.NewGauge(g.opts)
		r.MustRegister(*g.gauge)
	}
}
