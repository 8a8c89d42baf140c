//go:build hdfs

package hdfsguardd_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfscli"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestMappedStoreOnHDFS: the HDFS store seen by Flink at another place (the checkpoints copied from
// another cluster's path, or written through an NFS gateway's local view), mounted with --map for
// that place: rm -rf of the old job through the mount leaves exactly the files the live checkpoints
// reference, and verify with the same map is green.
func TestMappedStoreOnHDFS(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := minidfs.Start(t, minidfs.Options{})
	for i, tc := range []struct{ name, prefix string }{
		{"another cluster's path", "hdfs://old-nn.example:8020/flink/moved"},
		{"an NFS gateway's view", "file:/mnt/hdfs-gateway/flink"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storeDir := c.Root() + "/mapped-" + string(rune('a'+i))
			tr, err := treegen.IncidentTwo(t.TempDir(), time.Now(), treegen.Options{URIPrefix: tc.prefix})
			if err != nil {
				t.Fatal(err)
			}
			c.Upload(t, tr.Root, storeDir)
			uri := c.URI(storeDir)
			m, err := pathnorm.ParseMapping(tc.prefix + "=")
			if err != nil {
				t.Fatal(err)
			}
			maps := []refindex.Option{refindex.WithPathMap([]pathnorm.Mapping{m}, "")}
			before := hdfsFiles(t, uri)
			dir := t.TempDir()
			mnt, stop := guardMount(t, dir, guardd.Config{StoreDir: uri, Policy: refindex.DefaultPolicy(), IndexOptions: maps}, opts)
			cleanUntilStable(t, uri, func() { _ = exec.Command("rm", "-rf", filepath.Join(mnt, tr.Purge)).Run() })
			stop()
			after := hdfsFiles(t, uri)
			checkSurvivors(t, tr, after)
			if len(under(after, tr.Purge)) == len(under(before, tr.Purge)) {
				t.Errorf("the cleanup deleted nothing")
			}
			verifyMapped(t, uri, dir, maps)
		})
	}
}

// verifyMapped is ckguard verify --map …: every live checkpoint's files are there, placed by the map.
func verifyMapped(t *testing.T, uri, dir string, o []refindex.Option) {
	t.Helper()
	st, err := hdfscli.OpenStore(context.Background(), uri, opts)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := refindex.Open(filepath.Join(dir, "verify-index"), st, refindex.DefaultPolicy(), o...)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if err := ix.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The references are placed by the map, not by the index's inference from the store's layout.
	s, err := ix.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.InferredMaps) != 0 {
		t.Errorf("the index inferred %v: the --map did not place the references", s.InferredMaps)
	}
	res, err := ix.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK || res.UnmappedSkipped != 0 || res.OutsideSkipped != 0 {
		t.Errorf("verify with the map: OK %v, outside %d, broken %d, untrusted %q", res.OK, res.OutsideSkipped, len(res.Broken), res.Untrusted)
	}
}
