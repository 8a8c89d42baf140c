package s3quarantine_test

import (
	"context"
	"errors"
	"strings"
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

// failingHead is a client whose HEAD of the key *fail names fails (a server error).
type failingHead struct {
	*s3client.Client
	fail *string
}

func (f failingHead) Head(ctx context.Context, key string) (s3client.Object, error) {
	if key == *f.fail {
		return s3client.Object{}, &s3client.Error{Op: "HeadObject", Key: key, Class: s3client.ErrUnavailable, Err: errors.New("injected 503")}
	}
	return f.Client.Head(ctx, key)
}

// TestAreaCrashCopies: a crash between Keep and the change (the key still holds the kept version) leaves
// a crash copy: no entry, listed as a problem by the next mount and by any other process (the mount
// making a change lists nothing for it), removed by Tidy only once older than the crash-copy age and
// never while this process holds it, the live object untouched. A crash between the change and Applied
// leaves a real entry, which Tidy marks Applied at once. A HEAD that fails keeps the copy and Tidy says so.
func TestAreaCrashCopies(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	keep := func(a *s3quarantine.Area, key, body string) quarantine.Entry {
		t.Helper()
		etag := put(t, c, key, body)
		e, err := a.Keep(ctx, key, s3client.Object{Key: key, Size: int64(len(body)), ETag: etag}, quarantine.Decision{Op: quarantine.OpTruncate, Reason: "allowed"})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	// The mount that crashed.
	crashed := s3quarantine.New(c, clock, false)
	notDone := keep(crashed, "job/not-done", "change never made")
	done := keep(crashed, "job/done", "change made, not marked")
	put(t, c, "job/done", "")
	failing := keep(crashed, "job/failing", "head fails")
	// The next mount, with a change of its own under way.
	var fail string
	mount := s3quarantine.New(failingHead{Client: c, fail: &fail}, clock, false)
	inflight := keep(mount, "job/in-flight", "change under way")

	check := func(who string, a *s3quarantine.Area, crashCopies ...quarantine.Entry) {
		t.Helper()
		es, probs, err := a.ListAll(ctx)
		if err != nil || len(es) != 1 || es[0].ID != done.ID || len(probs) != len(crashCopies) {
			t.Fatalf("%s lists %+v problems %+v (%v), want the done entry and %d crash copies", who, es, probs, err, len(crashCopies))
		}
		for i, p := range probs {
			if !strings.Contains(p.Detail, "crash copy") {
				t.Errorf("%s: problem %d %+v: want a crash copy", who, i, p)
			}
		}
	}
	check("the next mount", mount, notDone, failing)
	check("another process", s3quarantine.New(c, clock, false), notDone, failing, inflight)

	// Young: nothing removed; the done entry is marked Applied.
	now = now.Add(time.Hour)
	if err := mount.Tidy(ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, e := range []quarantine.Entry{notDone, inflight, failing} {
		if _, ok := get(t, c, s3quarantine.Prefix+e.ID); !ok {
			t.Fatalf("a young crash copy of %s was removed", e.Path)
		}
	}
	if es, _ := mount.List(ctx); len(es) != 1 || !es[0].Applied {
		t.Fatalf("after Tidy: %+v, want the done entry marked applied", es)
	}

	// Old: a failing HEAD keeps its copy and is reported; the other crash copy goes, the copy of the
	// change this process has under way stays.
	now = now.Add(7 * time.Hour)
	fail = "job/failing"
	if err := mount.Tidy(ctx, 10*time.Minute); err == nil || !strings.Contains(err.Error(), "job/failing") {
		t.Fatalf("Tidy with a failing HEAD: %v, want an error naming job/failing", err)
	}
	if _, ok := get(t, c, s3quarantine.Prefix+failing.ID); !ok {
		t.Fatal("Tidy removed a copy it could not check")
	}
	if _, ok := get(t, c, s3quarantine.Prefix+notDone.ID); ok {
		t.Fatal("the old crash copy of job/not-done stays after Tidy")
	}
	fail = ""
	if err := mount.Tidy(ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, c, s3quarantine.Prefix+failing.ID); ok {
		t.Fatal("the old crash copy of job/failing stays after a Tidy whose HEAD works")
	}
	if _, ok := get(t, c, s3quarantine.Prefix+inflight.ID); !ok {
		t.Fatal("Tidy removed the copy of a change its own process still has under way")
	}
	for key, body := range map[string]string{"job/not-done": "change never made", "job/in-flight": "change under way", "job/failing": "head fails"} {
		if got, ok := get(t, c, key); !ok || got != body {
			t.Fatalf("live %s after Tidy: %q %v", key, got, ok)
		}
	}
	check("the next mount after Tidy", mount)
	// The change under way then happens: its entry is a real one.
	put(t, c, "job/in-flight", "x")
	if err := mount.Applied(ctx, inflight); err != nil {
		t.Fatal(err)
	}
	if es, _ := mount.List(ctx); len(es) != 2 {
		t.Fatalf("after the in-flight change: %+v, want two entries", es)
	}
}
