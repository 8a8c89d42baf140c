package connlimit

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// At most MaxConns connections are accepted at once; the others wait, and each is accepted as soon as
// an earlier one closes. Idle keep-alive connections are closed by the server (IdleTimeout), so clients
// that hold connections open cannot keep the others waiting. Closing the listener ends a waiting Accept.
func TestLimitsConnections(t *testing.T) {
	const limit, clients = 3, 12
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Connections are counted where their descriptors are: accepted by the TCP listener until closed
	// (net/http reports StateClosed only after the close has given the slot back).
	var open, peak atomic.Int32
	ln := Listen(&countingListener{Listener: tcp, open: &open, peak: &peak}, limit)
	srv := Limits{MaxConns: limit, ReadHeaderTimeout: time.Second, IdleTimeout: 100 * time.Millisecond}.Server(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") }))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// Every client sends a keep-alive request and then idles; each must get its answer and then see the
	// server close the connection.
	errs := make(chan error, clients)
	for range clients {
		go func() {
			c, err := net.Dial("tcp", tcp.Addr().String())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				errs <- err
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			var b [1]byte
			if _, err := c.Read(b[:]); !errors.Is(err, io.EOF) {
				errs <- errors.New("idle connection not closed by the server: " + errString(err))
				return
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if p := peak.Load(); p > limit || p == 0 {
		t.Errorf("%d connections open at once, limit %d", p, limit)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err == nil {
		t.Error("Serve returned no error after the listener closed")
	}
}

// countingListener counts the connections it accepted that are not closed yet, and their peak.
type countingListener struct {
	net.Listener
	open, peak *atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := l.open.Add(1)
	for p := l.peak.Load(); n > p && !l.peak.CompareAndSwap(p, n); p = l.peak.Load() {
	}
	return &countedConn{Conn: c, open: l.open}, nil
}

type countedConn struct {
	net.Conn
	once sync.Once
	open *atomic.Int32
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.open.Add(-1) })
	return err
}

func errString(err error) string {
	if err == nil {
		return "read succeeded"
	}
	return err.Error()
}
