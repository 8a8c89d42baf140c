package refindex_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/internal/hangfs"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// returnsWithin runs f and fails t when it has not returned after d (then the hung file system is
// released first, so that f can finish and the index be closed).
func returnsWithin(t *testing.T, release func(), d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		release()
		t.Fatalf("%s did not return within %s: blocked in the file system mounted inside the store", what, d)
	}
}

// TestMountInsideTheStoreIsOneUnknownSubtree (issue 29): any user who may create a folder in the store
// can fusermount there a file system whose getattr and readdir never answer. The sync, a rebuild,
// orphans, verify and a decision walking the folder above it all return; the mount point is an unknown
// subtree naming the mount (owned by nobody, who owns its folder, so it is confined: only it and its
// ancestors are refused); an unrelated old file and an old file beside the mount stay deletable, a
// referenced file stays refused.
func TestMountInsideTheStoreIsOneUnknownSubtree(t *testing.T) {
	ctx := context.Background()
	tr, _, ref := youngOrphan(t)
	old := testNow.Add(-10 * 24 * time.Hour)
	for _, k := range []string{"elsewhere/old", "scratch/old"} {
		if err := tr.Write(k, 10, old); err != nil {
			t.Fatal(err)
		}
	}
	mp := filepath.Join(tr.Root, "scratch", "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(filepath.Join(tr.Root, "scratch"), 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	hung := hangfs.Mount(t, mp)
	release := hung.Release

	ix := openIndex(t, t.TempDir(), localStore(t, tr.Root))
	defer ix.Close()
	var err error
	returnsWithin(t, release, 20*time.Second, "the sync", func() { err = ix.Sync(ctx) })
	if err != nil {
		t.Fatalf("sync with a hung mount inside the store: %v", err)
	}
	check := func(when string) {
		t.Helper()
		us := ix.UnknownSubtrees()
		if len(us) != 1 || us[0].Key != "scratch/mnt" || !strings.Contains(us[0].Cause, "another filesystem is mounted at "+mp) ||
			!strings.Contains(us[0].Cause, "does not walk into mounts inside the store") {
			t.Fatalf("%s: unknown subtrees %+v, want scratch/mnt naming the mount", when, us)
		}
		if os.Geteuid() == 0 && (us[0].UID == nil || *us[0].UID != 65534 || !us[0].Confined) {
			t.Errorf("%s: %+v, want owned by 65534 (the mount point's folder) and confined", when, us[0])
		}
		for _, tc := range []struct {
			key   string
			op    verdict.Op
			allow bool
		}{
			{"elsewhere/old", verdict.OpUnlink, true},
			{"scratch/old", verdict.OpUnlink, true},
			{ref, verdict.OpUnlink, false},
			{"scratch/mnt/chk-1/_metadata", verdict.OpUnlink, false},
			{"scratch/mnt", verdict.OpRmdir, false},
			{"scratch", verdict.OpRmdir, false}, // walks scratch: must return, and refuse (it holds the mount)
		} {
			var d verdict.Decision
			returnsWithin(t, release, 20*time.Second, "the decision on "+tc.key, func() { d = ix.Decide(ctx, tc.key, tc.op) })
			if d.Allow != tc.allow {
				t.Errorf("%s: %s %s: allow=%v (%s: %s), want %v", when, tc.op, tc.key, d.Allow, d.Reason, d.Message, tc.allow)
			}
		}
	}
	check("after the sync")
	returnsWithin(t, release, 20*time.Second, "a second sync", func() { err = ix.Sync(ctx) })
	if err != nil {
		t.Fatal(err)
	}
	returnsWithin(t, release, 20*time.Second, "the rebuild", func() { err = ix.Rebuild(ctx) })
	if err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	check("after the rebuild")
	returnsWithin(t, release, 20*time.Second, "orphans", func() { _, err = ix.Orphans(ctx, 7*24*time.Hour) })
	if err != nil {
		t.Errorf("orphans: %v", err)
	}
	returnsWithin(t, release, 20*time.Second, "verify", func() { _, err = ix.Verify(ctx) })
	if err != nil {
		t.Errorf("verify: %v", err)
	}
	// Unmounted, the next sync reads the folder again and clears it; its files are decided as usual.
	hung.Unmount(t)
	if err := tr.Write("scratch/mnt/old", 10, old); err != nil {
		t.Fatal(err)
	}
	syncIndex(t, ix)
	if us := ix.UnknownSubtrees(); len(us) != 0 {
		t.Errorf("after the unmount: unknown subtrees %+v, want none", us)
	}
	if d := ix.Decide(ctx, "scratch/mnt/old", verdict.OpUnlink); !d.Allow {
		t.Errorf("after the unmount: unlink scratch/mnt/old refused: %s %s", d.Reason, d.Message)
	}
}
