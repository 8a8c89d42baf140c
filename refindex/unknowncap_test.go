package refindex_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// TestUnknownSubtreesCapped (issue 29: a bound on the unknown entries): 3,000 unreadable folders of
// another user (uid 65534, who wrote no `_metadata`: confined) in scratch/a and 2,000 without a known
// owner (as on S3) in tmp, beside a live checkpoint. The index keeps at most maxUnknownSubtrees (1,000)
// entries: the folders sharing a parent become that parent (scratch/a confined, standing for 3,000;
// tmp not confined, for 2,000), which refuses at least what they did: everything in them, their
// ancestors' rmdir; an unrelated old file elsewhere stays deletable, a referenced one refused. A lone
// unreadable folder elsewhere keeps its own, narrower entry. Decision latency with and without the
// bound is logged; once readable, the next sync clears everything.
func TestUnknownSubtreesCapped(t *testing.T) {
	ctx := context.Background()
	tr, _, ref := youngOrphan(t)
	old := testNow.Add(-10 * 24 * time.Hour)
	for _, k := range []string{"elsewhere/old", "scratch/a/d0001/x", "tmp/b0001/x", "lone/deep/x"} {
		if err := tr.Write(k, 10, old); err != nil {
			t.Fatal(err)
		}
	}
	dark := map[string]int64{"lone/deep": -1}
	for i := range 3000 {
		dark[fmt.Sprintf("scratch/a/d%04d", i)] = 65534
	}
	for i := range 2000 {
		dark[fmt.Sprintf("tmp/b%04d", i)] = -1
	}
	// Timed with the fake store's own lookup of its dark folders out of the way (it is O(folders)
	// per stat): the index keeps its unknown subtrees until the next sync.
	latency := func(ix *refindex.Index, ds *darkStore) time.Duration {
		ds.set(nil)
		defer ds.set(dark)
		const n = 2000
		t0 := time.Now()
		for range n {
			ix.Decide(ctx, "elsewhere/old", verdict.OpUnlink)
		}
		return time.Since(t0) / n
	}
	run := func(t *testing.T) (*refindex.Index, *darkStore) {
		ds := &darkStore{Store: localStore(t, tr.Root)}
		ix := openSynced(t, ds) // read once before the folders go dark
		ds.set(dark)
		syncIndex(t, ix)
		return ix, ds
	}

	restore := refindex.SetMaxUnknownSubtrees(1 << 30)
	ixAll, dsAll := run(t)
	restore()
	if n := len(ixAll.UnknownSubtrees()); n != len(dark) {
		t.Fatalf("unbounded: %d unknown subtrees, want %d", n, len(dark))
	}
	before := latency(ixAll, dsAll)

	ix, ds := run(t)
	us := ix.UnknownSubtrees()
	got := map[string]refindex.UnknownSubtree{}
	for _, u := range us {
		got[u.Key] = u
	}
	if len(us) > 1000 || len(us) != 3 {
		t.Fatalf("bounded: %d unknown subtrees, want scratch/a, tmp and lone/deep: %+v", len(us), keysOf(us))
	}
	if u := got["scratch/a"]; u.Collapsed != 3000 || !u.Confined || u.UID == nil || *u.UID != 65534 || !strings.Contains(u.Cause, "3000 entr(ies) at or below it") {
		t.Errorf("scratch/a: %+v, want 3000 collapsed, confined, uid 65534", u)
	}
	if u := got["tmp"]; u.Collapsed != 2000 || u.Confined || u.UID != nil {
		t.Errorf("tmp: %+v, want 2000 collapsed, not confined, no owner", u)
	}
	if u, ok := got["lone/deep"]; !ok || u.Collapsed != 0 {
		t.Errorf("lone/deep: %+v, want kept as it is", u)
	}
	after := latency(ix, ds)
	t.Logf("decision latency with %d unreadable folders: %s unbounded (%d entries), %s bounded (%d entries)", len(dark), before, len(dark), after, len(us))
	for _, c := range []struct {
		key    string
		op     verdict.Op
		reason verdict.Reason
	}{
		{"scratch/a/d0001/x", verdict.OpUnlink, verdict.ReasonUnknownSubtree},
		{"scratch/a/new-file", verdict.OpUnlink, verdict.ReasonUnknownSubtree}, // coarser than before: the folder
		{"scratch", verdict.OpRmdir, verdict.ReasonUnknownSubtree},
		{"tmp/b0001/x", verdict.OpUnlink, verdict.ReasonUnknownSubtree},
		{"tmp", verdict.OpRmdir, verdict.ReasonUnknownSubtree},
		{"lone", verdict.OpRmdir, verdict.ReasonUnknownSubtree},
		{"elsewhere/old", verdict.OpUnlink, verdict.ReasonAllowed},
		{ref, verdict.OpUnlink, verdict.ReasonReferenced},
	} {
		d := ix.Decide(ctx, c.key, c.op)
		if d.Reason != c.reason || d.Allow != (c.reason == verdict.ReasonAllowed) {
			t.Errorf("%s %s = %s (%s), want %s", c.op, c.key, d.Reason, d.Message, c.reason)
		}
	}
	// Still unreadable at the next sync: the same three entries, first unknown at the same time.
	syncIndex(t, ix)
	if us2 := ix.UnknownSubtrees(); len(us2) != 3 || !us2[0].Since.Equal(us[0].Since) {
		t.Errorf("at the next sync: %+v, want the same three since %s", keysOf(us2), us[0].Since)
	}
	// Fewer than the bound again (most made readable): the rest are listed as they are, still known
	// as unreadable since the first time and last read before it.
	few := map[string]int64{"tmp/b0001": -1, "tmp/b0002": -1}
	ds.set(few)
	syncIndex(t, ix)
	us3 := ix.UnknownSubtrees()
	if len(us3) != 2 || us3[0].Collapsed != 0 || !us3[0].Since.Equal(got["tmp"].Since) || !us3[0].LastReadable.Equal(got["tmp"].LastReadable) {
		t.Errorf("below the bound again: %+v, want tmp/b0001 and tmp/b0002 since %s, last read %s", us3, got["tmp"].Since, got["tmp"].LastReadable)
	}
	ds.set(nil)
	syncIndex(t, ix)
	if us := ix.UnknownSubtrees(); len(us) != 0 {
		t.Errorf("once readable: %+v", keysOf(us))
	}
	if d := ix.Decide(ctx, "scratch/a/d0001/x", verdict.OpUnlink); !d.Allow {
		t.Errorf("scratch/a/d0001/x once readable: %s", d.Message)
	}
}

func keysOf(us []refindex.UnknownSubtree) []string {
	var ks []string
	for _, u := range us {
		ks = append(ks, fmt.Sprintf("%s(%d)", u.Key, u.Collapsed))
	}
	return ks
}
