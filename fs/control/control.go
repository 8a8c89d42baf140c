// Package control serves an index's queries on a unix socket while a mount holds the index (badger allows one
// process), so `ckguard why|checkpoints|orphans|verify|stats|pin|unpin` work during a mount.
//
// Protocol: HTTP/1.1 over the unix socket. POST /v1/<Method> with a JSON array of the method's arguments
// (without the context); the answer is 200 with a JSON array of its results (without the error), or an
// error status with {"error": "..."}. A client that sends the header Ckguard-Strings: escaped has its
// arguments unescaped and the answer escaped (internal/jsonbytes: JSON alone would replace the invalid
// UTF-8 of a name with U+FFFD, and a pin or a listing would be of another name); the answer says so with
// the same header. The socket is mode 0600, owned by the user running the mount, and
// every connection's peer credentials are checked (same uid or root), so other local users can neither
// query nor pin/unpin.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/ckguard/ckguard/fs/internal/connlimit"
	"github.com/ckguard/ckguard/internal/jsonbytes"
)

// stringsHeader negotiates escaped strings (jsonbytes): a client and a mount of different versions
// still understand each other, without it.
const (
	stringsHeader  = "Ckguard-Strings"
	stringsEscaped = "escaped"
)

// SocketName is the control socket's file name inside the index directory.
const SocketName = "ckguard.sock"

// DefaultSocket is the well-known control socket of the mount that holds the index in indexDir.
func DefaultSocket(indexDir string) string { return filepath.Join(indexDir, SocketName) }

var ctxType = reflect.TypeFor[context.Context]()
var errType = reflect.TypeFor[error]()

// Server answers the methods of one interface, implemented by impl.
type Server struct {
	path    string
	ino     uint64 // the socket's inode at path: Close removes path only while it is still this socket
	ln      *net.UnixListener
	srv     *http.Server
	methods map[string]reflect.Value
	log     *slog.Logger
}

// Listen creates the socket at path (replacing a stale one left by a crash) and serves impl's methods of
// interface iface (a pointer-to-interface type's Elem, e.g. reflect.TypeFor[refindex.Querier]()).
func Listen(path string, impl any, iface reflect.Type, log *slog.Logger) (*Server, error) {
	if iface.Kind() != reflect.Interface {
		return nil, fmt.Errorf("control: %v is not an interface", iface)
	}
	s := &Server{path: path, methods: map[string]reflect.Value{}, log: log}
	v := reflect.ValueOf(impl)
	for i := 0; i < iface.NumMethod(); i++ {
		m := iface.Method(i)
		mv := v.MethodByName(m.Name)
		if !mv.IsValid() {
			return nil, fmt.Errorf("control: %T lacks %s", impl, m.Name)
		}
		t := mv.Type()
		if t.NumIn() < 1 || t.In(0) != ctxType || t.NumOut() < 1 || t.Out(t.NumOut()-1) != errType {
			return nil, fmt.Errorf("control: %s must take a context first and return an error last", m.Name)
		}
		s.methods[m.Name] = mv
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if _, err := os.Lstat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s: another ckguard mount is serving it", path)
		}
		// Left behind by a crashed mount: nobody listens.
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control socket %s: remove stale socket: %w", path, err)
		}
	}
	ln, ino, err := bindPrivately(path, nil)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	s.ino = ino
	s.ln = ln
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/{method}", s.handle)
	mux.HandleFunc("GET "+heapPath, s.heap)
	s.srv = ServerLimits().Server(mux)
	s.srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, peerKey{}, peerUID(c))
	}
	go func() {
		if err := s.srv.Serve(connlimit.Listen(ln, ServerLimits().MaxConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("control socket stopped", "path", path, "err", err)
		}
	}()
	return s, nil
}

