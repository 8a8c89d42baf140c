// Package quarantinetest is the conformance suite every store's quarantine passes: the local folder (and
// the same on a filesystem without renameat2 flags, as older NFS), the S3 area (copies on a plain bucket,
// delete markers on a versioned one) and the HDFS area. Each engine's tests run it over the real store
// (a temporary folder, versitygw, the MiniDFSCluster) with a Store of their own.
//
// The suite states what a quarantine promises whatever the store: a staged deletion leaves its key and is
// listed with the record of who deleted it; a restore brings the same bytes back, never over something
// made at the key since, and exactly once when two race; a purge destroys an entry once; the TTL purge
// keeps what is young or referenced again; and a staging stopped at any step (a kill -9, a power loss
// after the last write reached the store) loses nothing: after a restart the object is at its key or in
// the quarantine, listed.
package quarantinetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// Store is one store under test, made fresh for every case.
type Store interface {
	// Open opens the store's quarantine. Opened again it is another process over the same store (a
	// restart, or the CLI beside a mount).
	Open(t testing.TB) quarantine.Staging
	// Write makes the object at key with data (creating its folders), replacing what is there.
	Write(t testing.TB, key string, data []byte)
	// Read returns the bytes at key; ok is false when nothing is there.
	Read(t testing.TB, key string) (data []byte, ok bool)
	// Remove removes the object at key.
	Remove(t testing.TB, key string)
	// Crash stages key with d in a as the mount's deletion does, stopped as a crash would stop it right
	// before the step-th change the staging makes to the store (step 0: before the first). It reports
	// false when the staging makes no more than step changes (it may then have completed: the suite
	// tries step 0, 1, ... and stops at false). The area a is not used again: the suite opens another.
	Crash(t testing.TB, a quarantine.Staging, key string, d quarantine.Decision, step int) bool
}

// Factory makes a fresh store for one case (a new folder, bucket or HDFS directory).
type Factory func(t *testing.T) Store

// Keys are the keys the suite stages: a short one (a self-describing entry name on the local and HDFS
// stores), and one too long for an entry name (an entry with its record written before the move).
var Keys = map[string]string{
	"short": "job/chk-1/sst-a",
	"long":  "job/chk-2/" + strings.Repeat("d123456789/", 24) + "sst-long",
}

// Caller is the record of the deletions the suite stages: an allowed unlink by a known process, as
// guard.Enforcer.Staged builds it from the FUSE request.
var Caller = quarantine.Decision{Op: quarantine.OpUnlink, Reason: quarantine.ReasonAllowed, UID: 1234, GID: 2345, PID: 4321, Comm: "rm"}

// Run runs every case of the suite, each on a fresh store from f.
func Run(t *testing.T, f Factory) {
	cases := []struct {
		name string
		run  func(t *testing.T, s Store, key string)
	}{
		{"StageListRestore", stageListRestore},
		{"FieldsAfterRestart", fieldsAfterRestart},
		{"PurgeOnce", purgeOnce},
		{"RestoreNeverReplaces", restoreNeverReplaces},
		{"RacingRestores", racingRestores},
		{"TTLPurge", ttlPurge},
		{"CrashWhileStaging", crashWhileStaging},
	}
	for _, c := range cases {
		for _, kind := range []string{"short", "long"} {
			t.Run(c.name+"/"+kind, func(t *testing.T) { c.run(t, f(t), Keys[kind]) })
		}
	}
}

var ctx = context.Background()

// content is the object the suite writes at key (distinct per key, so a restore of the wrong entry shows).
func content(key string) []byte { return []byte("state of " + key) }

// stage writes key and stages its deletion in a, checking the key is gone.
func stage(t *testing.T, s Store, a quarantine.Staging, key string) (quarantine.Entry, time.Time, time.Time) {
	t.Helper()
	s.Write(t, key, content(key))
	before := time.Now()
	e, err := a.Restage(ctx, key, Caller)
	after := time.Now()
	if err != nil {
		t.Fatalf("stage %s: %v", key, err)
	}
	if _, ok := s.Read(t, key); ok {
		t.Fatalf("%s is still at its key after staging", key)
	}
	return e, before, after
}

