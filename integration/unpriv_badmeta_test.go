package integration

import (
	"encoding/hex"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// realFlinkMetadata returns a `_metadata` a real Flink (1.20, RocksDB) wrote, from the shared fixtures
// beside the repository; missing fixtures skip the test, except in CI.
func realFlinkMetadata(t *testing.T) []byte {
	t.Helper()
	p, _ := filepath.Abs(filepath.Join("..", "..", "shared", "fixtures", "flink-test-resources",
		"new-stateful-broadcast-udf-migration-itcase-flink1.20-rocksdb-checkpoint", "_metadata"))
	b, err := os.ReadFile(p)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the Flink fixtures are missing: %v", err)
		}
		t.Skipf("the Flink fixtures are missing: %v", err)
	}
	return b
}

// TestUnprivBadMetadataProtectsOnlyItself: user nobody writes, through an --allow-other local mount, a
// `_metadata` Flink could not load (random bytes, empty, a real one cut in half as a JobManager that
// crashed mid-write leaves it) into a world-writable scratch folder. Before, that one file refused every
// deletion in the store. Now, after two syncs: an unreferenced old file elsewhere is deleted by the user,
// a referenced one is still refused, stats counts the file as damaged (it refuses only itself); once past
// --grace the user removes it through the mount, and the next sync forgets it.
func TestUnprivBadMetadataProtectsOnlyItself(t *testing.T) {
	mntRequire(t)
	real := realFlinkMetadata(t)
	random := make([]byte, 100)
	rand.New(rand.NewSource(29)).Read(random)
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"random", random},
		{"empty", nil},
		{"truncated", real[:len(real)/2]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, tr := unprivStore(t, "ckguard-badmeta-")
			old := time.Now().Add(-10 * 24 * time.Hour)
			if err := tr.Write("elsewhere/old-unreferenced", 100, old); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(tr.Root, "scratch"), 0o777); err != nil {
				t.Fatal(err)
			}
			// The checkpoints stay root's (the Flink user); every folder is writable by everyone, so
			// what the user may not delete is refused by the guard, not by the folder's mode.
			if out, err := exec.Command("chmod", "-R", "a+rwX", tr.Root).CombinedOutput(); err != nil {
				t.Fatalf("chmod: %v %s", err, out)
			}
			if err := os.Chmod(filepath.Join(tr.Root, "scratch"), 0o1777); err != nil {
				t.Fatal(err)
			}
			p := sharedMount(t, base, tr.Root)
			bad := "scratch/job/chk-9/_metadata"
			if out, code := asNobody(t, "/usr/bin/python3", "-c", `
import os, sys
os.makedirs(os.path.dirname(sys.argv[2]))
with open(sys.argv[2], "wb") as dst:
    dst.write(bytes.fromhex(sys.argv[1]))
`, hex.EncodeToString(tc.body), p.m(bad)); code != 0 {
				t.Fatalf("writing %s as nobody: exit %d\n%s", bad, code, out)
			}
			damagedAfterTwoSyncs(t, p, bad)
			ref := tr.Referenced()[0]
			res := unprivAttempts(t, `
attempt("old", lambda: os.unlink(sys.argv[1]))
attempt("ref", lambda: os.unlink(sys.argv[2]))
attempt("bad_young", lambda: os.unlink(sys.argv[3]))
`, p.m("elsewhere/old-unreferenced"), p.m(ref), p.m(bad))
			if res["old"] != "OK" || res["ref"] != errnoOf(1) || res["bad_young"] != errnoOf(1) {
				t.Errorf("as nobody with %s in the store: unlink old unreferenced %s (want OK), unlink referenced %s (want EPERM), unlink the young bad file %s (want EPERM: within --grace)\n%s",
					bad, res["old"], res["ref"], res["bad_young"], p.logText())
			}
			// Past --grace (backdated beside the mount) its writer removes it through the mount.
			for _, f := range []string{bad, "scratch/job/chk-9", "scratch/job"} {
				if err := os.Chtimes(filepath.Join(tr.Root, f), old, old); err != nil {
					t.Fatal(err)
				}
			}
			if out, code := asNobody(t, "rm", "-rf", p.m("scratch/job")); code != 0 {
				t.Errorf("rm -rf of the bad checkpoint folder past --grace: exit %d\n%s", code, out)
			}
			waitSyncAfter(t, p, time.Now())
			if s := p.stats(); s.DamagedMetadata != 0 || len(s.BadMetadata) != 0 {
				t.Errorf("after its removal: damaged %d, listed %+v", s.DamagedMetadata, s.BadMetadata)
			}
			mustExist(t, tr.Root, ref)
		})
	}
}

// damagedAfterTwoSyncs waits for two syncs of p and checks that the `_metadata` bad is listed as the one
// damaged `_metadata`, refusing only itself, with no sync error and nothing blocking the store.
func damagedAfterTwoSyncs(t *testing.T, p *mntProc, bad string) {
	t.Helper()
	waitSyncAfter(t, p, time.Now())
	waitSyncAfter(t, p, time.Now())
	s := p.stats()
	if s.SyncError != "" || s.DamagedMetadata != 1 || s.BlockingMetadata != 0 || len(s.BadMetadata) != 1 ||
		s.BadMetadata[0].Metadata != bad || s.BadMetadata[0].Scope != "itself" {
		t.Fatalf("stats after the bad _metadata: sync error %q, damaged %d, blocking %d, listed %+v; want %s damaged, refusing only itself\n%s",
			s.SyncError, s.DamagedMetadata, s.BlockingMetadata, s.BadMetadata, bad, p.logText())
	}
}
