package guardd

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinkrest"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

const refreshJob = "6c79f1a2b3c4d5e6f708192a3b4c5d6e"

// fakeJM is a JobManager's REST API as the poller reads it: the overview lists refreshJob in state
// (none while ""); hang makes every request wait until release is closed (then it answers).
type fakeJM struct {
	state     atomic.Value // string
	hang      atomic.Bool
	release   chan struct{}
	entered   chan struct{} // one value per request that hangs
	overviews atomic.Int64
}

func newFakeJM(t *testing.T) (*fakeJM, *httptest.Server) {
	jm := &fakeJM{release: make(chan struct{}), entered: make(chan struct{}, 16)}
	jm.state.Store("")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if jm.hang.Load() {
			jm.entered <- struct{}{}
			<-jm.release
		}
		switch {
		case r.URL.Path == "/jobs/overview":
			jm.overviews.Add(1)
			jobs := ""
			if s := jm.state.Load().(string); s != "" {
				jobs = fmt.Sprintf(`{"jid":%q,"name":"orders","state":%q}`, refreshJob, s)
			}
			fmt.Fprintf(w, `{"jobs":[%s]}`, jobs)
		default:
			http.NotFound(w, r) // checkpointing not enabled: the job's state alone decides
		}
	}))
	t.Cleanup(func() {
		select {
		case <-jm.release:
		default:
			close(jm.release)
		}
		srv.Close()
	})
	return jm, srv
}

