package s3store_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3store"
)

// TestIndexedCheckpointSurvivesSync: empty bucket, a checkpoint indexed as the
// mount does on close (IndexMetadata), then the periodic sync: its files must stay referenced.
func TestIndexedCheckpointSurvivesSync(t *testing.T) {
	c, _ := fakeClient(t, "flink")
	ctx := context.Background()
	st := s3store.New(c, s3store.Options{})
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
		if d := ix.Decide(ctx, ref, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonReferenced {
			t.Fatalf("sync %d: unlink of %s (referenced by %s) = %+v, want refused as referenced", i+1, ref, meta, d)
		}
	}
}
