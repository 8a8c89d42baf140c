// Package guarddtest runs a guard daemon (guardd.Serve over any backend) for tests of the packages that
// build one: fs/guardd for local stores, s3backend/s3guardd for S3.
package guarddtest

import (
	"context"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
)

// Start runs run(ctx, cfg) in the background and returns once the mount is ready (cfg.Ready, if set, is
// still called). stop cancels the daemon, checks that it stopped cleanly and detaches anything left on
// the mountpoint; it runs at cleanup too, and more calls do nothing.
func Start(t testing.TB, cfg guardd.Config, run func(context.Context, guardd.Config) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	userReady := cfg.Ready
	cfg.Ready = func(m *guardd.Mounted) {
		if userReady != nil {
			userReady(m)
		}
		close(ready)
	}
	go func() { done <- run(ctx, cfg) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("daemon stopped: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("mount not ready")
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("daemon: %v", err)
			}
			_ = exec.Command("fusermount3", "-uz", cfg.Mountpoint).Run()
		})
	}
	t.Cleanup(stop)
	return stop
}