// ServerLimits bounds the control socket (root and the mount's owner only: its mode is 0600). A query
// over a whole store (orphans, verify) may take minutes to answer, hence the long write timeout.
func ServerLimits() connlimit.Limits {
	return connlimit.Limits{MaxConns: 16, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: time.Hour, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
}

type peerKey struct{}

// peerUID is the uid of the process at the other end of a unix connection, or -1.
func peerUID(c net.Conn) int {
	uc, ok := connlimit.Unwrap(c).(*net.UnixConn)
	if !ok {
		return -1
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1
	}
	uid := -1
	_ = raw.Control(func(fd uintptr) {
		cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
		if err == nil {
			uid = int(cred.Uid)
		}
	})
	return uid
}

// permitted answers 403 and reports false unless the caller is root or the mount's own user (every
// request: the socket's mode alone is not trusted).
func permitted(w http.ResponseWriter, r *http.Request) bool {
	uid, ok := r.Context().Value(peerKey{}).(int)
	if !ok || uid < 0 {
		// No credentials for the peer: never assume root (fail closed).
		writeErr(w, http.StatusForbidden, errors.New("the control socket could not identify the caller (SO_PEERCRED); refusing"))
		return false
	}
	if uid != 0 && uid != os.Geteuid() {
		writeErr(w, http.StatusForbidden, fmt.Errorf("uid %d may not use this control socket (owner uid %d)", uid, os.Geteuid()))
		return false
	}
	return true
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if !permitted(w, r) {
		return
	}
	name := r.PathValue("method")
	mv, ok := s.methods[name]
	if !ok {
		writeErr(w, http.StatusNotFound, fmt.Errorf("no method %q", name))
		return
	}
	t := mv.Type()
	var raw []json.RawMessage
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err == nil && len(body) > 0 {
		err = json.Unmarshal(body, &raw)
	}
	if err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("%s: arguments: %w", name, err))
		return
	}
	if len(raw) != t.NumIn()-1 {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("%s takes %d arguments, got %d", name, t.NumIn()-1, len(raw)))
		return
	}
	escaped := r.Header.Get(stringsHeader) == stringsEscaped
	in := []reflect.Value{reflect.ValueOf(r.Context())}
	for i, a := range raw {
		p := reflect.New(t.In(i + 1))
		err := json.Unmarshal(a, p.Interface())
		if err == nil && escaped {
			err = jsonbytes.Unescape(p.Interface())
		}
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%s: argument %d: %w", name, i+1, err))
			return
		}
		in = append(in, p.Elem())
	}
	out := mv.Call(in)
	if e := out[len(out)-1]; !e.IsNil() {
		writeErr(w, http.StatusInternalServerError, e.Interface().(error))
		return
	}
	res := make([]any, 0, len(out)-1)
	for _, o := range out[:len(out)-1] {
		if escaped {
			res = append(res, jsonbytes.Escape(o.Interface()))
		} else {
			res = append(res, o.Interface())
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if escaped {
		w.Header().Set(stringsHeader, stringsEscaped)
	}
	if err := json.NewEncoder(w).Encode(res); err != nil {
		s.log.Debug("control: write answer", "method", name, "err", err)
	}
}

func writeErr(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Close stops serving and removes the socket.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if fi, lerr := os.Lstat(s.path); lerr == nil && inode(fi) == s.ino {
		_ = os.Remove(s.path)
	}
	return err
}

// bindPrivately creates the listening socket at path with mode 0600 without ever changing the mode of
// anything a user can put at path: the socket is bound and chmodded in a fresh 0700 folder beside path,
// which only this process can enter, and then renamed onto path (a rename replaces whatever a user put
// there, a symlink included, and follows nothing). A chmod by name at path itself would follow a symlink
// swapped in after the bind when path's folder is writable by others. beforeRename is a test hook.
func bindPrivately(path string, beforeRename func()) (*net.UnixListener, uint64, error) {
	dir, err := os.MkdirTemp(filepath.Dir(path), ".cks")
	if err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, 0, fmt.Errorf("%w (the socket is bound at %s first: choose a shorter --control-socket path)", err, tmp)
	}
	ln.SetUnlinkOnClose(false) // its name is path once renamed; Server.Close removes that
	fail := func(err error) (*net.UnixListener, uint64, error) {
		ln.Close()
		return nil, 0, err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fail(err)
	}
	fi, err := os.Lstat(tmp)
	if err != nil {
		return fail(err)
	}
	if beforeRename != nil {
		beforeRename()
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	return ln, inode(fi), nil
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// Client calls a Server.
type Client struct {
	path string
	hc   *http.Client
}

// Dial returns a client for the socket at path after checking that a server answers there, run by root or
// by this user.
func Dial(path string) (*Client, error) {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return nil, err
	}
	err = trustServer(c, path)
	c.Close()
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			return nil, err
		}
		if err := trustServer(c, path); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}}
	return &Client{path: path, hc: &http.Client{Transport: tr}}, nil
}

