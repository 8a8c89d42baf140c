// Package fusetest holds helpers for tests that need a real FUSE mount.
package fusetest

import (
	"os"
	"testing"
)

// Require skips t when /dev/fuse is unusable or the test runs with -short; in CI (CI=true) a missing
// /dev/fuse fails the test instead, so a broken CI image cannot silently turn the mount tests off.
func Require(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("real FUSE mount: skipped with -short")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err == nil {
		f.Close()
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("/dev/fuse is required in CI: %v (install fuse3, run as root or with /dev/fuse access)", err)
	}
	t.Skipf("/dev/fuse unavailable: %v", err)
}
