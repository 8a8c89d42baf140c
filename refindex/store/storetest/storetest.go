// Package storetest is the conformance suite every store.Store implementation runs:
//
//	storetest.Run(t, func(t *testing.T) storetest.Harness { ... })
//
// The harness creates objects through a backend-specific writer hook, so the suite itself never
// depends on how a backend stores data.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
)

// Harness is one fresh, empty store plus a way to create objects in it.
type Harness struct {
	Store store.Store
	// Put creates (or replaces) the object key with data. modTime is the wanted modification time;
	// backends that cannot set it (S3) ignore it and report ModTimeSettable=false.
	Put             func(ctx context.Context, key string, data []byte, modTime time.Time) error
	ModTimeSettable bool
	// Unreadable, when the backend can fake it, makes the folder key unreadable to the store (its
	// listing fails: EACCES, a failing prefix) until restore is called.
	Unreadable func(t *testing.T, key string) (restore func())
}

// Run runs the whole suite; newHarness must return an empty store each time it is called.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Run("StatOpenRead", func(t *testing.T) { testStatOpen(t, newHarness(t)) })
	t.Run("NotExist", func(t *testing.T) { testNotExist(t, newHarness(t)) })
	t.Run("Walk", func(t *testing.T) { testWalk(t, newHarness(t)) })
	t.Run("ListMetadata", func(t *testing.T) { testListMetadata(t, newHarness(t)) })
	t.Run("Cancel", func(t *testing.T) { testCancel(t, newHarness(t)) })
	t.Run("OddNames", func(t *testing.T) { testOddNames(t, newHarness(t)) })
	t.Run("Clock", func(t *testing.T) { testClock(t, newHarness(t)) })
	t.Run("UnknownSubtree", func(t *testing.T) { testUnknownSubtree(t, newHarness(t)) })
}

// testClock: a store that reads its own clock (store.Clock) reads it rounded down, never ahead. The
// test servers run on this host, so their clock is this host's; an HTTP Date header has whole seconds
// and servers may render it from a clock they refresh once a second, so it may be up to 2 s behind.
func testClock(t *testing.T, h Harness) {
	c, ok := h.Store.(store.Clock)
	if !ok {
		t.Skip("the store has no clock of its own")
	}
	before := time.Now()
	got, err := c.StoreTime(context.Background())
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if got.Before(before.Add(-2*time.Second)) || got.After(after) {
		t.Errorf("store time %s, this host's clock read %s … %s", got.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano))
	}
}

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func put(t *testing.T, h Harness, key string, data []byte) {
	t.Helper()
	if err := h.Put(context.Background(), key, data, epoch); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func testStatOpen(t *testing.T, h Harness) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("flink"), 1000)
	put(t, h, "job/chk-1/_metadata", data)
	oi, err := h.Store.Stat(ctx, "job/chk-1/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	if oi.Path != "job/chk-1/_metadata" || oi.Size != int64(len(data)) || oi.IsDir {
		t.Fatalf("stat = %+v", oi)
	}
	if h.ModTimeSettable && !oi.ModTime.Equal(epoch) {
		t.Errorf("modtime = %v, want %v", oi.ModTime, epoch)
	}
	if oi.ModTime.IsZero() {
		t.Errorf("modtime is zero")
	}
	// Non-canonical spellings of the same key name the same object.
	for _, k := range []string{"/job/chk-1/_metadata", "job//chk-1/_metadata", "job/./chk-1/_metadata"} {
		o2, err := h.Store.Stat(ctx, k)
		if err != nil || o2.Path != oi.Path || o2.Size != oi.Size {
			t.Errorf("stat %q = %+v, %v", k, o2, err)
		}
	}
	d, err := h.Store.Stat(ctx, "job/chk-1")
	if err != nil || !d.IsDir {
		t.Errorf("stat dir = %+v, %v", d, err)
	}
	r, err := h.Store.Open(ctx, "job/chk-1/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Size() != int64(len(data)) {
		t.Errorf("reader size %d", r.Size())
	}
	buf := make([]byte, 10)
	if _, err := r.ReadAt(buf, 4900); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, data[4900:4910]) {
		t.Errorf("ReadAt = %q", buf)
	}
	all := make([]byte, len(data))
	if n, err := r.ReadAt(all, 0); n != len(data) || (err != nil && n != len(data)) {
		t.Fatalf("ReadAt all: %d %v", n, err)
	}
	if !bytes.Equal(all, data) {
		t.Errorf("content differs")
	}
	if _, err := h.Store.Stat(ctx, "../outside"); err == nil {
		t.Errorf("stat of a key above the root succeeded")
	}
}

