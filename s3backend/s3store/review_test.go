package s3store_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3store"
)

// TestEmptyLayoutMeansFullWalk (review C1): a full walk of an empty bucket learns nothing, so the next
// listing must walk again; a targeted listing of an empty layout would look nowhere and report an empty
// store whatever was written since.
func TestEmptyLayoutMeansFullWalk(t *testing.T) {
	c, _ := fakeClient(t, "")
	ctx := context.Background()
	s := s3store.New(c, s3store.Options{FullWalkEvery: time.Hour})
	if got := list(t, s); got != "" {
		t.Fatalf("empty bucket listed %q", got)
	}
	if _, err := c.Put(ctx, "anywhere/jobB/chk-1/_metadata", strings.NewReader("m"), 1, s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := list(t, s); got != "anywhere/jobB/chk-1/_metadata" {
		t.Errorf("second listing after an empty full walk = %q, want the new checkpoint", got)
	}
	if st := s.Stats(); st.FullWalks != 2 || st.TargetedListings != 0 {
		t.Errorf("stats = %+v, want two full walks", st)
	}
}

// TestLearnsLayoutFromOpenedMetadata (review C1): a `_metadata` the index opened (IndexMetadata of a
// checkpoint written through the mount) is in a place the targeted listing looks next time, even in a root
// the last full walk did not see; ListAllMetadata is a full walk in any mode.
func TestLearnsLayoutFromOpenedMetadata(t *testing.T) {
	c, _ := fakeClient(t, "")
	ctx := context.Background()
	put := func(k string) {
		if _, err := c.Put(ctx, k, strings.NewReader("m"), 1, s3client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put("ckpt/jobA/chk-1/_metadata")
	s := s3store.New(c, s3store.Options{FullWalkEvery: time.Hour})
	list(t, s)
	put("newroot/jobC/chk-1/_metadata")
	put("other/jobD/chk-1/_metadata")
	r, err := s.Open(ctx, "newroot/jobC/chk-1/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if got, want := list(t, s), "ckpt/jobA/chk-1/_metadata,newroot/jobC/chk-1/_metadata"; got != want {
		t.Errorf("targeted listing after Open = %s, want %s", got, want)
	}
	if st := s.Stats(); st.TargetedListings != 1 {
		t.Errorf("stats = %+v, want the second listing targeted", st)
	}
	var all []string
	if err := s.ListAllMetadata(ctx, func(o store.ObjectInfo) error { all = append(all, o.Path); return nil }); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(all, ","); !strings.Contains(got, "other/jobD/chk-1/_metadata") {
		t.Errorf("ListAllMetadata missed a checkpoint in an unknown root: %s", got)
	}
}

// TestIndexedCheckpointSurvivesTargetedSync (review C1, e2): empty bucket, a checkpoint indexed as the
// mount does on close (IndexMetadata), then the periodic sync: its files must stay referenced.
func TestIndexedCheckpointSurvivesTargetedSync(t *testing.T) {
	c, _ := fakeClient(t, "flink")
	ctx := context.Background()
	st := s3store.New(c, s3store.Options{FullWalkEvery: time.Hour})
	ix, err := refindex.Open(filepath.Join(t.TempDir(), "index"), st, refindex.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	tr, err := treegen.YoungOrphan(filepath.Join(t.TempDir(), "gen"), time.Now(), treegen.Options{URIPrefix: "s3://bkt/flink"})
	if err != nil {
		t.Fatal(err)
	}
	var meta, ref string
	for _, ck := range tr.Live {
		meta, ref = ck.Metadata, ck.Refs[0]
	}
	for k := range tr.Files {
		b, err := os.ReadFile(filepath.Join(tr.Root, k))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(ctx, k, bytes.NewReader(b), int64(len(b)), s3client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.IndexMetadata(ctx, meta); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := ix.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if d := ix.Decide(ctx, ref, refindex.OpUnlink); d.Allow || d.Reason != refindex.ReasonReferenced {
			t.Fatalf("sync %d: unlink of %s (referenced by %s) = %+v, want refused as referenced", i+1, ref, meta, d)
		}
	}
}