// only returns the one entry a lists, failing on anything else (another entry, a problem).
func only(t *testing.T, a quarantine.Staging) quarantine.Entry {
	t.Helper()
	es, probs, err := a.ListAll(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(es) != 1 || len(probs) != 0 {
		t.Fatalf("list = %+v, problems %+v; want exactly one entry", es, probs)
	}
	return es[0]
}

// empty fails unless a lists nothing, entries nor problems.
func empty(t *testing.T, a quarantine.Staging) {
	t.Helper()
	es, probs, err := a.ListAll(ctx)
	if err != nil || len(es) != 0 || len(probs) != 0 {
		t.Fatalf("list = %+v, problems %+v, %v; want an empty quarantine", es, probs, err)
	}
}

// checkFields checks that e records the staged deletion of key: where it came from, what it was, when
// and by whom it was deleted.
func checkFields(t *testing.T, e quarantine.Entry, key string, before, after time.Time) {
	t.Helper()
	if e.ID == "" || e.Key() != key || e.Size != int64(len(content(key))) || e.ModTime.IsZero() {
		t.Errorf("entry %+v: want id, path %s, size %d, mtime", e, key, len(content(key)))
	}
	d := e.Decision
	if d.Op != Caller.Op || d.Reason != Caller.Reason || d.UID != Caller.UID || d.GID != Caller.GID || d.PID != Caller.PID || d.Comm != Caller.Comm {
		t.Errorf("entry %s records the decision %+v, want %+v (op, reason and the caller's uid, gid, pid, comm)", e.ID, d, Caller)
	}
	// Deletion times are kept to the second at least (a store's clock may be read back truncated).
	if e.DeletedAt.Before(before.Add(-time.Second)) || e.DeletedAt.After(after.Add(time.Second)) {
		t.Errorf("entry %s deleted at %v, want between %v and %v", e.ID, e.DeletedAt, before, after)
	}
}

// checkBack checks the bytes at key are the ones staged.
func checkBack(t *testing.T, s Store, key string) {
	t.Helper()
	got, ok := s.Read(t, key)
	if !ok || !bytes.Equal(got, content(key)) {
		t.Fatalf("%s after restore: %q (present %v), want %q", key, got, ok, content(key))
	}
}

// stageListRestore: a staged deletion is listed with its record and found by its key; a restore brings
// the same bytes back and ends the entry.
func stageListRestore(t *testing.T, s Store, key string) {
	a := s.Open(t)
	staged, before, after := stage(t, s, a, key)
	e := only(t, a)
	if e.ID != staged.ID {
		t.Errorf("listed id %s, staging returned %s", e.ID, staged.ID)
	}
	checkFields(t, staged, key, before, after)
	checkFields(t, e, key, before, after)
	if f, ok, err := quarantine.Find(ctx, a, key); err != nil || !ok || f.ID != e.ID {
		t.Errorf("Find(%s) = %+v %v %v, want entry %s", key, f, ok, err, e.ID)
	}
	got, err := a.Restore(ctx, e.ID)
	if err != nil {
		t.Fatalf("restore %s: %v", e.ID, err)
	}
	if got.ID != e.ID || got.Key() != key {
		t.Errorf("restore returned %+v, want entry %s of %s", got, e.ID, key)
	}
	checkBack(t, s, key)
	empty(t, a)
	if _, ok, err := quarantine.Find(ctx, a, key); err != nil || ok {
		t.Errorf("Find(%s) after restore = %v %v, want none", key, ok, err)
	}
}

// fieldsAfterRestart: the entry and its record are the store's, not the process's: another process
// lists the same fields and restores it.
func fieldsAfterRestart(t *testing.T, s Store, key string) {
	_, before, after := stage(t, s, s.Open(t), key)
	a := s.Open(t)
	e := only(t, a)
	checkFields(t, e, key, before, after)
	if _, err := a.Restore(ctx, e.ID); err != nil {
		t.Fatalf("restore %s after a restart: %v", e.ID, err)
	}
	checkBack(t, s, key)
}

// purgeOnce: a purge destroys the entry (nothing at the key, nothing listed); a second purge of it is
// "no such entry", as is a restore.
func purgeOnce(t *testing.T, s Store, key string) {
	a := s.Open(t)
	e, _, _ := stage(t, s, a, key)
	if err := a.Purge(ctx, e.ID); err != nil {
		t.Fatalf("purge %s: %v", e.ID, err)
	}
	empty(t, a)
	if _, ok := s.Read(t, key); ok {
		t.Errorf("%s is at its key after its entry was purged", key)
	}
	if err := a.Purge(ctx, e.ID); !errors.Is(err, quarantine.ErrNoEntry) {
		t.Errorf("second purge of %s: %v, want %v", e.ID, err, quarantine.ErrNoEntry)
	}
	if _, err := a.Restore(ctx, e.ID); !errors.Is(err, quarantine.ErrNoEntry) {
		t.Errorf("restore of purged %s: %v, want %v", e.ID, err, quarantine.ErrNoEntry)
	}
}

// restoreNeverReplaces: a file made at the key since the deletion is never replaced by a restore
// (ErrOccupied, the entry stays); once it is moved away the restore succeeds.
func restoreNeverReplaces(t *testing.T, s Store, key string) {
	a := s.Open(t)
	e, _, _ := stage(t, s, a, key)
	newer := []byte("written after the deletion")
	s.Write(t, key, newer)
	if _, err := a.Restore(ctx, e.ID); !errors.Is(err, quarantine.ErrOccupied) {
		t.Errorf("restore over a file made since: %v, want %v", err, quarantine.ErrOccupied)
	}
	if got, ok := s.Read(t, key); !ok || !bytes.Equal(got, newer) {
		t.Fatalf("%s after a refused restore: %q (present %v), want the newer %q", key, got, ok, newer)
	}
	if got := only(t, a); got.ID != e.ID {
		t.Fatalf("listed %s after a refused restore, want %s", got.ID, e.ID)
	}
	s.Remove(t, key)
	if _, err := a.Restore(ctx, e.ID); err != nil {
		t.Fatalf("restore once the key is free: %v", err)
	}
	checkBack(t, s, key)
}

// racingRestores: two processes restoring the same entry at once (the CLI twice, or the CLI beside a
// mount): exactly one restores it, the other is told the entry is no longer there (ErrNoEntry), and the
// bytes are back once.
func racingRestores(t *testing.T, s Store, key string) {
	const rounds = 8
	for round := 0; round < rounds; round++ {
		a1, a2 := s.Open(t), s.Open(t)
		e, _, _ := stage(t, s, a1, key)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, a := range []quarantine.Staging{a1, a2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = a.Restore(ctx, e.ID)
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
			} else if !errors.Is(err, quarantine.ErrNoEntry) {
				t.Errorf("round %d: the losing restore of %s: %v, want an error wrapping %q", round, e.ID, err, quarantine.ErrNoEntry)
			}
		}
		if won != 1 {
			t.Errorf("round %d: %d of two racing restores of %s succeeded (%v), want exactly one", round, won, e.ID, errs)
		}
		checkBack(t, s, key)
		empty(t, a1)
		empty(t, a2)
	}
}