func testNotExist(t *testing.T, h Harness) {
	ctx := context.Background()
	put(t, h, "a/b", []byte("x"))
	if _, err := h.Store.Stat(ctx, "a/c"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat missing: %v", err)
	}
	if _, err := h.Store.Open(ctx, "nope/_metadata"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("open missing: %v", err)
	}
	n := 0
	if err := h.Store.Walk(ctx, "nothing-here", func(store.ObjectInfo) error { n++; return nil }); err != nil {
		t.Errorf("walk missing prefix: %v", err)
	}
	if n != 0 {
		t.Errorf("walk of a missing prefix reported %d objects", n)
	}
}

func files(t *testing.T, h Harness, prefix string) []string {
	t.Helper()
	var got []string
	err := h.Store.Walk(context.Background(), prefix, func(oi store.ObjectInfo) error {
		if !oi.IsDir {
			got = append(got, oi.Path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %q: %v", prefix, err)
	}
	sort.Strings(got)
	return got
}

func testWalk(t *testing.T, h Harness) {
	keys := []string{"j1/chk-1/_metadata", "j1/chk-1/a", "j1/shared/s1", "j1/shared/s2", "j10/x", "j1.x/y", "top"}
	for _, k := range keys {
		put(t, h, k, []byte(k))
	}
	want := append([]string(nil), keys...)
	sort.Strings(want)
	if got := files(t, h, ""); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("walk all = %v, want %v", got, want)
	}
	// A prefix is a directory: j1 must not include j10/ or j1.x/.
	if got := files(t, h, "j1"); strings.Join(got, ",") != "j1/chk-1/_metadata,j1/chk-1/a,j1/shared/s1,j1/shared/s2" {
		t.Errorf("walk j1 = %v", got)
	}
	if got := files(t, h, "j1/shared/"); strings.Join(got, ",") != "j1/shared/s1,j1/shared/s2" {
		t.Errorf("walk j1/shared/ = %v", got)
	}
	sizes := map[string]int64{}
	_ = h.Store.Walk(context.Background(), "", func(oi store.ObjectInfo) error {
		if !oi.IsDir {
			sizes[oi.Path] = oi.Size
		}
		return nil
	})
	if sizes["j1/shared/s1"] != int64(len("j1/shared/s1")) {
		t.Errorf("walk size = %d", sizes["j1/shared/s1"])
	}
	stop := errors.New("stop")
	n := 0
	err := h.Store.Walk(context.Background(), "", func(oi store.ObjectInfo) error {
		n++
		return stop
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("walk did not stop on the callback error: %v after %d", err, n)
	}
}

func testListMetadata(t *testing.T, h Harness) {
	keys := []string{
		"ckpt/jobA/chk-1/_metadata", "ckpt/jobA/chk-1/data",
		"ckpt/jobA/chk-2/._metadata_temp", "ckpt/jobA/chk-2/._metadata.inprogress.1234",
		"ckpt/jobA/chk-3/_metadata.bak", "ckpt/jobA/chk-3/x_metadata",
		"savepoints/savepoint-abc123-0123456789ab/_metadata",
		"deep/a/b/c/d/chk-9/_metadata", "_metadata",
	}
	for _, k := range keys {
		put(t, h, k, []byte("m"))
	}
	var got []string
	err := h.Store.ListMetadata(context.Background(), func(oi store.ObjectInfo) error {
		if oi.IsDir {
			t.Errorf("ListMetadata reported a directory %s", oi.Path)
		}
		if oi.Size != 1 || oi.ModTime.IsZero() {
			t.Errorf("ListMetadata info %+v", oi)
		}
		got = append(got, oi.Path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	want := "_metadata,ckpt/jobA/chk-1/_metadata,deep/a/b/c/d/chk-9/_metadata,savepoints/savepoint-abc123-0123456789ab/_metadata"
	if strings.Join(got, ",") != want {
		t.Errorf("ListMetadata = %v\nwant %s", got, want)
	}
}

func testCancel(t *testing.T, h Harness) {
	put(t, h, "a/_metadata", []byte("m"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Store.Walk(ctx, "", func(store.ObjectInfo) error { return nil }); err == nil {
		t.Errorf("walk with a cancelled context succeeded")
	}
	if err := h.Store.ListMetadata(ctx, func(store.ObjectInfo) error { return nil }); err == nil {
		t.Errorf("ListMetadata with a cancelled context succeeded")
	}
}

func testOddNames(t *testing.T, h Harness) {
	keys := []string{"odd/with space/_metadata", "odd/ünïcödé/f", "odd/percent%20/f", "odd/-dash/f"}
	for _, k := range keys {
		put(t, h, k, []byte("z"))
	}
	got := files(t, h, "odd")
	want := append([]string(nil), keys...)
	sort.Strings(want)
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("walk odd = %q want %q", got, want)
	}
	for _, k := range keys {
		if _, err := h.Store.Stat(context.Background(), k); err != nil {
			t.Errorf("stat %q: %v", k, err)
		}
	}
}

// testUnknownSubtree: a folder the store cannot read fails a walk and a listing with an error wrapping
// *store.UnknownSubtree naming it, unless the caller takes unknown subtrees (store.WithUnknown): then it
// is reported, once, and everything else is listed. Once readable again, nothing is unknown.
func testUnknownSubtree(t *testing.T, h Harness) {
	if h.Unreadable == nil {
		t.Skip("the harness cannot make a folder unreadable")
	}
	ctx := context.Background()
	for _, k := range []string{"a/_metadata", "b/x/_metadata", "b/y", "c/_metadata"} {
		if err := h.Put(ctx, k, []byte("m"), time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	restore := h.Unreadable(t, "b")
	var u *store.UnknownSubtree
	if err := h.Store.ListMetadata(ctx, func(store.ObjectInfo) error { return nil }); !errors.As(err, &u) || u.Key != "b" {
		t.Errorf("ListMetadata without a callback = %v, want an UnknownSubtree b", err)
	}
	if err := h.Store.Walk(ctx, "", func(store.ObjectInfo) error { return nil }); !errors.As(err, &u) || u.Key != "b" {
		t.Errorf("Walk without a callback = %v, want an UnknownSubtree b", err)
	}
	var unknown []string
	uctx := store.WithUnknown(ctx, func(u store.UnknownSubtree) error { unknown = append(unknown, u.Key); return nil })
	var got []string
	if err := h.Store.ListMetadata(uctx, func(oi store.ObjectInfo) error { got = append(got, oi.Path); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	if strings.Join(got, ",") != "a/_metadata,c/_metadata" || strings.Join(unknown, ",") != "b" {
		t.Errorf("ListMetadata with a callback = %v, unknown %v; want a and c, unknown b", got, unknown)
	}
	unknown = nil
	files := 0
	if err := h.Store.Walk(uctx, "", func(oi store.ObjectInfo) error {
		if strings.HasPrefix(oi.Path, "b/") {
			t.Errorf("Walk reported %s below the unreadable folder", oi.Path)
		}
		if !oi.IsDir {
			files++
		}
		return nil
	}); err != nil || files != 2 || strings.Join(unknown, ",") != "b" {
		t.Errorf("Walk with a callback = %d files, unknown %v, %v; want 2, b", files, unknown, err)
	}
	restore()
	unknown, got = nil, nil
	if err := h.Store.ListMetadata(uctx, func(oi store.ObjectInfo) error { got = append(got, oi.Path); return nil }); err != nil || len(got) != 3 || len(unknown) != 0 {
		t.Errorf("readable again: %v, unknown %v, %v", got, unknown, err)
	}
}
