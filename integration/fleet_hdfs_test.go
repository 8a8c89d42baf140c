//go:build hdfs

package integration

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// With the hdfs tag TestFleetSharedPins also runs with two mounts of one MiniDFSCluster store.
func init() {
	fleetBackends = append(fleetBackends, fleetBackend{"hdfs", 2, func(t *testing.T) (string, *treegen.Tree, []string) {
		c := minidfs.Start(t, minidfs.Options{})
		storeDir := c.Root() + "/store"
		root := c.URI(storeDir)
		tr, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "tree"), time.Now(), treegen.Options{URIPrefix: root})
		if err != nil {
			t.Fatal(err)
		}
		c.Upload(t, tr.Root, storeDir)
		return root, tr, nil
	}})
}
