//go:build hdfs

package integration

import (
	"encoding/hex"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestHDFSBadMetadataProtectsOnlyItself (issue 29 part 2 on HDFS, tag hdfs): on a real MiniDFSCluster
// whose store folders are 0777 (HDFS then lets other local users write through an --allow-other
// mount), user nobody writes through the mount, into a scratch folder's chk-9, a `_metadata` Flink could not load (random bytes, empty,
// a real Flink 1.20 one cut in half). After two syncs: an unreferenced old file
// elsewhere is deleted by nobody, a referenced one is refused, stats lists it as damaged, refusing
// only itself; past --grace nobody removes it through the mount and the next sync forgets it.
func TestHDFSBadMetadataProtectsOnlyItself(t *testing.T) {
	mntRequire(t)
	real := realFlinkMetadata(t)
	random := make([]byte, 100)
	rand.New(rand.NewSource(29)).Read(random)
	c := minidfs.Start(t, minidfs.Options{})
	for i, tc := range []struct {
		name string
		body []byte
	}{
		{"random", random},
		{"empty", nil},
		{"truncated", real[:len(real)/2]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storeDir := c.Root() + "/badmeta-" + tc.name
			root := c.URI(storeDir)
			now := time.Now()
			tr, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "tree"), now, treegen.Options{URIPrefix: root})
			if err != nil {
				t.Fatal(err)
			}
			old := now.Add(-10 * 24 * time.Hour)
			if err := tr.Write("elsewhere/old-unreferenced", 100, old); err != nil {
				t.Fatal(err)
			}
			// The folders are made beside the mount: one nobody makes through it is the mounting user's,
			// 0755 (HDFS shows owners as the mounting user), and nobody could not write into it.
			if err := os.MkdirAll(filepath.Join(tr.Root, "scratch", "job", "chk-9"), 0o777); err != nil {
				t.Fatal(err)
			}
			c.Upload(t, tr.Root, storeDir)
			if _, err := c.DFS(t, "-chmod", "-R", "777", storeDir); err != nil {
				t.Fatal(err)
			}
			base, err := os.MkdirTemp("", "ckguard-hdfs-badmeta-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			p := sharedMount(t, base, root)
			bad := "scratch/job/chk-9/_metadata"
			if out, code := asNobody(t, "/usr/bin/python3", "-c", `
import os, sys
with open(sys.argv[2], "wb") as dst:
    dst.write(bytes.fromhex(sys.argv[1]))
`, hex.EncodeToString(tc.body), p.m(bad)); code != 0 {
				t.Fatalf("writing %s as nobody: exit %d\n%s\n%s", bad, code, out, p.logText())
			}
			damagedAfterTwoSyncs(t, p, bad)
			ref := tr.Referenced()[0]
			res := unprivAttempts(t, `
attempt("old", lambda: os.unlink(sys.argv[1]))
attempt("ref", lambda: os.unlink(sys.argv[2]))
attempt("bad_young", lambda: os.unlink(sys.argv[3]))
`, p.m("elsewhere/old-unreferenced"), p.m(ref), p.m(bad))
			if res["old"] != "OK" || res["ref"] != errnoOf(syscall.EPERM) || res["bad_young"] != errnoOf(syscall.EPERM) {
				t.Errorf("as nobody with %s on HDFS: unlink old unreferenced %s (want OK), referenced %s (want EPERM), the young bad file %s (want EPERM: within --grace)\n%s",
					bad, res["old"], res["ref"], res["bad_young"], p.logText())
			}
			for _, f := range []string{bad, "scratch/job/chk-9", "scratch/job"} {
				c.SetTimes(t, storeDir+"/"+f, old)
			}
			waitSyncAfter(t, p, time.Now().Add(2*time.Second)) // past the mount's attribute cache
			if out, code := asNobody(t, "rm", "-rf", p.m("scratch/job")); code != 0 {
				t.Errorf("rm -rf of the bad checkpoint folder past --grace: exit %d\n%s\n%s", code, out, p.logText())
			}
			waitSyncAfter(t, p, time.Now())
			if s := p.stats(); s.DamagedMetadata != 0 || len(s.BadMetadata) != 0 {
				t.Errorf("after its removal: damaged %d, listed %+v", s.DamagedMetadata, s.BadMetadata)
			}
			if _, err := c.DFS(t, "-test", "-e", storeDir+"/"+ref); err != nil {
				t.Errorf("referenced %s gone: %v", ref, err)
			}
			_ = i
		})
	}
}
