package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// flinkMetrics are the --flink-rest endpoints' state: one series per configured endpoint (a handful,
// set by the operator, never by a request).
type flinkMetrics struct {
	up   *prometheus.GaugeVec
	jobs *prometheus.GaugeVec

	mu  sync.Mutex
	eps map[string]bool
}

func (f *flinkMetrics) register(r *prometheus.Registry) {
	f.up = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ckguard_flink_rest_up",
		Help: "1 when the Flink REST endpoint (--flink-rest) answered the last poll, 0 when not: its jobs' folders then keep the protection they had (fail closed), and deletions there are refused until it answers.",
	}, []string{"endpoint"})
	f.jobs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ckguard_flink_jobs_running",
		Help: "Jobs not in a terminal state the Flink REST endpoint reported at its last answer (their folders are protected whatever their age).",
	}, []string{"endpoint"})
	r.MustRegister(f.up, f.jobs)
}

// FlinkEndpoint is one endpoint's state for SetFlink.
type FlinkEndpoint struct {
	URL     string
	Up      bool
	Running int
}

// SetFlink exports the endpoints' state after a poll; an endpoint no longer configured loses its series.
func (m *Metrics) SetFlink(eps []FlinkEndpoint) {
	if m == nil {
		return
	}
	f := &m.flink
	f.mu.Lock()
	defer f.mu.Unlock()
	now := map[string]bool{}
	for _, e := range eps {
		now[e.URL] = true
		v := 0.0
		if e.Up {
			v = 1
		}
		f.up.WithLabelValues(e.URL).Set(v)
		f.jobs.WithLabelValues(e.URL).Set(float64(e.Running))
	}
	for u := range f.eps {
		if !now[u] {
			f.up.DeleteLabelValues(u)
			f.jobs.DeleteLabelValues(u)
		}
	}
	f.eps = now
}
