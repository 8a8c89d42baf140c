package s3store_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3store"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// listInfo is ListMetadata with the objects' fields.
func listInfo(t *testing.T, s *s3store.Store) map[string]store.ObjectInfo {
	t.Helper()
	got := map[string]store.ObjectInfo{}
	if err := s.ListMetadata(context.Background(), func(oi store.ObjectInfo) error { got[oi.Path] = oi; return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

func keysOf(m map[string]store.ObjectInfo) string {
	var k []string
	for p := range m {
		k = append(k, p)
	}
	sort.Strings(k)
	return strings.Join(k, ",")
}

// TestFlatCheckpointListing: the checkpoints of a job folder are found by one flat listing of
// "<job>/chk-" instead of a HEAD each, with the same result as the full walk (every `_metadata` of a
// checkpoint folder, none for a folder in progress or holding only Flink's temporary names, a
// `_metadata` at an odd key under its raw key) and the same ETag and size as a HEAD; a `_metadata`
// below a checkpoint folder, which HEADs never see, is reported and stays reported when the job's
// checkpoints are HEADed later.
func TestFlatCheckpointListing(t *testing.T) {
	c, wf := faultyClient(t)
	ctx := context.Background()
	keys := []string{"ckpt/jobA/shared/sst-1", "ckpt/jobA/taskowned/t",
		"ckpt/jobA/chk-6/x", "ckpt/jobA/chk-7/._metadata.inprogress", // in progress
		"ckpt/jobA/chk-3/nested/_metadata", // below a checkpoint folder
		"ckpt/jobA/chk-1x/_metadata",       // no checkpoint folder: listed by the descent itself
		"ckpt/jobA/chk-2/_metadata/x",      // a folder named _metadata: no checkpoint
		"ckpt/jobA/chk-10-odd",             // an object beside the folders
	}
	for i := 1; i <= 5; i++ {
		keys = append(keys, fmt.Sprintf("ckpt/jobA/chk-%d/_metadata", i*4), fmt.Sprintf("ckpt/jobA/chk-%d/a-exclusive", i*4), fmt.Sprintf("ckpt/jobA/chk-%d/op-state", i*4))
	}
	putKeys(t, c, keys...)
	if _, err := c.Put(ctx, "ckpt/jobA/chk-8/_metadata", strings.NewReader("longer"), 6, s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	full := s3store.New(c, s3store.Options{FullWalk: true})
	walked := listInfo(t, full)
	s := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	heads := wf.heads.Load()
	wf.reset()
	got := listInfo(t, s)
	if keysOf(got) != keysOf(walked) {
		t.Fatalf("descent = %s\nfull walk = %s", keysOf(got), keysOf(walked))
	}
	if h := wf.heads.Load() - heads; h != 0 {
		t.Errorf("the descent sent %d HEADs, want none (one flat listing of jobA's checkpoint folders)", h)
	}
	if l := wf.reset(); l["ckpt/jobA/chk-|"] != 1 {
		t.Errorf("listings %v, want one flat listing of ckpt/jobA/chk-", l)
	}
	for k, oi := range got {
		h, err := s.StatFresh(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if oi.ETag == "" || oi.ETag != h.ETag || oi.Size != h.Size {
			t.Errorf("%s: listed ETag %q size %d, HEAD says %q %d", k, oi.ETag, oi.Size, h.ETag, h.Size)
		}
	}
	// Make the job's folders many files: the listing gives up for HEADs, and the nested _metadata it
	// found is still reported (HEADed: recorded like one the reconciliation walk finds).
	var many []string
	for i := range 1100 {
		many = append(many, fmt.Sprintf("ckpt/jobA/chk-12/x-%04d", i))
	}
	putKeys(t, c, many...)
	if got := listInfo(t, s); keysOf(got) != keysOf(walked) {
		t.Fatalf("descent after the listing gave up = %s\nfull walk = %s", keysOf(got), keysOf(walked))
	}
	if !s3store.HeadOnly(s, "ckpt/jobA/") {
		t.Fatalf("after a listing page that answered for too few checkpoints the job is still listed flat; stats %+v", s.Stats())
	}
	wf.reset()
	if got := listInfo(t, s); keysOf(got) != keysOf(walked) {
		t.Fatalf("descent by HEADs = %s\nfull walk = %s", keysOf(got), keysOf(walked))
	}
	if l := wf.reset(); l["ckpt/jobA/chk-|"] != 0 {
		t.Errorf("the job is HEADed now, yet its checkpoint folders were listed: %v", l)
	}
}

// TestFlatListingBounded: a job whose checkpoint folders hold many files (full checkpoints) costs at
// most one listing page more than its HEADs: the listing stops after the first page that answered for
// fewer checkpoints than it cost, HEADs the checkpoints it has not reached, and the job's checkpoints
// are HEADed for the next descents; the flat listing is tried again later.
func TestFlatListingBounded(t *testing.T) {
	c, wf := faultyClient(t)
	keys := []string{"j/chk-1/_metadata", "j/chk-2/_metadata", "j/chk-3/_metadata"}
	for i := range 2500 {
		keys = append(keys, fmt.Sprintf("j/chk-1/x-%04d", i))
	}
	putKeys(t, c, keys...)
	s := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	want := "j/chk-1/_metadata,j/chk-2/_metadata,j/chk-3/_metadata"
	for i := range 25 {
		wf.reset()
		if got := list(t, s); got != want {
			t.Fatalf("descent %d = %s, want %s", i, got, want)
		}
		st := s.Stats()
		flat := wf.reset()["j/chk-|"]
		switch {
		case i == 0:
			if flat != 1 || st.LastFlatListings != 1 || st.LastFlatFallbacks != 1 || st.LastHeads != 2 {
				t.Fatalf("first descent: %d flat pages, stats %+v; want one page, then HEADs of chk-2 and chk-3", flat, st)
			}
		case i <= 20:
			if flat != 0 || st.LastHeads != 3 {
				t.Fatalf("descent %d: %d flat pages, stats %+v; want HEADs only", i, flat, st)
			}
		case i == 21:
			if flat != 1 {
				t.Fatalf("descent %d: %d flat pages; want the listing tried again", i, flat)
			}
		}
	}
}

// TestFlatListingFailsClosed: a failed page of the flat listing of checkpoint folders fails the descent
// (the index then refuses deletions), as a failed HEAD does: the checkpoints it did not reach are no gone.
func TestFlatListingFailsClosed(t *testing.T) {
	c, wf := faultyClient(t)
	putKeys(t, c, "j/chk-1/_metadata", "j/chk-2/_metadata")
	s := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	wf.fail.Store(true) // fails listings without a delimiter: only the flat one here
	err := s.ListMetadata(context.Background(), func(store.ObjectInfo) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "AccessDenied") {
		t.Fatalf("descent with a failing flat listing: %v, want the S3 error", err)
	}
}

// TestListNewMetadata: the second listing of a sync that retires (ListNewMetadata) leaves out the
// requests that could only report what the caller holds already, and reports everything else that
// ListMetadata reports: a new checkpoint of a known job, a new job, a new savepoint, a key known but
// to be retired that is there again.
func TestListNewMetadata(t *testing.T) {
	c, wf := faultyClient(t)
	ctx := context.Background()
	putKeys(t, c, "a/j1/chk-1/_metadata", "a/j1/chk-2/_metadata", "a/j2/chk-5/_metadata", "a/j3/chk-1/_metadata", "a/j3/chk-2/_metadata",
		"sp/savepoint-a-1/_metadata")
	s := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	first := list(t, s)
	known := map[string]bool{}
	for _, k := range strings.Split(first, ",") {
		known[k] = true
	}
	known["a/j3/chk-2/_metadata"] = false // to be retired: looked for
	putKeys(t, c, "a/j1/chk-3/_metadata", "a/j4/chk-1/_metadata", "sp/savepoint-b-2/_metadata")
	wf.reset()
	heads := wf.heads.Load()
	var got []string
	if err := s.ListNewMetadata(ctx, func(k string) bool { return known[k] }, func(oi store.ObjectInfo) error {
		if known[oi.Path] {
			t.Errorf("reported %s, known", oi.Path)
		}
		got = append(got, oi.Path)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	want := "a/j1/chk-3/_metadata,a/j3/chk-2/_metadata,a/j4/chk-1/_metadata,sp/savepoint-b-2/_metadata"
	if strings.Join(got, ",") != want {
		t.Fatalf("ListNewMetadata = %s\nwant %s", strings.Join(got, ","), want)
	}
	// j1: chk-3 HEADed (one unknown); j2: nothing; j3: chk-2 HEADed; j4: chk-1; savepoint-b-2.
	if h := wf.heads.Load() - heads; h != 4 {
		t.Errorf("ListNewMetadata sent %d HEADs, want 4 (only the checkpoints and savepoints not known)", h)
	}
	if l := wf.reset(); l["a/j1/chk-|"]+l["a/j2/chk-|"]+l["a/j3/chk-|"] != 0 {
		t.Errorf("listings %v: known checkpoint folders listed again", l)
	}
	if got := list(t, s); !strings.Contains(got, "a/j1/chk-3/_metadata") || !strings.Contains(got, "a/j1/chk-1/_metadata") {
		t.Errorf("ListMetadata after = %s", got)
	}
}

// TestFlatListingOutOfOrder: a flat listing of checkpoint folders that is not in key order proves
// nothing about the keys it did not report: the job's checkpoints are HEADed instead (same result),
// and HEADed at the next descents too.
func TestFlatListingOutOfOrder(t *testing.T) {
	c, wf := faultyClient(t)
	putKeys(t, c, "j/chk-1/_metadata", "j/chk-2/_metadata", "j/chk-3/_metadata", "j/chk-3/x")
	s := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	wf.swap.Store(true)
	heads := wf.heads.Load()
	if got, want := list(t, s), "j/chk-1/_metadata,j/chk-2/_metadata,j/chk-3/_metadata"; got != want {
		t.Fatalf("descent over an unsorted listing = %s, want %s", got, want)
	}
	if h := wf.heads.Load() - heads; h != 3 || !s3store.HeadOnly(s, "j/") || s.Stats().LastFlatFallbacks != 1 {
		t.Fatalf("%d HEADs, stats %+v, want the three checkpoints HEADed and the job HEADed from now on", h, s.Stats())
	}
}

// TestFlatListingVersity: on versitygw (below a location prefix), the flat listing of checkpoint
// folders reports what a HEAD per checkpoint and a full walk report, with the HEAD's ETags and sizes, so
// an index sees no change when the discovery switches between them.
func TestFlatListingVersity(t *testing.T) {
	srv := s3server.Start(t)
	srv.Bucket(t, "bkt")
	c, err := s3client.New(context.Background(), srv.Config(), s3client.Location{Bucket: "bkt", Prefix: "flink/ckpt/"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for j := range 3 {
		for k := 1; k <= 4; k++ {
			body := strings.Repeat("m", j*10+k)
			if k == 3 && j == 1 {
				continue // a checkpoint folder without _metadata (in progress)
			}
			if _, err := c.Put(ctx, fmt.Sprintf("job%d/chk-%d/_metadata", j, k), strings.NewReader(body), int64(len(body)), s3client.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		putKeys(t, c, fmt.Sprintf("job%d/chk-1/exclusive", j), fmt.Sprintf("job%d/chk-3/op", j), fmt.Sprintf("job%d/shared/sst", j))
	}
	flat := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	heads := s3store.New(c, s3store.Options{ReconcileEvery: -1})
	s3store.HeadsOnly(heads)
	full := s3store.New(c, s3store.Options{FullWalk: true})
	got, byHead, walked := listInfo(t, flat), listInfo(t, heads), listInfo(t, full)
	if keysOf(got) != keysOf(byHead) || keysOf(got) != keysOf(walked) || len(got) != 11 {
		t.Fatalf("flat listing = %s\nHEADs = %s\nfull walk = %s", keysOf(got), keysOf(byHead), keysOf(walked))
	}
	if st := flat.Stats(); st.LastFlatListings != 3 || st.LastHeads != 0 {
		t.Errorf("stats %+v, want one flat listing per job and no HEAD", st)
	}
	for k, oi := range got {
		h := byHead[k]
		if oi.ETag == "" || oi.ETag != h.ETag || oi.Size != h.Size || oi.ModTime.Truncate(time.Second) != h.ModTime.Truncate(time.Second) {
			t.Errorf("%s: listed %q %d %v, HEAD %q %d %v", k, oi.ETag, oi.Size, oi.ModTime, h.ETag, h.Size, h.ModTime)
		}
	}
}
