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
