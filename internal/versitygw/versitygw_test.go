package versitygw

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFind(t *testing.T) {
	withTool := t.TempDir()
	bin := filepath.Join(withTool, ".tools", "bin", "versitygw")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	without := t.TempDir()
	for _, tc := range []struct {
		name, env string
		dirs      []string
		want      string
		err       error
	}{
		{"the environment wins", "/opt/vgw", []string{withTool}, "/opt/vgw", nil},
		{"the first checkout holding it", "", []string{without, withTool}, bin, nil},
		{"nowhere", "", []string{without}, "", ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CKGUARD_VERSITYGW", tc.env)
			t.Setenv("PATH", without)
			got, err := Find(tc.dirs...)
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Fatalf("Find(%v) = %q, %v; want %q, %v", tc.dirs, got, err, tc.want, tc.err)
			}
		})
	}
}

func TestWaitHealthy(t *testing.T) {
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer healthy.Close()
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer sick.Close()
	exited := make(chan struct{})
	close(exited)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		endpoint string
		exited   chan struct{}
		timeout  time.Duration
		want     error
	}{
		{"answers", context.Background(), healthy.URL, nil, time.Minute, nil},
		{"process ended", context.Background(), sick.URL, exited, time.Minute, ErrExited},
		{"caller gave up", cancelled, sick.URL, nil, time.Minute, context.Canceled},
		{"never healthy", context.Background(), sick.URL, nil, 0, ErrNotHealthy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := WaitHealthy(tc.ctx, tc.endpoint, tc.exited, tc.timeout); !errors.Is(err, tc.want) {
				t.Fatalf("WaitHealthy = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"plain", nil, "--access a --secret s --port 127.0.0.1:1 --health /health --quiet posix /d"},
		{"flags before the backend", []string{"--keep-alive"}, "--access a --secret s --port 127.0.0.1:1 --health /health --quiet --keep-alive posix /d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(Args("a", "s", "127.0.0.1:1", "/d", tc.flags...), " "); got != tc.want {
				t.Errorf("Args = %q, want %q", got, tc.want)
			}
		})
	}
}
