package s3server

import (
	"context"
	"net/http"
	"slices"
	"sync"
)

// Held is a hold on the proxy's requests (Proxy.Hold): matching requests are parked, neither forwarded
// nor answered, until the test answers them (Fail) or ends the hold (Release). A parked request whose
// client gives up (its timeout, a cancelled context) is dropped without reaching the server.
type Held struct {
	p     *Proxy
	op    string
	match func(*http.Request) bool

	mu       sync.Mutex
	parked   []chan bool // one per parked request: true forwards it, false answers 503
	arrived  int         // requests the hold caught so far
	released bool
	failAll  bool          // every matching request is answered 503 at once (FailAll)
	notify   chan struct{} // closed (and replaced) when a request arrives
}

// Hold parks every request of S3 operation op (see Op) for which match (nil: any) is true, until
// released: a test acts while a request of the code under test is in flight (a slow server, or one
// retrying), then answers it (Fail) or ends the hold (Release).
func (p *Proxy) Hold(op string, match func(*http.Request) bool) *Held {
	h := &Held{p: p, op: op, match: match, notify: make(chan struct{})}
	p.mu.Lock()
	p.holds = append(p.holds, h)
	p.mu.Unlock()
	return h
}

// catch parks r if a hold of the proxy matches it; it reports whether it answered r (503, or dropped
// because the client gave up), else r is to be forwarded.
func (p *Proxy) catch(w http.ResponseWriter, r *http.Request, op string) (answered bool) {
	p.mu.Lock()
	var h *Held
	for _, x := range p.holds {
		if x.op == op && (x.match == nil || x.match(r)) {
			h = x
			break
		}
	}
	p.mu.Unlock()
	if h == nil {
		return false
	}
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return false
	}
	if h.failAll {
		h.arrived++
		h.mu.Unlock()
		p.failed.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(slowDown))
		return true
	}
	ch := make(chan bool, 1)
	h.parked = append(h.parked, ch)
	h.arrived++
	close(h.notify)
	h.notify = make(chan struct{})
	h.mu.Unlock()
	select {
	case forward := <-ch:
		if forward {
			return false
		}
		p.failed.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(slowDown))
		return true
	case <-r.Context().Done():
		h.mu.Lock()
		h.parked = slices.DeleteFunc(h.parked, func(c chan bool) bool { return c == ch })
		h.mu.Unlock()
		return true
	}
}

// FailAll answers every matching request with 503 from now on, the parked ones too, until Release: a
// prefix whose listing keeps failing (a broken shard, a policy denying it) while the rest answers.
func (h *Held) FailAll() {
	h.mu.Lock()
	h.failAll = true
	parked := h.parked
	h.parked = nil
	h.mu.Unlock()
	for _, ch := range parked {
		ch <- false
	}
}

// Arrived is how many requests the hold caught so far (parked now or answered since).
func (h *Held) Arrived() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.arrived
}

// Wait blocks until the hold caught at least n requests in all, or ctx ends.
func (h *Held) Wait(ctx context.Context, n int) error {
	for {
		h.mu.Lock()
		got, ch := h.arrived, h.notify
		h.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Fail answers every request parked now with 503 SlowDown (not forwarded: the server never sees it) and
// keeps holding the next ones. It returns how many it answered.
func (h *Held) Fail() int { return h.answer(false) }

// Release forwards every parked request and ends the hold.
func (h *Held) Release() {
	h.mu.Lock()
	h.released = true
	h.mu.Unlock()
	h.answer(true)
	h.p.mu.Lock()
	h.p.holds = slices.DeleteFunc(h.p.holds, func(x *Held) bool { return x == h })
	h.p.mu.Unlock()
}

func (h *Held) answer(forward bool) int {
	h.mu.Lock()
	parked := h.parked
	h.parked = nil
	h.mu.Unlock()
	for _, ch := range parked {
		ch <- forward
	}
	return len(parked)
}
