package control

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

type answer struct {
	Key   string
	Count int
}

type api interface {
	Get(ctx context.Context, key string, n int) (answer, error)
	Fail(ctx context.Context) error
}

type impl struct{}

func (impl) Get(ctx context.Context, key string, n int) (answer, error) {
	return answer{Key: strings.ToUpper(key), Count: n * 2}, nil
}
func (impl) Fail(ctx context.Context) error { return errors.New("index is stale") }

// serveAndDial serves impl (methods of iface) on a fresh socket and dials it; the server and the
// client are closed when the test ends.
func serveAndDial(t *testing.T, impl any, iface reflect.Type) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), SocketName)
	s, err := Listen(sock, impl, iface, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, SocketName)
	// A stale socket file from a crash must be replaced.
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Listen(sock, impl{}, reflect.TypeFor[api](), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm() != 0o600 || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket mode %v %v", st.Mode(), err)
	}
	if _, err := Listen(sock, impl{}, reflect.TypeFor[api](), slog.Default()); err == nil {
		t.Fatal("second server on a live socket accepted")
	}
	c, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var a answer
	if err := c.Call(context.Background(), "Get", []any{"chk-1", 21}, &a); err != nil {
		t.Fatal(err)
	}
	if a != (answer{"CHK-1", 42}) {
		t.Fatalf("got %+v", a)
	}
	err = c.Call(context.Background(), "Fail", nil)
	if err == nil || err.Error() != "index is stale" {
		t.Fatalf("remote error: %v", err)
	}
	if err := c.Call(context.Background(), "Nope", nil); err == nil {
		t.Fatal("unknown method accepted")
	}
}

// A user who can write in the socket's folder swaps the socket's name for a symlink to a file of theirs
// (or root's) between the bind and the chmod: the daemon changes the mode of nothing but its own socket,
// and path ends up the 0600 socket.
func TestBindChmodsNothingSwappedIn(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ctl.sock")
	ln, _, err := bindPrivately(path, func() {
		if err := os.Symlink(victim, path); err != nil {
			t.Fatal(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("the file a symlink at the socket's path named: %v, %v (want mode 0644 unchanged)", fi.Mode(), err)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket path: %v, %v (want a 0600 socket)", fi.Mode(), err)
	}
	if names, _ := os.ReadDir(dir); len(names) != 2 {
		t.Fatalf("the private bind folder was left behind: %v", names)
	}
}

// Close removes the socket, and never what replaced it at its path.
func TestCloseRemovesOnlyItsSocket(t *testing.T) {
	for _, replaced := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "ctl.sock")
		s, err := Listen(path, impl{}, reflect.TypeFor[api](), slog.Default())
		if err != nil {
			t.Fatal(err)
		}
		if replaced {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		_, err = os.Lstat(path)
		if replaced != (err == nil) {
			t.Errorf("replaced %v: after Close, Lstat: %v", replaced, err)
		}
	}
}
