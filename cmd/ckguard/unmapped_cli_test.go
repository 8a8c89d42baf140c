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

// runExe runs the built binary and returns its exit status and output.
func runExe(t *testing.T, exe string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// verify and orphans are never green on references they could not check: exit 3, saying which and
// what to add; a relocated real Flink store whose files are where its URIs say is checked (exit 0).
func TestUnmappedExitCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	exe := builtBinary(t)
	unmapped, err := treegen.YoungOrphan(filepath.Join(t.TempDir(), "unmapped"), time.Now(), treegen.Options{URIPrefix: "file:/mnt/flink"})
	if err != nil {
		t.Fatal(err)
	}
	// One referenced file lost: the store no longer proves where the references live.
	for _, c := range unmapped.Live {
		for _, r := range c.Refs {
			if strings.Contains(r, "/shared/") {
				if err := os.Remove(filepath.Join(unmapped.Root, r)); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
	}
	relocated := filepath.Join(t.TempDir(), "srv", "flink")
	if err := os.MkdirAll(filepath.Dir(relocated), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", "../../testdata/flink/1.20/incremental/store", relocated).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	idx := func() string { return filepath.Join(t.TempDir(), "index") }
	for _, tc := range []struct {
		name string
		args []string
		want int
		says string
	}{
		{"verify unmapped", []string{"verify", "--store", unmapped.Root, "--index", idx()}, 3, "--map file:/mnt/flink="},
		{"verify unmapped --json", []string{"verify", "--json", "--store", unmapped.Root, "--index", idx()}, 3, `"unmapped_refs_not_checked": `},
		{"orphans unmapped", []string{"orphans", "--store", unmapped.Root, "--index", idx()}, 3, "--external file:/mnt/flink/flink/"},
		{"verify external", []string{"verify", "--store", unmapped.Root, "--index", idx(), "--external", "file:/mnt/flink"}, 0, "below --external"},
		{"verify relocated real store", []string{"verify", "--store", relocated, "--index", idx()}, 0, "verify OK"},
		{"graph relocated real store", []string{"graph", "--format", "dot", "--store", relocated, "--index", idx()}, 0, `-> "folder:f2f9994b885a9bcfa9edf01d7651f7ba"`},
		{"stats relocated real store", []string{"stats", "--json", "--store", relocated, "--index", idx()}, 0, `"file:/tmp/ckguard-fixtures/1.20/incremental/store="`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runExe(t, exe, tc.args...)
			if code != tc.want || !strings.Contains(out, tc.says) {
				t.Errorf("ckguard %v: exit %d, want %d saying %q\n%s", tc.args, code, tc.want, tc.says, out)
			}
		})
	}
}

// Nonsense is refused up front: a mountpoint inside the store (it would hide part of the store from the
// index), the store inside the mountpoint, the store as its own mountpoint; why on a file that is
// neither in the store nor in a mount of it.
func TestRefuseNonsense(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	exe := builtBinary(t)
	tr, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(tr.Root, "flink-checkpoints-mnt")
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	outer := t.TempDir()
	nested := filepath.Join(outer, "store")
	if err := os.Mkdir(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	idx := func() string { return filepath.Join(t.TempDir(), "index") }
	for _, tc := range []struct {
		name string
		args []string
		want int
		says string
	}{
		{"mountpoint inside the store", []string{"mount", "--foreground", "--store", tr.Root, "--index", idx(), inside}, 2, "is inside the store"},
		{"store inside the mountpoint", []string{"mount", "--foreground", "--store", nested, "--index", idx(), outer}, 2, "is inside the mountpoint"},
		{"mountpoint is the store", []string{"mount", "--foreground", "--store", tr.Root, "--index", idx(), tr.Root}, 2, "is the store"},
		{"why /etc/passwd", []string{"why", "--store", tr.Root, "--index", idx(), "/etc/passwd"}, 2, "outside the store"},
		{"why on an absolute store path", []string{"why", "--store", tr.Root, "--index", idx(), filepath.Join(tr.Root, tr.Referenced()[0])}, 1, "REFUSED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runExe(t, exe, tc.args...)
			if code != tc.want || !strings.Contains(out, tc.says) {
				t.Errorf("ckguard %v: exit %d, want %d saying %q\n%s", tc.args, code, tc.want, tc.says, out)
			}
		})
	}
	if entries, _ := os.ReadDir(inside); len(entries) != 0 {
		t.Errorf("the refused mount left %d entries in %s", len(entries), inside)
	}
}
