//go:build hdfs

package hdfsclient_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
)

// TestSpaceOnNameNode: a folder's room over a real NameNode is the cluster's free space until a space
// quota on the folder is tighter, then the quota and what is left of it (space consumed counted by
// the NameNode, in the folder's replication); clearing the quota gives the cluster's back.
func TestSpaceOnNameNode(t *testing.T) {
	ctx := context.Background()
	c := minidfs.Start(t, minidfs.Options{})
	cl, _ := c.DialSuperuser(t, c.Root())
	d := c.Root() + "/store"
	minidfs.WriteFile(t, cl, d+"/job/chk-1/a", strings.Repeat("x", 1<<20))
	minidfs.WriteFile(t, cl, d+"/job/chk-1/b", strings.Repeat("y", 1<<19))

	free, err := cl.Space(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if free.Quota || free.Size <= 0 || free.Free <= 0 || free.Free > free.Size || free.Replication < 1 {
		t.Fatalf("room without a quota: %+v; want the cluster's, 0 < free <= size", free)
	}

	const quota = 4 << 20 // raw bytes
	if err := hdfsclient.SetSpaceQuota(cl, d, quota); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hdfsclient.SetSpaceQuota(cl, d, 0) })
	r, err := cl.Space(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	consumed := int64(float64(3<<19) * r.Replication)
	want := hdfsclient.Room{Size: int64(quota / r.Replication), Free: int64(float64(quota-consumed) / r.Replication), Quota: true, Replication: r.Replication}
	if r != want {
		t.Fatalf("room under a %d-byte space quota with 1.5 MiB written: %+v; want %+v", quota, r, want)
	}
	// The quota counts raw bytes the NameNode has allocated; a parent's quota is not looked at.
	if sub, err := cl.Space(ctx, d+"/job"); err != nil || sub.Quota {
		t.Errorf("room of a folder below the quota'd one: %+v, %v; want the cluster's (a parent's quota is not read)", sub, err)
	}

	if err := hdfsclient.SetSpaceQuota(cl, d, 0); err != nil {
		t.Fatal(err)
	}
	if r, err := cl.Space(ctx, d); err != nil || r.Quota {
		t.Errorf("room after the quota was cleared: %+v, %v; want the cluster's", r, err)
	}
}
