package s3server

import (
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards S3 requests to a target endpoint and injects faults: a fraction of requests fail with
// 503 SlowDown before reaching the server (so they had no effect), every request can be delayed, and a
// killed proxy drops every connection as a dead server would. It preserves the Host header, so SigV4
// signatures made for the proxy's address stay valid.
type Proxy struct {
	URL string

	failPermille atomic.Int64
	latency      atomic.Int64
	killed       atomic.Bool
	requests     atomic.Int64
	failed       atomic.Int64

	srv *http.Server
	mu  sync.Mutex
	rng *rand.Rand
	ops map[string]int64 // requests by Op(r), under mu
	// inFlight: requests being served by Op(r); maxInFlight the most at once since the last MaxInFlight.
	// Under mu.
	inFlight, maxInFlight map[string]int64
	// failNext: per Op, how many of the next requests fail, and whether they reach the server first
	// (applied: the answer is lost, the change is not). Under mu.
	failNext map[string]failPlan
	// delFaults: how many more keys of DeleteObjects requests (delMatch ones) fail; see FailDeleteKeys.
	delFaults int
	delMatch  func(key string) bool
	// trace, when set (SetTrace), is told of every request once it is answered.
	trace atomic.Pointer[TraceFunc]
	// holds park matching requests until the test answers them (Hold). Under mu.
	holds []*Held
}

// TraceFunc is told of one request the proxy answered: its operation (Op), path and query, when it
// arrived and how long it took to answer (the injected latency included).
type TraceFunc func(op, target string, start time.Time, took time.Duration)

// SetTrace makes the proxy tell f of every request once answered (nil: stop): tests count requests
// by folder and token, benchmarks see which requests a walk waits on.
func (p *Proxy) SetTrace(f TraceFunc) {
	if f == nil {
		p.trace.Store(nil)
		return
	}
	p.trace.Store(&f)
}

type failPlan struct {
	n       int
	applied bool
}

// slowDown is the 503 answer every injected failure gets (the SDK's retryer retries it).
const slowDown = `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>injected by the ckguard test proxy</Message></Error>`

// FailNext makes the next n requests of S3 operation op (see Op) fail with 503. With applied, each is
// forwarded to the server first and only its answer replaced: the change happened, the client cannot
// know (a load balancer's 504 on a long copy, a connection reset after the server committed).
func (p *Proxy) FailNext(op string, n int, applied bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failNext[op] = failPlan{n: n, applied: applied}
}

// takeFailure reports whether this request of op is one FailNext asked to fail, and whether it is
// forwarded first.
func (p *Proxy) takeFailure(op string) (fail, applied bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.failNext[op]
	if f.n <= 0 {
		return false, false
	}
	f.n--
	p.failNext[op] = f
	return true, f.applied
}

// NewProxy starts a proxy on a free 127.0.0.1 port in front of target; it is closed at the end of the test.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := StartProxy(target, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// StartProxy starts a proxy listening on addr in front of target, outside a test (the benchmark
// scripts put it between a mount and versitygw). Close stops it.
func StartProxy(target, addr string) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{URL: "http://" + l.Addr().String(), rng: rand.New(rand.NewPCG(1, 2)), ops: map[string]int64{},
		inFlight: map[string]int64{}, maxInFlight: map[string]int64{}, failNext: map[string]failPlan{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	// Keep a connection per request in flight open to the target (the default transport keeps two and
	// opens a new connection for every further concurrent request, which a client with 48 in flight
	// would measure instead of the server).
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 512, 512
	rp.Transport = tr
	rp.ErrorLog = nil
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		op := Op(r)
		if tf := p.trace.Load(); tf != nil {
			start := time.Now()
			defer func() { (*tf)(op, r.URL.RequestURI(), start, time.Since(start)) }()
		}
		p.mu.Lock()
		p.ops[op]++
		p.inFlight[op]++
		p.maxInFlight[op] = max(p.maxInFlight[op], p.inFlight[op])
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			p.inFlight[op]--
			p.mu.Unlock()
		}()
		if p.killed.Load() {
			p.failed.Add(1)
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					_ = c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		if p.catch(w, r, op) {
			return
		}
		if d := time.Duration(p.latency.Load()); d > 0 {
			// A client that gave up (timeout) closes the connection: the request is then never forwarded,
			// as with a server that did not get to it.
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		fail, applied := p.takeFailure(Op(r))
		if !fail {
			if pm := p.failPermille.Load(); pm > 0 {
				p.mu.Lock()
				fail = p.rng.Int64N(1000) < pm
				p.mu.Unlock()
			}
		}
		if fail {
			p.failed.Add(1)
			if applied {
				rp.ServeHTTP(discardResponse{header: http.Header{}}, r)
			}
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(slowDown))
			return
		}
		if Op(r) == "DeleteObjects" && p.serveDeleteFaults(w, r, rp) {
			return
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(l) }()
	return p, nil
}

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() { _ = p.srv.Close() }

// SetFailRate makes the given fraction (0..1) of requests fail with 503.
func (p *Proxy) SetFailRate(f float64) { p.failPermille.Store(int64(f * 1000)) }

// SetLatency delays every request by d.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Kill drops every request from now on (connection closed without a response); Revive undoes it.
func (p *Proxy) Kill()   { p.killed.Store(true) }
func (p *Proxy) Revive() { p.killed.Store(false) }

// Stats returns the number of requests seen and of injected failures.
func (p *Proxy) Stats() (requests, failed int64) { return p.requests.Load(), p.failed.Load() }

// Ops returns the requests seen so far by S3 operation (Op), and resets the counts: a test measures one
// step at a time.
func (p *Proxy) Ops() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.ops
	p.ops = map[string]int64{}
	return out
}

// MaxInFlight returns the most requests of each S3 operation (Op) served at once since the last call,
// and resets it to those in flight now.
func (p *Proxy) MaxInFlight() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.maxInFlight
	p.maxInFlight = make(map[string]int64, len(p.inFlight))
	for op, n := range p.inFlight {
		p.maxInFlight[op] = n
	}
	return out
}

