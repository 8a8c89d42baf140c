package refindex_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/verdict"
)

// TestRedteamUnknownFloodAtRoot (red team, issue 29): the collapse never merges entries directly below
// the store root ("only the decision cost grows"). Where the store root is writable by others (a 1777
// export), one user makes N unreadable folders there. Every decision then loops over all N entries,
// under the index's read lock, and every sync recomputes confinement for each (an owner scan of every
// checkpoint per entry) under its write lock. Measured here at N = 20,000 confined folders of uid
// 65534: the decision latency of an unrelated unlink must stay within 20x of the bounded case
// (TestUnknownSubtreesCapped: 10-50 µs), i.e. under 2 ms (1 ms measured at 20,000 on 2 loaded cores). Fails when the bound does not hold (CKGUARD_REDTEAM_FLOOD=100000: 5.8 ms).
func TestRedteamUnknownFloodAtRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 entries")
	}
	ctx := context.Background()
	tr, _, _ := youngOrphan(t)
	old := testNow.Add(-10 * 24 * time.Hour)
	if err := tr.Write("elsewhere/old", 10, old); err != nil {
		t.Fatal(err)
	}
	n := 20000
	if s := os.Getenv("CKGUARD_REDTEAM_FLOOD"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	dark := map[string]int64{}
	for i := range n {
		dark[fmt.Sprintf("d%05d", i)] = 65534
	}
	ds := &darkStore{Store: localStore(t, tr.Root)}
	ix := openSynced(t, ds)
	ds.set(dark)
	t0 := time.Now()
	syncIndex(t, ix)
	syncTook := time.Since(t0)
	us := ix.UnknownSubtrees()
	ds.set(nil)
	const k = 500
	t1 := time.Now()
	for range k {
		if d := ix.Decide(ctx, "elsewhere/old", verdict.OpUnlink); !d.Allow {
			t.Fatalf("elsewhere/old: %s", d.Message)
		}
	}
	lat := time.Since(t1) / k
	t.Logf("%d unreadable folders at the store root: %d unknown subtrees kept, sync %s (fake store), decision %s", n, len(us), syncTook, lat)
	if len(us) > 1000 && lat > 2*time.Millisecond {
		t.Errorf("%d unknown subtrees kept directly below the root (bound 1,000 does not apply there): an unrelated unlink takes %s per decision, want < 2ms", len(us), lat)
	}
}
