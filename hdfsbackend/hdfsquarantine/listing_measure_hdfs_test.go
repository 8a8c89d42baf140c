//go:build hdfs

package hdfsquarantine_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// TestListingCostOnHDFS (a measurement, CKGUARD_MEASURE_HDFS_QUARANTINE_LIST=N entries): the listing
// of an area whose N entries were staged one a minute (the worst case of the shard folders: a minute
// folder per entry) against the same N entries flat in the area folder (the layout before the
// shards); it logs the time of ListAll of each.
func TestListingCostOnHDFS(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("CKGUARD_MEASURE_HDFS_QUARANTINE_LIST"))
	if n <= 0 {
		t.Skip("a measurement: set CKGUARD_MEASURE_HDFS_QUARANTINE_LIST to the number of entries")
	}
	ctx := context.Background()
	c := minidfs.Start(t, minidfs.Options{})
	cl, _ := c.DialSuperuser(t, c.Root())
	d := quarantine.Decision{Op: "unlink", Reason: "allowed"}
	measure := func(name string, sharded bool) time.Duration {
		root := c.Root() + "/" + name
		clock := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
		if err := cl.MkdirAll(ctx, root, 0o755); err != nil {
			t.Fatal(err)
		}
		a, err := hdfsquarantine.Open(ctx, cl, root, func() time.Time { return clock })
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			k := fmt.Sprintf("job/f%06d", i)
			minidfs.WriteFile(t, cl, root+"/"+k, "")
			if sharded {
				if _, err := a.Stage(ctx, k, d); err != nil {
					t.Fatal(err)
				}
			} else {
				flat := quarantine.NewID(clock) + "~unlink~0~0~0~~" + b64(k)
				if err := cl.Rename(ctx, root+"/"+k, root+"/"+store.QuarantineDir+"/"+flat); err != nil {
					t.Fatal(err)
				}
			}
			clock = clock.Add(time.Minute)
		}
		best := time.Duration(1 << 62)
		for range 3 {
			t0 := time.Now()
			es, probs, err := a.ListAll(ctx)
			if el := time.Since(t0); el < best {
				best = el
			}
			if err != nil || len(es) != n || len(probs) != 0 {
				t.Fatalf("ListAll = %d entries, %+v, %v", len(es), probs, err)
			}
		}
		return best
	}
	flat := measure("flat", false)
	sharded := measure("sharded", true)
	t.Logf("ListAll of %d entries: flat %s, one a minute in shard folders %s (ratio %.1f)", n, flat, sharded, float64(sharded)/float64(flat))
}