// Op names the S3 operation of a path-style request, enough to count what a client did: "ListObjectsV2",
// "HeadObject", "GetObject", "PutObject", "DeleteObject", "DeleteObjects", "CopyObject", "HeadBucket",
// multipart calls, else "METHOD".
func Op(r *http.Request) string {
	q := r.URL.Query()
	object := strings.Count(strings.Trim(r.URL.Path, "/"), "/") > 0 // path style: /bucket/key
	switch r.Method {
	case http.MethodGet:
		switch {
		case q.Has("list-type"):
			return "ListObjectsV2"
		case object:
			return "GetObject"
		}
		return "ListObjects"
	case http.MethodHead:
		if object {
			return "HeadObject"
		}
		return "HeadBucket"
	case http.MethodPut:
		switch {
		case q.Has("partNumber"):
			return "UploadPart"
		case r.Header.Get("X-Amz-Copy-Source") != "":
			return "CopyObject"
		case object:
			return "PutObject"
		}
		return "CreateBucket"
	case http.MethodDelete:
		if q.Has("uploadId") {
			return "AbortMultipartUpload"
		}
		return "DeleteObject"
	case http.MethodPost:
		switch {
		case q.Has("delete"):
			return "DeleteObjects"
		case q.Has("uploads"):
			return "CreateMultipartUpload"
		case q.Has("uploadId"):
			return "CompleteMultipartUpload"
		}
	}
	return r.Method
}

// discardResponse takes the server's answer to a request whose answer is to be lost.
type discardResponse struct{ header http.Header }

func (d discardResponse) Header() http.Header         { return d.header }
func (d discardResponse) Write(b []byte) (int, error) { return len(b), nil }
func (d discardResponse) WriteHeader(int)             {}
