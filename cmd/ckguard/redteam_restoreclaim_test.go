package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/localbackend/localquarantine"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/shared"
)

// TestRedteamRestoreClaimedByACrashedMount: a --shared mount claimed the restore of a staged file and
// was killed before it moved it. `ckguard quarantine restore` of that path on the store refuses naming
// that mount's host and the claim's time and when it lapses, and the file stays staged, byte for byte.
func TestRedteamRestoreClaimedByACrashedMount(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "job/chk-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "job/chk-1/f"), []byte("state"), 0o644); err != nil {
		t.Fatal(err)
	}
	q, err := localquarantine.OpenLocal(root, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	dfd, err := unix.Open(filepath.Join(root, "job/chk-1"), unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	e, err := q.MoveAt(dfd, "f", "job/chk-1/f", quarantine.Decision{Op: "unlink", Reason: "deletable"})
	unix.Close(dfd)
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	area, err := shared.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	claimed := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	if err := shared.ClaimRestore(ctx, area, shared.Restore{Entry: e.ID, Key: "job/chk-1/f", Mount: "crashed-0123456789ab", Host: "crashed"}, claimed); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, stderr, code := runCLI(t, nil, "quarantine", "restore", "--store", root, "/job/chk-1/f")
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("restore waited %v", took)
	}
	if code == 0 {
		t.Fatalf("restored over a live claim of another mount: %s", stderr)
	}
	for _, want := range []string{"crashed", claimed.Format(time.RFC3339), claimed.Add(shared.RestoreClaimTTL).Format(time.RFC3339)} {
		if !strings.Contains(stderr, want) {
			t.Errorf("refusal does not name %q: %s", want, stderr)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "job/chk-1/f")); err == nil {
		t.Error("the file was restored")
	}
	q, err = localquarantine.OpenLocal(root, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	es, err := q.List(ctx)
	if err != nil || len(es) != 1 || es[0].ID != e.ID {
		t.Fatalf("the staged entry after the refusal: %v %v", es, err)
	}
}