// ttlPurge: the TTL purge keeps an entry younger than the TTL and one a live checkpoint references
// again, and destroys the entry once it is older and unreferenced.
func ttlPurge(t *testing.T, s Store, key string) {
	a := s.Open(t)
	e, _, _ := stage(t, s, a, key)
	const ttl = time.Hour
	r, err := quarantine.PurgeExpired(ctx, a, nil, ttl, time.Now(), nil)
	if err != nil || len(r.Purged) != 0 || len(r.Kept) != 1 || r.Kept[0].Reason != "young" {
		t.Fatalf("purge of a young entry = %+v %v, want it kept as young", r, err)
	}
	later := time.Now().Add(2 * ttl)
	referenced := func(_ context.Context, k string) (bool, error) { return k == key, nil }
	r, err = quarantine.PurgeExpired(ctx, a, nil, ttl, later, referenced)
	if err != nil || len(r.Purged) != 0 || len(r.Kept) != 1 || r.Kept[0].Reason != "referenced" {
		t.Fatalf("purge of a referenced entry = %+v %v, want it kept as referenced", r, err)
	}
	r, err = quarantine.PurgeExpired(ctx, a, nil, ttl, later, nil)
	if err != nil || len(r.Purged) != 1 || r.Purged[0].ID != e.ID || len(r.Kept) != 0 {
		t.Fatalf("purge of an expired entry = %+v %v, want %s purged", r, err, e.ID)
	}
	empty(t, a)
	if _, ok := s.Read(t, key); ok {
		t.Errorf("%s is at its key after its entry was purged", key)
	}
}

// crashWhileStaging: a staging stopped before each of its steps in turn loses nothing. After a restart
// the object is at its key with its bytes, or in the quarantine (one entry of key, listed with its
// record, whose restore brings the bytes back); never both as an entry, so no restore is refused for a
// copy that duplicates the object still at its key. Such a duplicate may be reported as a problem (an S3
// crash copy, removed by a later Tidy), never an object whose key is unknown.
func crashWhileStaging(t *testing.T, s Store, key string) {
	for step := 0; ; step++ {
		s.Write(t, key, content(key))
		if !s.Crash(t, s.Open(t), key, Caller, step) {
			if step == 0 {
				t.Fatalf("Crash(%s, step 0) reports a staging that changes nothing in the store", key)
			}
			return
		}
		a := s.Open(t)
		es, probs, err := a.ListAll(ctx)
		if err != nil {
			t.Fatalf("crash before step %d: list after the restart: %v", step, err)
		}
		_, atKey := s.Read(t, key)
		if len(probs) != 0 && !atKey {
			t.Errorf("crash before step %d: %s is not at its key and the listing reports problems %+v", step, key, probs)
		}
		recoverCrash(t, s, a, key, step, es, atKey)
		if err := a.Tidy(ctx, 0); err != nil {
			t.Fatalf("crash before step %d: tidy: %v", step, err)
		}
		if es, err := a.List(ctx); err != nil || len(es) != 0 {
			t.Fatalf("crash before step %d: entries left after the recovery: %+v %v", step, es, err)
		}
	}
}

// recoverCrash checks what a crash before step left (es listed, the object atKey or not) and puts the
// object back at its key.
func recoverCrash(t *testing.T, s Store, a quarantine.Staging, key string, step int, es []quarantine.Entry, atKey bool) {
	t.Helper()
	switch {
	case atKey && len(es) == 0:
		checkBack(t, s, key)
	case atKey:
		t.Errorf("crash before step %d: %s is at its key and listed in the quarantine (%+v): in both places", step, key, es)
		for _, e := range es {
			_ = a.Purge(ctx, e.ID)
		}
	case len(es) == 1 && es[0].Key() == key:
		if _, err := a.Restore(ctx, es[0].ID); err != nil {
			t.Fatalf("crash before step %d: restore the entry found at restart: %v", step, err)
		}
		checkBack(t, s, key)
	default:
		t.Fatalf("crash before step %d: %s is neither at its key nor the one entry listed (%+v): lost", step, key, es)
	}
}
