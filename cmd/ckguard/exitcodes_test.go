package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestExitCodes checks the exit status contract the README documents, on the real binary (main.go's
// mapping included): 0 ok, 1 a problem was found, 2 usage or operational error.
func TestExitCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	exe := builtBinary(t)
	now := time.Now()
	good, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "good"), now)
	if err != nil {
		t.Fatal(err)
	}
	broken, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "broken"), now)
	if err != nil {
		t.Fatal(err)
	}
	// The incident: the old job's folder purged without the guard.
	if err := os.RemoveAll(filepath.Join(broken.Root, "checkpoints", treegen.IncidentTwoOldJob)); err != nil {
		t.Fatal(err)
	}
	idx := func() string { return filepath.Join(t.TempDir(), "index") }
	referenced := good.Referenced()[0]
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"verify green", []string{"verify", "--store", good.Root, "--index", idx()}, 0},
		{"verify red", []string{"verify", "--store", broken.Root, "--index", idx()}, 1},
		{"why refused", []string{"why", "--store", good.Root, "--index", idx(), referenced}, 1},
		{"why allowed", []string{"why", "--store", good.Root, "--index", idx(), "checkpoints/nothing-here"}, 0},
		{"version", []string{"version"}, 0},
		{"usage: missing argument", []string{"why", "--store", good.Root, "--index", idx()}, 2},
		{"usage: unknown flag", []string{"verify", "--no-such-flag"}, 2},
		{"usage: required flag missing", []string{"verify"}, 2},
		{"usage: unknown command", []string{"no-such-command"}, 2},
		{"operational: store missing", []string{"verify", "--store", filepath.Join(t.TempDir(), "missing"), "--index", idx()}, 2},
		{"usage: graph --format", []string{"graph", "--store", good.Root, "--index", idx(), "--format", "png"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, exe, tc.args...).CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.want {
				t.Errorf("ckguard %v: exit %d, want %d\n%s", tc.args, code, tc.want, out)
			}
		})
	}
}

// TestMountRefusesIndexInStore: `ckguard mount` with the index (or the daemon's log) inside
// the store exits 2 before it creates anything there.
func TestMountRefusesIndexInStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	exe := builtBinary(t)
	store, mnt := t.TempDir(), t.TempDir()
	for _, args := range [][]string{
		{"mount", "--foreground", "--store", store, "--index", filepath.Join(store, ".ckguard"), mnt},
		{"mount", "--store", store, "--index", filepath.Join(t.TempDir(), "index"), "--log-file", filepath.Join(store, "ckguard.log"), mnt},
	} {
		out, err := exec.Command(exe, args...).CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "inside the store") {
			t.Errorf("ckguard %v: %v\n%s\nwant exit 2 naming the store", args, err, out)
		}
		if entries, _ := os.ReadDir(store); len(entries) != 0 {
			t.Errorf("ckguard %v left %d entries in the store", args, len(entries))
		}
	}
}
