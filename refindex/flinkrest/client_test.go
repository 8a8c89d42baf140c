package flinkrest

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recording is a file of testdata: what a real Flink MiniCluster answered about a running job that
// was restored from another job's checkpoint (recorded by integration TestE2EFlinkREST with
// CKGUARD_RECORD_FLINK_REST=1, never written by hand).
type recording struct {
	Flink     string                     `json:"flink"`
	Job       string                     `json:"job"`
	Responses map[string]json.RawMessage `json:"responses"`
}

func recordings(t *testing.T) map[string]recording {
	t.Helper()
	files, err := filepath.Glob("testdata/flink-*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings in testdata (%v)", err)
	}
	out := map[string]recording{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var r recording
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = r
	}
	return out
}

// serve answers the recorded paths (404 for the rest, as Flink does).
func serve(t *testing.T, r recording, check func(*http.Request) bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if check != nil && !check(req) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		body, ok := r.Responses[req.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"errors":["Not found: ` + req.URL.Path + `"]}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Every Flink version's recorded answers read into the facts the guard decides with.
func TestReportFromRecordedFlink(t *testing.T) {
	for name, r := range recordings(t) {
		t.Run(name, func(t *testing.T) {
			srv := serve(t, r, nil)
			c, err := New(Config{URL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := c.Report(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var j *Job
			for i := range rep.Jobs {
				if rep.Jobs[i].ID == r.Job {
					j = &rep.Jobs[i]
				}
			}
			if j == nil {
				t.Fatalf("flink %s: job %s not in the report %+v", r.Flink, r.Job, rep)
			}
			if j.State != "RUNNING" || j.Terminal() || j.Name == "" {
				t.Errorf("flink %s: job %+v; want RUNNING with its name", r.Flink, j)
			}
			if !strings.Contains(j.LatestCompleted, "/"+r.Job+"/chk-") || j.LatestCompletedID <= 0 {
				t.Errorf("flink %s: latest completed %q (id %d); want a chk folder of the job", r.Flink, j.LatestCompleted, j.LatestCompletedID)
			}
			// The job was restored from another job's checkpoint (the e2e's job A).
			if j.Restored == "" || strings.Contains(j.Restored, r.Job) || !strings.Contains(j.Restored, "/chk-") || j.RestoredID <= 0 {
				t.Errorf("flink %s: restored %q (id %d); want another job's chk folder", r.Flink, j.Restored, j.RestoredID)
			}
			// RETAIN_ON_CANCELLATION.
			if !j.ConfigKnown || !j.Externalized || j.DeleteOnCancellation {
				t.Errorf("flink %s: config known %v externalized %v delete on cancellation %v; want true, true, false", r.Flink, j.ConfigKnown, j.Externalized, j.DeleteOnCancellation)
			}
			if j.DetailErr != "" || j.NoCheckpointing {
				t.Errorf("flink %s: detail error %q, no checkpointing %v", r.Flink, j.DetailErr, j.NoCheckpointing)
			}
			// Every recording has checkpoints Flink subsumed (discarded: true) and the latest
			// completed one, which it keeps.
			if len(j.Discarded) == 0 || j.Started.IsZero() {
				t.Errorf("flink %s: discarded %q, started %v; want the subsumed checkpoints and the start time", r.Flink, j.Discarded, j.Started)
			}
			for _, d := range j.Discarded {
				if d == j.LatestCompleted || !strings.Contains(d, "/"+r.Job+"/chk-") {
					t.Errorf("flink %s: discarded %q; want the job's chk folders other than the latest completed %q", r.Flink, d, j.LatestCompleted)
				}
			}
			if int64(len(j.InProgress)) > j.InProgressCount {
				t.Errorf("flink %s: %d in-progress history entries, counts.in_progress %d", r.Flink, len(j.InProgress), j.InProgressCount)
			}
		})
	}
}

// The in-progress history entries of a recorded answer are found: the recorded body with one
// entry's status set to IN_PROGRESS (its field names are the real ones).
func TestReportInProgressFromRecorded(t *testing.T) {
	for name, r := range recordings(t) {
		t.Run(name, func(t *testing.T) {
			p := "/jobs/" + r.Job + "/checkpoints"
			var st map[string]any
			if err := json.Unmarshal(r.Responses[p], &st); err != nil {
				t.Fatal(err)
			}
			hist, _ := st["history"].([]any)
			if len(hist) == 0 {
				t.Fatalf("flink %s: no history in the recording", r.Flink)
			}
			h := hist[0].(map[string]any)
			h["status"] = "IN_PROGRESS"
			st["counts"].(map[string]any)["in_progress"] = 1
			b, _ := json.Marshal(st)
			r.Responses[p] = b
			srv := serve(t, r, nil)
			c, _ := New(Config{URL: srv.URL})
			s, err := c.Checkpoints(context.Background(), r.Job)
			if err != nil {
				t.Fatal(err)
			}
			var j Job
			j.fill(s)
			if j.InProgressCount != 1 || len(j.InProgress) != 1 || j.InProgress[0] != int64(h["id"].(float64)) {
				t.Errorf("flink %s: in progress %v (count %d); want [%v]", r.Flink, j.InProgress, j.InProgressCount, h["id"])
			}
		})
	}
}

// Basic and bearer authentication are sent; a refusal is an error naming the status.
func TestAuth(t *testing.T) {
	var r recording
	for _, x := range recordings(t) {
		r = x
		break
	}
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"bearer", Config{Token: "s3cret"}, true},
		{"basic", Config{Username: "flink", Password: "pw"}, true},
		{"none", Config{}, false},
		{"wrong token", Config{Token: "other"}, false},
	}
	srv := serve(t, r, func(req *http.Request) bool {
		if req.Header.Get("Authorization") == "Bearer s3cret" {
			return true
		}
		u, p, ok := req.BasicAuth()
		return ok && u == "flink" && p == "pw"
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.URL = srv.URL
			c, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Overview(context.Background())
			if tt.ok != (err == nil) {
				t.Errorf("overview: %v; want ok=%v", err, tt.ok)
			}
			if !tt.ok && (err == nil || !strings.Contains(err.Error(), "HTTP 401")) {
				t.Errorf("error %v does not name the status", err)
			}
		})
	}
	if _, err := New(Config{URL: srv.URL, Token: "a", Username: "b"}); err == nil {
		t.Error("basic and bearer together: no error")
	}
	if _, err := New(Config{URL: "http://u:p@jm:8081"}); err == nil || strings.Contains(err.Error(), "u:p") {
		t.Errorf("credentials in the URL: %v; want an error that does not repeat them", err)
	}
	for _, u := range []string{"jm:8081", "ftp://jm", "http://"} {
		if _, err := New(Config{URL: u}); err == nil {
			t.Errorf("URL %q: no error", u)
		}
	}
}

// TLS is verified unless turned off by name: an unknown CA fails, the CA file or insecure passes.
func TestTLS(t *testing.T) {
	var r recording
	for _, x := range recordings(t) {
		r = x
		break
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = w.Write(r.Responses["/jobs/overview"])
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		cfg  Config
		ok   bool
	}{{"system CAs", Config{}, false}, {"CA file", Config{CAFile: ca}, true}, {"insecure", Config{InsecureSkipVerify: true}, true}} {
		tt.cfg.URL = srv.URL
		c, err := New(tt.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Overview(context.Background()); tt.ok != (err == nil) {
			t.Errorf("%s: %v; want ok=%v", tt.name, err, tt.ok)
		}
	}
}

// A request is bounded by the timeout, and the poller reports an outage once and the recovery once,
// keeping the last answer's jobs while down.
func TestTimeoutAndPoller(t *testing.T) {
	var r recording
	for _, x := range recordings(t) {
		r = x
		break
	}
	hang := make(chan struct{})
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if down.Load() {
			<-hang
			return
		}
		body, ok := r.Responses[req.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(func() { close(hang); srv.Close() })
	c, err := New(Config{URL: srv.URL, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := NewPoller([]*Client{c})
	s, ch := p.Poll(context.Background())
	if len(ch) != 1 || !ch[0].Up || !s.Endpoints[0].Up || len(s.Endpoints[0].Jobs) == 0 {
		t.Fatalf("first poll: %+v %+v", s, ch)
	}
	down.Store(true)
	t0 := time.Now()
	s, ch = p.Poll(context.Background())
	if el := time.Since(t0); el > 2*time.Second {
		t.Errorf("a hanging endpoint took %s; want about the 200ms timeout", el)
	}
	e := s.Endpoints[0]
	if len(ch) != 1 || ch[0].Up || e.Up || e.Err == "" || e.Answered.IsZero() || len(e.Jobs) == 0 {
		t.Fatalf("poll while down: %+v %+v; want one change, the last answer's jobs kept", e, ch)
	}
	if _, ch = p.Poll(context.Background()); len(ch) != 0 {
		t.Errorf("second poll while down: changes %+v; want none (logged once)", ch)
	}
	down.Store(false)
	if s, ch = p.Poll(context.Background()); len(ch) != 1 || !ch[0].Up || !s.Endpoints[0].Up {
		t.Errorf("poll after recovery: %+v %+v", s, ch)
	}
}

// Polls of one endpoint that overlap (the sync's and a refresh before a decision): the outcome of the
// poll that began last stays, even when an older one ends after it (an answer given before the job
// started must not replace one given after).
func TestPollerNewestPollWins(t *testing.T) {
	var first atomic.Bool
	first.Store(true)
	slow := make(chan struct{})
	entered := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/jobs/overview" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if first.CompareAndSwap(true, false) {
			close(entered)
			<-slow // the older poll's answer: no job, arriving last
			_, _ = w.Write([]byte(`{"jobs":[]}`))
			return
		}
		_, _ = w.Write([]byte(`{"jobs":[{"jid":"6c79f1a2b3c4d5e6f708192a3b4c5d6e","name":"orders","state":"RUNNING"}]}`))
	}))
	defer srv.Close()
	c, err := New(Config{URL: srv.URL, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	p := NewPoller([]*Client{c})
	done := make(chan struct{})
	go func() { defer close(done); p.Poll(context.Background()) }()
	<-entered
	s, _ := p.PollSome(context.Background(), []string{c.URL()}, 1)
	if e := s.Endpoints[0]; !e.Up || len(e.Jobs) != 1 || e.Polled.IsZero() {
		t.Fatalf("refresh: %+v; want the RUNNING job", e)
	}
	close(slow)
	<-done
	if e := p.Snapshot().Endpoints[0]; len(e.Jobs) != 1 || e.Jobs[0].State != "RUNNING" {
		t.Fatalf("after the older poll ended: %+v; want the newer answer kept", e)
	}
}