// openFlinkIndex opens an index of the local store at root whose policy asks the JobManager at url
// (closed when the test ends).
func openFlinkIndex(t *testing.T, root, url string) *refindex.Index {
	t.Helper()
	ls, err := localstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	pol := refindex.DefaultPolicy()
	pol.FlinkREST = []string{url}
	ix, err := refindex.Open(filepath.Join(t.TempDir(), "index"), ls, pol, refindex.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	return ix
}

// refreshingEnforcer returns a Flink watch of the JobManager at url (requests time out after timeout,
// a view older than maxAge is refreshed) and an enforcer that lets it refresh before each decision,
// after one poll and one sync of ix. The watch is stopped, and its refreshes waited for, when the
// test ends, before ix closes.
func refreshingEnforcer(t *testing.T, ix *refindex.Index, url string, timeout, maxAge time.Duration) (*flinkWatch, *guard.Enforcer) {
	t.Helper()
	ctx := context.Background()
	cl, err := flinkrest.New(flinkrest.Config{URL: url, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	bg, stop := context.WithCancel(ctx)
	w := newFlinkWatch(bg, []*flinkrest.Client{cl}, ix, metrics.New(), slog.New(slog.DiscardHandler), maxAge)
	t.Cleanup(func() {
		stop()
		w.wait()
	})
	w.poll(ctx)
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	enf, err := guard.NewEnforcer(guard.Config{Checker: ix, BeforeDecide: w.hook()})
	if err != nil {
		t.Fatal(err)
	}
	return w, enf
}

// A decision below a job folder whose REST view is older than one sync asks the endpoint first: a job
// that turned RUNNING after the last poll keeps its working folder without waiting for the next sync.
// The refresh runs before the enforcer's lock: while the endpoint hangs, decisions that need no
// refresh (and an exclusive one) go through, concurrent decisions share one refresh, and a refresh
// that fails marks the endpoint down (decided as REST-down: the job RUNNING at its last answer stays).
func TestFlinkRefreshBeforeDecision(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	old := now.Add(-10 * 24 * time.Hour)
	ft, err := treegen.ForSt(filepath.Join(t.TempDir(), "store"), now, treegen.ForStSpec{JobID: refreshJob, Newest: old, WorkingMTime: old, Attempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	unrelated := "scratch/part-0"
	if err := ft.Write(unrelated, 10, old); err != nil {
		t.Fatal(err)
	}
	jm, srv := newFakeJM(t)
	ix := openFlinkIndex(t, ft.Root, srv.URL)
	// A request timeout far beyond the test: only the test ends a hung refresh. The sync's poll
	// finds no job yet.
	w, enf := refreshingEnforcer(t, ix, srv.URL, time.Minute, time.Hour)
	decide := func(ctx context.Context, key string) verdict.Decision {
		var d verdict.Decision
		enf.Mutate(ctx, []guard.Check{{Op: verdict.OpUnlink, Path: key, Result: &d}}, nil)
		return d
	}
	work := ft.Working[0]

	// The job starts after the poll. A view younger than one sync is used as it is.
	jm.state.Store("RUNNING")
	if d := decide(ctx, work); !d.Allow || jm.overviews.Load() != 1 {
		t.Fatalf("unlink %s with a view younger than a sync: %+v after %d overviews; want allowed by the store's rules, no refresh", work, d, jm.overviews.Load())
	}
	// Older than one sync: refreshed first, and the job's folder is protected at once.
	w.maxAge = 0
	d := decide(ctx, work)
	if d.Allow || d.Reason != verdict.ReasonFlinkRunning || !strings.Contains(d.Message, "is RUNNING on "+srv.URL) {
		t.Fatalf("unlink %s after the job started, view older than a sync: %+v; want refused as %s", work, d, verdict.ReasonFlinkRunning)
	}
	if n := jm.overviews.Load(); n != 2 {
		t.Fatalf("%d overviews; want 2 (the poll and one refresh)", n)
	}
	// A job the facts protect needs no refresh.
	if d := decide(ctx, work); d.Allow || jm.overviews.Load() != 2 {
		t.Fatalf("unlink %s of a job reported RUNNING: %+v after %d overviews; want refused without a refresh", work, d, jm.overviews.Load())
	}

	// The job is cancelled; the endpoint then hangs.
	jm.state.Store("CANCELED")
	w.poll(ctx)
	before := jm.overviews.Load()
	jm.hang.Store(true)
	waiting, cancelA := context.WithCancel(ctx)
	defer cancelA()
	var wg sync.WaitGroup
	var da, dc verdict.Decision
	wg.Add(2)
	go func() { defer wg.Done(); da = decide(waiting, ft.Working[0]) }()
	<-jm.entered // the refresh reached the endpoint, which does not answer
	go func() { defer wg.Done(); dc = decide(waiting, ft.Working[1]) }()
	// Decisions that need no refresh go through meanwhile, an exclusive one too: the lock is free.
	if d := decide(ctx, unrelated); !d.Allow {
		t.Fatalf("unlink %s (no job folder) while the endpoint hangs: %+v; want allowed", unrelated, d)
	}
	var dx verdict.Decision
	if errno := enf.MutateExclusive(ctx, []guard.Check{{Op: verdict.OpUnlink, Path: unrelated, Result: &dx}}, func() syscall.Errno { return 0 }); errno != 0 || !dx.Allow {
		t.Fatalf("exclusive decision on %s while the endpoint hangs: %v %+v; want allowed", unrelated, errno, dx)
	}
	cancelA() // their callers give up (an interrupted rm): they return refused, the refresh goes on
	wg.Wait()
	for _, d := range []verdict.Decision{da, dc} {
		if d.Allow || d.Reason != verdict.ReasonFlinkRunning || !strings.Contains(d.Message, "gave up before it answered again") {
			t.Fatalf("a decision whose caller gave up during the refresh: %+v; want refused (not taken on the old view)", d)
		}
	}
	// The endpoint answers again: the refresh in flight installs its answer (CANCELED). Both
	// decisions below the job folder waited for that one refresh.
	jm.hang.Store(false)
	close(jm.release)
	w.wait()
	if n := jm.overviews.Load() - before; n != 1 {
		t.Fatalf("%d overviews for two concurrent decisions; want one refresh shared", n)
	}
	if d := decide(ctx, work); !d.Allow {
		t.Fatalf("unlink %s of a job reported CANCELED: %+v; want allowed by the store's rules", work, d)
	}

	// A refresh that fails is the endpoint down, decided as REST-down is: another job, unknown at
	// the last answer, that wrote a checkpoint since, keeps its folder.
	w.poll(ctx)
	other := "flink/0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	c, err := ft.Checkpoint(treegen.Spec{Dir: other + "/chk-3", ID: 3, Completed: time.Now(), Private: []string{"a1b2"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ft.Data(c, time.Now()); err != nil {
		t.Fatal(err)
	}
	garbage := other + "/shared/old-sst"
	if err := ft.Write(garbage, 10, old); err != nil {
		t.Fatal(err)
	}
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if d := decide(ctx, garbage); d.Allow || d.Reason != verdict.ReasonFlinkRunning || !strings.Contains(d.Message, "does not answer since") {
		t.Fatalf("unlink %s after the endpoint stopped answering: %+v; want refused, fail closed", garbage, d)
	}
	if s := ix.FlinkStatus(); len(s.Endpoints) != 1 || s.Endpoints[0].Up {
		t.Fatalf("stats after a failed refresh: %+v; want the endpoint down", s)
	}
}

type memSink struct{ recs []audit.Record }

func (m *memSink) Record(r *audit.Record) error { m.recs = append(m.recs, *r); return nil }

// A pair Flink deletes itself is audited once as "expected" with its reason, logged at INFO (no
// loss WARN), counted in ckguard_loss_expected_objects and in no job's loss gauges.
func TestLossWatchRecordsExpected(t *testing.T) {
	var logs bytes.Buffer
	sink := &memSink{}
	met := metrics.New()
	w := &lossWatch{met: met, audit: sink, log: slog.New(slog.NewTextHandler(&logs, nil))}
	job := "flink/" + refreshJob
	exp := refindex.LostReference{Path: job + "/shared/sst-1", Checkpoint: job + "/chk-12/_metadata", Job: job,
		Expected: "Flink deletes it: job " + refreshJob + " is CANCELED on http://jm:8081 and its checkpoints are deleted on cancellation"}
	rep := &refindex.LossReport{Time: time.Now(), Jobs: map[string]refindex.JobLoss{job: {}},
		Expected:    []refindex.LostReference{exp, {Path: exp.Path, Checkpoint: job + "/chk-11/_metadata", Job: job, Expected: exp.Expected}},
		NewExpected: []refindex.LostReference{exp}}
	w.publish(rep, metrics.LossStats{})
	if len(sink.recs) != 1 || sink.recs[0].Decision != expectedDecision || sink.recs[0].Reason != expectedReason || !strings.Contains(sink.recs[0].Message, "CANCELED") {
		t.Fatalf("audit %+v; want one %q record with the reason", sink.recs, expectedDecision)
	}
	if strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "as expected") {
		t.Fatalf("log %s; want INFO, no WARN", logs.String())
	}
	if g := gauge(t, met, "ckguard_loss_expected_objects"); g != 1 {
		t.Fatalf("ckguard_loss_expected_objects %v; want 1 (one object, two checkpoints)", g)
	}
	if g := gauge(t, met, "ckguard_broken_checkpoints"); g != 0 {
		t.Fatalf("ckguard_broken_checkpoints %v; want 0", g)
	}
	// Named once: the next report's pair is no longer new.
	rep.NewExpected = nil
	w.publish(rep, metrics.LossStats{})
	if len(sink.recs) != 1 {
		t.Fatalf("audit after the second report: %d records; want 1", len(sink.recs))
	}
}

// A hung endpoint whose request timeout is longer than one sync must not make every decision wait
// a timeout: a refresh that ended (answered or not) less than one sync ago is not asked again, so an
// unprivileged loop of rmdir outside job folders waits at most one timeout per sync, not per call.
func TestFlinkRefreshHungEndpointOncePerSync(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	ft, err := treegen.ForSt(filepath.Join(t.TempDir(), "store"), now, treegen.ForStSpec{JobID: refreshJob, Newest: now, WorkingMTime: now, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	jm, srv := newFakeJM(t)
	ix := openFlinkIndex(t, ft.Root, srv.URL)
	// The timeout is longer than the sync (maxAge): measured from when the refresh began, its
	// outcome is already older than one sync when it ends.
	_, enf := refreshingEnforcer(t, ix, srv.URL, 1500*time.Millisecond, time.Second)
	jm.hang.Store(true)
	time.Sleep(1100 * time.Millisecond) // the sync's view is now older than one sync
	before := jm.overviews.Load()
	var entered int
	for i := range 5 {
		var d verdict.Decision
		enf.Mutate(ctx, []guard.Check{{Op: verdict.OpRmdir, Path: fmt.Sprintf("scratch-%d", i), Result: &d}}, nil)
		for drained := false; !drained; {
			select {
			case <-jm.entered:
				entered++
			default:
				drained = true
			}
		}
	}
	if entered != 1 {
		t.Fatalf("5 rmdirs outside job folders against a hung endpoint sent %d refreshes (overviews answered %d); want 1: each further one waits a whole timeout", entered, jm.overviews.Load()-before)
	}
}
