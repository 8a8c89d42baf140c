package guardd

import (
	"context"
	"log/slog"

	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinkrest"
)

// flinkWatch polls the --flink-rest endpoints before every sync and installs what they report in the
// index (refindex.SetFlink). It runs in the sync loop, outside every lock of the enforcer; each
// request is bounded by the client's timeout. An outage and a recovery are logged once each.
type flinkWatch struct {
	poller *flinkrest.Poller
	ix     *refindex.Index
	met    *metrics.Metrics
	log    *slog.Logger
}

func newFlinkWatch(clients []*flinkrest.Client, ix *refindex.Index, met *metrics.Metrics, log *slog.Logger) *flinkWatch {
	if len(clients) == 0 {
		return nil
	}
	return &flinkWatch{poller: flinkrest.NewPoller(clients), ix: ix, met: met, log: log}
}

// poll asks every endpoint once and installs the answers.
func (w *flinkWatch) poll(ctx context.Context) {
	if w == nil {
		return
	}
	snap, changes := w.poller.Poll(ctx)
	w.ix.SetFlink(snap)
	byURL := map[string]flinkrest.Endpoint{}
	var eps []metrics.FlinkEndpoint
	for _, e := range snap.Endpoints {
		byURL[e.URL] = e
		n := 0
		for _, j := range e.Jobs {
			if !j.Terminal() {
				n++
			}
		}
		eps = append(eps, metrics.FlinkEndpoint{URL: e.URL, Up: e.Up, Running: n})
	}
	w.met.SetFlink(eps)
	for _, c := range changes {
		e := byURL[c.URL]
		switch {
		case c.Up:
			w.log.Info("Flink REST endpoint answers; its jobs are judged by what it reports", "endpoint", c.URL, "jobs", len(e.Jobs))
		case e.Answered.IsZero():
			w.log.Warn("Flink REST endpoint does not answer and has not answered since the mount started: every folder named by a job id that no answering endpoint reports is protected until it answers (fail closed)", "endpoint", c.URL, "err", c.Err)
		default:
			w.log.Warn("Flink REST endpoint does not answer: the jobs it reported at its last answer, and jobs that checkpointed since, keep their folders protected until it answers (fail closed)", "endpoint", c.URL, "err", c.Err, "last_answer", e.Answered, "jobs", len(e.Jobs))
		}
	}
}

// FlinkClients builds the clients of the --flink-rest endpoints (one Config each).
func FlinkClients(cfgs []flinkrest.Config) ([]*flinkrest.Client, error) {
	var out []*flinkrest.Client
	for _, c := range cfgs {
		cl, err := flinkrest.New(c)
		if err != nil {
			return nil, err
		}
		out = append(out, cl)
	}
	return out, nil
}
