//go:build hdfs

package hdfsshared_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsshared"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/store/shared/sharedtest"
)

// TestConformanceMiniDFS: the CAS suite on a real NameNode (rename2 without OVERWRITE), each subtest
// in its own store directory, four writers racing in ConcurrentUpdates.
func TestConformanceMiniDFS(t *testing.T) {
	c := minidfs.Start(t, minidfs.Options{})
	var n atomic.Int64
	sharedtest.Run(t, func(t *testing.T) shared.CAS {
		root := fmt.Sprintf("%s/store%d", c.Root(), n.Add(1))
		cl, _ := c.DialSuperuser(t, root)
		if err := cl.MkdirAll(context.Background(), root, 0o755); err != nil {
			t.Fatal(err)
		}
		a, err := hdfsshared.Open(context.Background(), cl, root)
		if err != nil {
			t.Fatal(err)
		}
		return a
	})
}
