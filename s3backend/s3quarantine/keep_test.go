package s3quarantine_test

import (
	"context"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3quarantine"
)

// TestAreaKeep: Keep copies the version a change in place will replace and leaves the original at its
// key. While the key still holds that version the entry is no entry (the change has not happened, or a
// crash came between the copy and the change: never counted twice); once the key holds another version
// it is listed with its kind of change and the old bytes; Unstage drops a copy whose change did not
// happen, and keeps one whose change did.
func TestAreaKeep(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	a := s3quarantine.New(c, func() time.Time { return time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) }, false)
	key := "job/chk-1/sst-a"
	etag := put(t, c, key, "old state bytes")
	o := s3client.Object{Key: key, Size: 15, ETag: etag}
	e, err := a.Keep(ctx, key, o, quarantine.Decision{Op: quarantine.OpReplace, Reason: "allowed"})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := get(t, c, key); !ok || got != "old state bytes" {
		t.Fatalf("Keep moved the original: %q %v", got, ok)
	}
	if es, probs, err := a.ListAll(ctx); err != nil || len(es) != 0 || len(probs) != 0 {
		t.Fatalf("before the change: entries %+v problems %+v (%v), want none", es, probs, err)
	}
	put(t, c, key, "the replacement")
	es, err := a.List(ctx)
	if err != nil || len(es) != 1 || es[0].ID != e.ID || es[0].Change() != quarantine.OpReplace || es[0].Size != 15 {
		t.Fatalf("after the change: %+v %v, want the replace entry", es, err)
	}
	if got, _ := get(t, c, s3quarantine.Prefix+e.ID); got != "old state bytes" {
		t.Fatalf("staged copy: %q", got)
	}
	if err := a.Applied(ctx, es[0]); err != nil {
		t.Fatal(err)
	}
	if es, err := a.List(ctx); err != nil || len(es) != 1 || !es[0].Applied {
		t.Fatalf("after Applied: %+v %v, want the entry marked applied", es, err)
	}
	if err := a.Unstage(ctx, key, etag); err != nil {
		t.Fatal(err)
	}
	if es, _ := a.List(ctx); len(es) != 1 {
		t.Fatalf("Unstage dropped the copy of a replaced version: %+v", es)
	}

	// A change that does not happen: Unstage drops the copy.
	key2 := "job/chk-1/sst-b"
	etag2 := put(t, c, key2, "kept in place")
	if _, err := a.Keep(ctx, key2, s3client.Object{Key: key2, Size: 13, ETag: etag2}, quarantine.Decision{Op: quarantine.OpTruncate}); err != nil {
		t.Fatal(err)
	}
	if err := a.Unstage(ctx, key2, etag2); err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, c, s3quarantine.Prefix+s3quarantine.ID(key2, etag2)); ok {
		t.Fatal("Unstage left the copy of a version still at its key")
	}
	// A version that changed since the decision is not kept (the copy is conditional on its ETag).
	if _, err := a.Keep(ctx, key2, s3client.Object{Key: key2, Size: 13, ETag: `"0123456789abcdef0123456789abcdef"`}, quarantine.Decision{Op: quarantine.OpTruncate}); err == nil {
		t.Fatal("Keep of a version no longer at the key succeeded")
	}
}