// trustServer accepts the process serving c only when it runs as root, as this user, or as the owner of the
// socket's directory when only that owner may write there: a socket planted by someone else in a shared
// index directory could otherwise answer `ckguard orphans` with files a cleanup script then deletes from
// the store directly.
func trustServer(c net.Conn, path string) error {
	uid := peerUID(c)
	if uid == 0 || uid == os.Geteuid() {
		return nil
	}
	// A mount run by another user (flink) in its own index directory, asked by root: the
	// directory's owner runs it, and nobody else could have put a socket there.
	var st syscall.Stat_t
	if uid >= 0 && syscall.Stat(filepath.Dir(path), &st) == nil && int(st.Uid) == uid && st.Mode&0o022 == 0 {
		return nil
	}
	return fmt.Errorf("control socket %s is served by uid %d, neither root nor you (uid %d): not trusting its answers; check who created it, and keep the index directory writable only by the user running the mount", path, uid, os.Geteuid())
}

// RemoteError is an error the server's method returned.
type RemoteError struct {
	Method, Msg string
	Status      int
}

func (e *RemoteError) Error() string {
	if e.Status == http.StatusForbidden {
		return "control socket: " + e.Msg
	}
	return e.Msg
}

// Call invokes method with args and decodes its results into the pointers in results.
func (c *Client) Call(ctx context.Context, method string, args []any, results ...any) error {
	if args == nil {
		args = []any{}
	}
	esc := make([]any, len(args))
	for i, a := range args {
		esc[i] = jsonbytes.Escape(a)
	}
	body, err := json.Marshal(esc)
	if err != nil {
		return fmt.Errorf("control %s: %w", method, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://ckguard/v1/"+method, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(stringsHeader, stringsEscaped)
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("control socket %s: %s: %w", c.path, method, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return remoteError(resp, method)
	}
	var raw []json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		return fmt.Errorf("control %s: answer: %w", method, err)
	}
	if len(raw) != len(results) {
		return fmt.Errorf("control %s: %d results, want %d (client and mount of different versions?)", method, len(raw), len(results))
	}
	// A mount of a version before escaped strings answers without the header: nothing to unescape
	// (and a string of its answer that merely looks escaped is left alone).
	escaped := resp.Header.Get(stringsHeader) == stringsEscaped
	for i, r := range raw {
		err := json.Unmarshal(r, results[i])
		if err == nil && escaped && jsonbytes.Escaped(r) {
			err = jsonbytes.Unescape(results[i])
		}
		if err != nil {
			return fmt.Errorf("control %s: result %d: %w", method, i+1, err)
		}
	}
	return nil
}

// remoteError is the error answer of resp to method.
func remoteError(resp *http.Response, method string) error {
	var e struct{ Error string }
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if e.Error == "" {
		e.Error = resp.Status
	}
	return &RemoteError{Method: method, Msg: e.Error, Status: resp.StatusCode}
}

// Close releases idle connections.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}
