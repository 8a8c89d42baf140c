package guardd

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinkrest"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// flinkWatch polls the --flink-rest endpoints before every sync and installs what they report in the
// index (refindex.SetFlink). It runs in the sync loop, outside every lock of the enforcer; each
// request is bounded by the client's timeout. An outage and a recovery are logged once each.
//
// On demand, too (beforeDecide, the enforcer's BeforeDecide hook): a decision about a path the
// REST facts could change (below a folder named by a job they do not protect) whose endpoints'
// view is older than one sync interval first asks those endpoints again. That runs before the
// enforcer's lock is taken, so a hung endpoint delays only the decisions waiting for it; the
// refresh is bounded by one request timeout (--flink-rest-timeout) for the whole report, and
// concurrent decisions wait for the one refresh in flight per endpoint. A refresh that fails marks
// the endpoint down, as a failed poll does: the decision is then taken fail closed in scope.
type flinkWatch struct {
	poller *flinkrest.Poller
	ix     *refindex.Index
	met    *metrics.Metrics
	log    *slog.Logger
	// maxAge is the oldest view a decision is taken with (the sync interval).
	maxAge time.Duration
	// bg is the mount's context: refreshes run in it, not in the deciding caller's (a caller that
	// gives up must not fail the refresh others wait for).
	bg context.Context
	// installMu orders installs: each installs the poller's newest state, whichever poll ends last.
	installMu sync.Mutex
	refMu     sync.Mutex
	inflight  map[string]chan struct{} // endpoint → closed when its refresh is installed
	// ended is when each endpoint's last refresh ended (answered or not). The view's age counts from
	// when a poll began, so with a request timeout near or past one sync a hung endpoint's outcome is
	// already stale when it arrives: without this, every decision would start a refresh and wait a
	// whole timeout (an unprivileged rmdir loop stalling the mount). A refresh ended less than
	// maxAge ago is not started again: at most one timeout of waiting per sync interval per endpoint.
	ended map[string]time.Time
	wg    sync.WaitGroup // refreshes running
}

func newFlinkWatch(ctx context.Context, clients []*flinkrest.Client, ix *refindex.Index, met *metrics.Metrics, log *slog.Logger, maxAge time.Duration) *flinkWatch {
	if len(clients) == 0 {
		return nil
	}
	return &flinkWatch{poller: flinkrest.NewPoller(clients), ix: ix, met: met, log: log, maxAge: maxAge, bg: ctx, inflight: map[string]chan struct{}{}, ended: map[string]time.Time{}}
}

// poll asks every endpoint once and installs the answers.
func (w *flinkWatch) poll(ctx context.Context) {
	if w == nil {
		return
	}
	_, changes := w.poller.Poll(ctx)
	w.install(changes)
}

// beforeDecide refreshes, before a decision about key (op), the endpoints whose view is older
// than one sync when what they report could change the decision (refindex.FlinkStale). It returns
// when those refreshes are installed (each bounded by a request timeout), or a refusal when ctx
// ends first: the decision must not be taken on the old view.
func (w *flinkWatch) beforeDecide(ctx context.Context, op verdict.Op, key string) *verdict.Decision {
	now := time.Now()
	urls := w.ix.FlinkStale(key, op, w.maxAge, now)
	w.refMu.Lock()
	keep := urls[:0]
	for _, u := range urls {
		if _, running := w.inflight[u]; running || now.Sub(w.ended[u]) > w.maxAge {
			keep = append(keep, u)
		}
	}
	urls = keep
	w.refMu.Unlock()
	if len(urls) == 0 {
		return nil
	}
	if i, err := w.refresh(ctx, urls); err != nil {
		return &verdict.Decision{Reason: verdict.ReasonFlinkRunning,
			Message: fmt.Sprintf("refusing to %s /%s: what the Flink REST endpoint %s reports is older than one sync (%s) and the caller gave up before it answered again (%v); try again", op, key, urls[i], w.maxAge, err)}
	}
	return nil
}

// refreshAll asks every endpoint again (the loss check, before it names a new loss in a job's
// folder: LossCheckOptions.FlinkRefresh).
func (w *flinkWatch) refreshAll(ctx context.Context) {
	var urls []string
	for _, e := range w.poller.Snapshot().Endpoints {
		urls = append(urls, e.URL)
	}
	_, _ = w.refresh(ctx, urls)
}

// refresh asks the endpoints urls again, one refresh per endpoint in flight shared by every caller,
// each bounded by a request timeout, and returns once their answers are installed, or the index of
// the one it was waiting for and ctx's cause when ctx ends first.
func (w *flinkWatch) refresh(ctx context.Context, urls []string) (int, error) {
	var waits []chan struct{}
	var start []string
	w.refMu.Lock()
	for _, u := range urls {
		ch, ok := w.inflight[u]
		if !ok {
			ch = make(chan struct{})
			w.inflight[u] = ch
			start = append(start, u)
		}
		waits = append(waits, ch)
	}
	if len(start) > 0 {
		w.wg.Add(1)
	}
	w.refMu.Unlock()
	if len(start) > 0 {
		go func() {
			defer w.wg.Done()
			_, changes := w.poller.PollSome(w.bg, start, 1)
			w.install(changes)
			w.refMu.Lock()
			end := time.Now()
			for _, u := range start {
				w.ended[u] = end
				close(w.inflight[u])
				delete(w.inflight, u)
			}
			w.refMu.Unlock()
		}()
	}
	for i, ch := range waits {
		select {
		case <-ch:
		case <-ctx.Done():
			return i, context.Cause(ctx)
		}
	}
	return 0, nil
}

// lossRefresh is the loss check's FlinkRefresh (nil without --flink-rest).
func (w *flinkWatch) lossRefresh() func(context.Context) {
	if w == nil {
		return nil
	}
	return w.refreshAll
}

// wait returns when no refresh runs any more (the mount's context ended first).
func (w *flinkWatch) wait() {
	if w != nil {
		w.wg.Wait()
	}
}

// hook is the enforcer's BeforeDecide (nil without --flink-rest).
func (w *flinkWatch) hook() func(context.Context, verdict.Op, string) *verdict.Decision {
	if w == nil {
		return nil
	}
	return w.beforeDecide
}

// install puts the poller's newest state in the index, the metrics and the log (changes once).
func (w *flinkWatch) install(changes []flinkrest.Change) {
	w.installMu.Lock()
	defer w.installMu.Unlock()
	snap := w.poller.Snapshot()
	snap.At = time.Now()
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
