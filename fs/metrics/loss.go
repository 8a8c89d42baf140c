package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LossStats is the answer of the mount's loss check (objects live checkpoints reference that the store
// no longer has), exported after every pass.
type LossStats struct {
	// Jobs holds every job folder with a live checkpoint, healthy ones at zero (their series go back
	// to 0 instead of vanishing).
	Jobs map[string]JobLoss
	// Objects is the number of distinct referenced objects the check covers.
	Objects int
	// LastComplete is when the last complete check ended (every referenced object stat'ed since it
	// began); zero if none yet.
	LastComplete time.Time
	// RoundPasses is how many passes a complete check takes under the request budget; above 1 a loss
	// may show only that many passes after it happened.
	RoundPasses int
	// Duration is how long the pass took (passes run beside the sync loop, 3/4 of --sync-interval
	// apart or back to back when one takes longer, and a loss then shows later).
	Duration time.Duration
	// Bound is how long after it happens a loss shows at most at the store's current size (the time
	// between two passes' starts plus a chunk, never less than the last pass measured).
	Bound time.Duration
	// Expected is the number of distinct referenced objects missing that Flink reports it deletes
	// itself (--flink-rest): not losses, not in Jobs.
	Expected int
}

// JobLoss is one job's losses.
type JobLoss struct {
	BrokenCheckpoints int
	MissingObjects    int
}

// lossMetrics are the loss check's collectors. The per-job gauges only say what the check has seen:
// ckguard_loss_check_age_seconds says how old the last complete check is (a count of 0 is only as
// fresh as that).
type lossMetrics struct {
	broken   *prometheus.GaugeVec
	missing  *prometheus.GaugeVec
	objects  prometheus.Gauge
	passes   prometheus.Gauge
	duration prometheus.Gauge
	bound    prometheus.Gauge
	expected prometheus.Gauge
	failures prometheus.Counter

	mu           sync.Mutex
	jobs         map[string]bool
	lastComplete time.Time
}

func (l *lossMetrics) register(r *prometheus.Registry) {
	l.broken = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ckguard_broken_checkpoints",
		Help: "Live checkpoints of the job that reference objects missing from the store (found by the mount's loss check).",
	}, []string{"job"})
	l.missing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ckguard_missing_referenced_objects",
		Help: "Objects referenced by live checkpoints of the job that are missing from the store (found by the mount's loss check).",
	}, []string{"job"})
	registerGauges(r, []gaugeSpec{
		{&l.objects, prometheus.GaugeOpts{Name: "ckguard_loss_check_objects",
			Help: "Distinct store objects live checkpoints reference, which the loss check stats."}},
		{&l.passes, prometheus.GaugeOpts{Name: "ckguard_loss_check_round_passes",
			Help: "Loss check passes a complete check of every referenced object takes under --loss-check-budget; above 1 a loss shows only after that many passes."}},
		{&l.duration, prometheus.GaugeOpts{Name: "ckguard_loss_check_duration_seconds",
			Help: "Duration of the last loss check pass; passes start 3/4 of --sync-interval apart, back to back when one takes longer, and a loss then shows later."}},
		{&l.expected, prometheus.GaugeOpts{Name: "ckguard_loss_expected_objects",
			Help: "Objects referenced by live checkpoints that are missing from the store because Flink deletes those checkpoints itself (with --flink-rest: discarded in the job's checkpoint history, or retained by a job that ended in a state its retention deletes on): expected deletions, not losses."}},
		{&l.bound, prometheus.GaugeOpts{Name: "ckguard_loss_check_bound_seconds",
			Help: "How long after it happens a loss shows at most at the store's current size: the time between two passes' starts (3/4 of --sync-interval, or the pass) plus a chunk of a pass (a rotation of passes: that many periods plus a pass), and never less than the last pass measured from each chunk's previous check to its report."}},
	})
	l.failures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ckguard_loss_check_failures_total",
		Help: "Loss check passes that failed (a stat error other than not-found, the index unavailable): they proved nothing.",
	})
	age := sinceGauge(prometheus.GaugeOpts{Name: "ckguard_loss_check_age_seconds",
		Help: "Seconds since the last complete loss check ended (every referenced object stat'ed since it began); -1 before the first."},
		&l.mu, &l.lastComplete)
	r.MustRegister(l.broken, l.missing, l.failures, age)
}

// SetLoss exports one loss check pass; a job no longer listed loses its series.
func (m *Metrics) SetLoss(s LossStats) {
	if m == nil {
		return
	}
	l := &m.loss
	l.mu.Lock()
	defer l.mu.Unlock()
	jobs, folded := FoldLabels(s.Jobs, MaxLabelValues, func(a, b JobLoss) JobLoss {
		return JobLoss{BrokenCheckpoints: a.BrokenCheckpoints + b.BrokenCheckpoints, MissingObjects: a.MissingObjects + b.MissingObjects}
	}, func(n JobLoss) int { return n.BrokenCheckpoints + n.MissingObjects })
	for j := range l.jobs {
		if _, ok := jobs[j]; !ok {
			l.broken.DeleteLabelValues(j)
			l.missing.DeleteLabelValues(j)
		}
	}
	if folded > 0 {
		m.labelsFolded.WithLabelValues("ckguard_broken_checkpoints").Add(float64(folded))
		m.labelsFolded.WithLabelValues("ckguard_missing_referenced_objects").Add(float64(folded))
	}
	l.jobs = map[string]bool{}
	for j, n := range jobs {
		l.jobs[j] = true
		l.broken.WithLabelValues(j).Set(float64(n.BrokenCheckpoints))
		l.missing.WithLabelValues(j).Set(float64(n.MissingObjects))
	}
	l.objects.Set(float64(s.Objects))
	l.passes.Set(float64(s.RoundPasses))
	l.duration.Set(s.Duration.Seconds())
	l.bound.Set(s.Bound.Seconds())
	l.expected.Set(float64(s.Expected))
	if !s.LastComplete.IsZero() {
		l.lastComplete = s.LastComplete
	}
}

// LossCheckFailed counts a loss check pass that failed.
func (m *Metrics) LossCheckFailed() {
	if m == nil {
		return
	}
	m.loss.failures.Inc()
}
