package hdfsshared_test

import (
	"context"
	"testing"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient/hdfsfake"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsshared"
	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/store/shared/sharedtest"
)

// TestConformanceFake: the CAS suite over the in-process HDFS fake (create, rename without
// overwrite); the MiniDFSCluster run is TestConformanceMiniDFS (tag hdfs).
func TestConformanceFake(t *testing.T) {
	sharedtest.Run(t, func(t *testing.T) shared.CAS {
		f := hdfsfake.New("ckguard")
		if err := f.MkdirAll(context.Background(), "/store", 0o755); err != nil {
			t.Fatal(err)
		}
		c, err := hdfsshared.Open(context.Background(), f, "/store")
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}
