package s3quarantine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3quarantine"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

func newClient(t *testing.T) *s3client.Client {
	srv := s3server.Start(t)
	srv.Bucket(t, "bkt")
	c, err := s3client.New(context.Background(), srv.Config(), s3client.Location{Bucket: "bkt", Prefix: "flink/"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func put(t *testing.T, c *s3client.Client, key, body string) string {
	t.Helper()
	etag, err := c.Put(context.Background(), key, strings.NewReader(body), int64(len(body)), s3client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return etag
}

func get(t *testing.T, c *s3client.Client, key string) (string, bool) {
	t.Helper()
	o, err := c.Head(context.Background(), key)
	if err != nil {
		return "", false
	}
	b := make([]byte, o.Size)
	n, err := c.ReadAt(context.Background(), key, b, 0, "")
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return string(b[:n]), true
}

// TestAreaStageRestorePurge: a staged object leaves its key and is listed; a restore brings back the
// same bytes and never replaces an object created at the key meanwhile; a purge destroys the entry.
func TestAreaStageRestorePurge(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	honoured, err := s3quarantine.ProbeCopyIfNoneMatch(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server honours If-None-Match on CopyObject: %v", honoured)
	for _, ifNoneMatch := range []bool{false, honoured} {
		a := s3quarantine.New(c, func() time.Time { return clock }, ifNoneMatch)
		key := "job/chk-1/sst-a"
		etag := put(t, c, key, "state bytes")
		e, err := a.Stage(ctx, key, etag, quarantine.Decision{Op: "unlink", Reason: "unreferenced"})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := get(t, c, key); ok {
			t.Fatalf("%s still at its key after Stage", key)
		}
		es, probs, err := a.ListAll(ctx)
		if err != nil || len(es) != 1 || len(probs) != 0 || es[0].Path != key || es[0].Size != 11 || es[0].ID != e.ID {
			t.Fatalf("ListAll = %+v %+v %v", es, probs, err)
		}
		if f, ok, err := quarantine.Find(ctx, a, key); err != nil || !ok || f.ID != e.ID {
			t.Fatalf("Find = %+v %v %v", f, ok, err)
		}
		// Something new at the key: the restore must not replace it.
		put(t, c, key, "new")
		if _, err := a.Restore(ctx, e.ID); !errors.Is(err, quarantine.ErrOccupied) {
			t.Fatalf("ifNoneMatch %v: Restore over an object: err %v, want ErrOccupied", ifNoneMatch, err)
		}
		if got, _ := get(t, c, key); got != "new" {
			t.Fatalf("restore replaced the object at %s: %q", key, got)
		}
		if err := c.Delete(ctx, key, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Restore(ctx, e.ID); err != nil {
			t.Fatal(err)
		}
		if got, ok := get(t, c, key); !ok || got != "state bytes" {
			t.Fatalf("restored %s = %q %v", key, got, ok)
		}
		if es, err := a.List(ctx); err != nil || len(es) != 0 {
			t.Fatalf("entries after restore: %+v %v", es, err)
		}
		// Stage again, purge.
		o, _ := c.Head(ctx, key)
		e, err = a.Stage(ctx, key, o.ETag, quarantine.Decision{})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Purge(ctx, e.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Restore(ctx, e.ID); !errors.Is(err, quarantine.ErrNoEntry) {
			t.Fatalf("Restore after purge: %v, want ErrNoEntry", err)
		}
		if _, ok := get(t, c, key); ok {
			t.Fatal("purged object is back")
		}
	}
}

// TestAreaStageConditional: a stage decided on an older version deletes nothing.
func TestAreaStageConditional(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	a := s3quarantine.New(c, nil, false)
	old := put(t, c, "k", "v1")
	put(t, c, "k", "v2")
	if _, err := a.Stage(ctx, "k", old, quarantine.Decision{}); !errors.Is(err, s3client.ErrPrecondition) {
		t.Fatalf("Stage on a replaced version: %v, want ErrPrecondition", err)
	}
	if got, _ := get(t, c, "k"); got != "v2" {
		t.Fatalf("k = %q", got)
	}
	if _, err := a.Stage(ctx, ".ckguard-quarantine/x", "", quarantine.Decision{}); err == nil {
		t.Fatal("staging a key of the area itself succeeded")
	}
}

// TestAreaReplayAndUnstage: a crash between copy and delete leaves both copies; the replayed stage
// (same id) completes it, and a deletion decided again as refused removes the copy instead.
func TestAreaReplayAndUnstage(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	a := s3quarantine.New(c, nil, false)
	for _, refuse := range []bool{false, true} {
		key := "job/chk-2/sst-b"
		etag := put(t, c, key, "bytes b")
		id := s3quarantine.ID(key, etag)
		// The crash: copy and record made, original not deleted.
		if _, err := c.Copy(ctx, key, s3quarantine.Prefix+id, etag, s3client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if refuse {
			if err := a.Unstage(ctx, key, etag); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Head(ctx, s3quarantine.Prefix+id); err == nil {
				t.Fatal("copy stays after Unstage")
			}
			if got, ok := get(t, c, key); !ok || got != "bytes b" {
				t.Fatalf("original %q %v", got, ok)
			}
			continue
		}
		e, err := a.Stage(ctx, key, etag, quarantine.Decision{})
		if err != nil || e.ID != id {
			t.Fatalf("replayed Stage: %+v %v", e, err)
		}
		if _, ok := get(t, c, key); ok {
			t.Fatal("original stays after the replayed stage")
		}
		if es, err := a.List(ctx); err != nil || len(es) != 1 {
			t.Fatalf("entries %+v %v", es, err)
		}
		// Unstage never removes the only copy.
		if err := a.Unstage(ctx, key, etag); err != nil {
			t.Fatal(err)
		}
		if es, _ := a.List(ctx); len(es) != 1 {
			t.Fatal("Unstage removed the only copy")
		}
		if _, err := a.Restore(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAreaRestoreRefusesForgedPath: a record rewritten to name a key that is not a clean store key, or
// one inside the quarantine area, is refused by Restore (plain and versioned), never followed; the
// staged object stays an entry.
func TestAreaRestoreRefusesForgedPath(t *testing.T) {
	ctx := context.Background()
	now := func() time.Time { return time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) }
	for _, versioned := range []bool{false, true} {
		var c *s3client.Client
		var a interface {
			Stage(context.Context, string, string, quarantine.Decision) (quarantine.Entry, error)
			Restore(context.Context, string) (quarantine.Entry, error)
			List(context.Context) ([]quarantine.Entry, error)
		}
		if versioned {
			c = newVersionedClient(t)
			a = s3quarantine.NewVersioned(c, now)
		} else {
			c = newClient(t)
			a = s3quarantine.New(c, now, false)
		}
		for i, forged := range []string{store.QuarantineDir + "/evil", "job/../other", "/abs", "job//x", ""} {
			key := fmt.Sprintf("job/chk-1/sst-%d", i)
			e, err := a.Stage(ctx, key, put(t, c, key, "state"), quarantine.Decision{Op: "unlink"})
			if err != nil {
				t.Fatal(err)
			}
			rk := s3quarantine.Prefix + e.ID + ".json"
			b, ok := get(t, c, rk)
			if !ok {
				t.Fatalf("no record %s", rk)
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(b), &rec); err != nil {
				t.Fatal(err)
			}
			rec["path"] = forged
			nb, _ := json.Marshal(rec)
			put(t, c, rk, string(nb))
			if _, err := a.Restore(ctx, e.ID); err == nil || !strings.Contains(err.Error(), "not a store key outside the quarantine folder") {
				t.Errorf("versioned %v: Restore of a record naming %q: %v, want refused", versioned, forged, err)
			}
			if _, ok := get(t, c, forged); ok && forged != "" {
				t.Errorf("versioned %v: an object appeared at the forged key %q", versioned, forged)
			}
			es, err := a.List(ctx)
			found := false
			for _, x := range es {
				found = found || x.ID == e.ID
			}
			if err != nil || !found {
				t.Errorf("versioned %v: after the refused restore of %q the entry is gone from the listing: %+v %v", versioned, forged, es, err)
			}
		}
	}
}
