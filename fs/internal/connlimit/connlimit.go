// Package connlimit bounds what the daemon's HTTP servers (metrics, control socket) can be made to hold:
// open connections and the time each may stay open. Every connection costs the daemon a descriptor, from
// the same table the mount opens store files and the index opens its files with; without a bound, any
// local user could open idle connections until the mount's own opens fail with EMFILE.
package connlimit

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits bounds one server.
type Limits struct {
	// MaxConns is the most connections open at once. More wait in the kernel's listen backlog (which
	// costs the daemon no descriptor) until one closes.
	MaxConns int
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are http.Server's: a client that does
	// not send its request, does not read its answer, or keeps an idle keep-alive connection is cut off.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// MaxHeaderBytes bounds a request's headers (0: net/http's 1 MB).
	MaxHeaderBytes int
}

// Server is an http.Server for h with l's timeouts. Serve it on Listen(ln, l.MaxConns).
func (l Limits) Server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: l.ReadHeaderTimeout, ReadTimeout: l.ReadTimeout,
		WriteTimeout: l.WriteTimeout, IdleTimeout: l.IdleTimeout, MaxHeaderBytes: l.MaxHeaderBytes}
}

// Listen returns ln accepting at most max connections at a time: Accept waits (without accepting, so
// without a descriptor) while max are open, until one is closed or the listener is.
func Listen(ln net.Listener, max int) net.Listener {
	return &listener{Listener: ln, slots: make(chan struct{}, max), done: make(chan struct{})}
}

type listener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &conn{Conn: c, free: func() { <-l.slots }}, nil
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// conn gives its slot back when closed (once, however often Close is called).
type conn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// NetConn returns the accepted connection (for SO_PEERCRED on a unix socket), as tls.Conn does.
func (c *conn) NetConn() net.Conn { return c.Conn }

// Unwrap returns the connection c accepted, or c itself when it is not one of this package's.
func Unwrap(c net.Conn) net.Conn {
	if w, ok := c.(*conn); ok {
		return w.Conn
	}
	return c
}
