package refindex_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pathnorm"
)

// fakeClock is a settable clock for the policy.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// historyIndex opens an index over a copy of a real Flink store with the given history bounds and a
// fake clock, synced once. It returns the index dir too, for reopening.
func historyIndex(t *testing.T, lim refindex.HistoryLimits) (ix *refindex.Index, root, dir string, clk *fakeClock, reopen func(refindex.HistoryLimits) *refindex.Index) {
	t.Helper()
	root, prefix := drillStore(t, "2.2", "incremental")
	dir = t.TempDir()
	clk = &fakeClock{t: time.Now()}
	open := func(lim refindex.HistoryLimits) *refindex.Index {
		st, err := localstore.New(root)
		if err != nil {
			t.Fatal(err)
		}
		m, err := pathnorm.ParseMapping(prefix + "=")
		if err != nil {
			t.Fatal(err)
		}
		pol := refindex.DefaultPolicy()
		pol.Now = clk.now
		ix, err := refindex.Open(dir, st, pol, refindex.WithLogger(quiet), refindex.WithPathMap([]pathnorm.Mapping{m}, ""), refindex.WithHistoryLimits(lim))
		if err != nil {
			t.Fatal(err)
		}
		if err := ix.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		return ix
	}
	ix = open(lim)
	t.Cleanup(func() { ix.Close() })
	return ix, root, dir, clk, func(lim refindex.HistoryLimits) *refindex.Index {
		ix.Close()
		ix = open(lim)
		return ix
	}
}

// firstCheckpoint is the first live checkpoint (not savepoint) of the index.
func firstCheckpoint(t *testing.T, ix *refindex.Index) refindex.CheckpointInfo {
	t.Helper()
	cps, err := ix.Checkpoints(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range cps.Jobs {
		for _, c := range j.Checkpoints {
			if c.Kind == "checkpoint" {
				return c
			}
		}
	}
	t.Fatal("no checkpoint")
	return refindex.CheckpointInfo{}
}

func historyEntry(t *testing.T, ix *refindex.Index, meta string) (refindex.HistoryEntry, bool) {
	t.Helper()
	h, err := ix.History(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range h.Entries {
		if e.Metadata == meta {
			return e, true
		}
	}
	return refindex.HistoryEntry{}, false
}

func isLive(t *testing.T, ix *refindex.Index, meta string) bool {
	t.Helper()
	cps, err := ix.Checkpoints(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range cps.Jobs {
		for _, c := range j.Checkpoints {
			if c.Metadata == meta {
				return true
			}
		}
	}
	return false
}

// TestMetadataHistoryRestore: a _metadata deleted outside the mount is listed as retired with the time
// a sync found it gone, and restore-metadata puts it back byte-identical with its modification time,
// indexed at once; it refuses to overwrite; the history survives a rebuild and a reopen.
func TestMetadataHistoryRestore(t *testing.T) {
	for _, tc := range []struct {
		name    string
		between func(t *testing.T, ix *refindex.Index, reopen func(refindex.HistoryLimits) *refindex.Index) *refindex.Index
	}{
		{"restored after a sync", func(t *testing.T, ix *refindex.Index, _ func(refindex.HistoryLimits) *refindex.Index) *refindex.Index {
			return ix
		}},
		{"restored after a rebuild", func(t *testing.T, ix *refindex.Index, _ func(refindex.HistoryLimits) *refindex.Index) *refindex.Index {
			if err := ix.Rebuild(context.Background()); err != nil {
				t.Fatal(err)
			}
			return ix
		}},
		{"restored after a reopen", func(t *testing.T, _ *refindex.Index, reopen func(refindex.HistoryLimits) *refindex.Index) *refindex.Index {
			return reopen(refindex.HistoryLimits{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ix, root, _, clk, reopen := historyIndex(t, refindex.HistoryLimits{})
			c := firstCheckpoint(t, ix)
			p := filepath.Join(root, filepath.FromSlash(c.Metadata))
			orig, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			fi, _ := os.Stat(p)
			if e, ok := historyEntry(t, ix, c.Metadata); !ok || !e.Retired.IsZero() || e.SHA256 == "" {
				t.Fatalf("live checkpoint's history entry: %+v %v", e, ok)
			}
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			clk.add(time.Minute)
			gone := clk.now()
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			ix = tc.between(t, ix, reopen)
			e, ok := historyEntry(t, ix, c.Metadata)
			if !ok || !e.Retired.Equal(gone) {
				t.Fatalf("retired checkpoint's history entry: %+v %v, want retired at %v", e, ok, gone)
			}
			if isLive(t, ix, c.Metadata) {
				t.Fatalf("%s still live after its deletion", c.Metadata)
			}

			r, err := ix.RestoreMetadata(ctx, filepath.Dir(c.Metadata)) // the folder names it too
			if err != nil || !r.Indexed {
				t.Fatalf("restore: %+v %v", r, err)
			}
			got, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(got, orig) {
				t.Fatalf("restored %s differs (%d bytes, want %d): %v", c.Metadata, len(got), len(orig), err)
			}
			if fi2, _ := os.Stat(p); !fi2.ModTime().Equal(fi.ModTime()) {
				t.Errorf("restored mtime %v, want %v", fi2.ModTime(), fi.ModTime())
			}
			if !isLive(t, ix, c.Metadata) {
				t.Fatalf("restored %s not indexed", c.Metadata)
			}
			if e, _ := historyEntry(t, ix, c.Metadata); !e.Retired.IsZero() {
				t.Errorf("restored checkpoint still retired in the history: %+v", e)
			}
			// Never overwriting: a different file at the key stays as it is.
			if err := os.WriteFile(p, []byte("someone else's"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := ix.RestoreMetadata(ctx, c.Metadata); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("restore over an existing file: %v, want ErrExist", err)
			}
			if b, _ := os.ReadFile(p); string(b) != "someone else's" {
				t.Fatalf("restore overwrote %s", c.Metadata)
			}
		})
	}
}

// TestMetadataHistoryBounds: the per-file cap, the total budget (retired copies go first) and the
// retention of retired entries.
func TestMetadataHistoryBounds(t *testing.T) {
	ctx := context.Background()
	t.Run("per-file cap", func(t *testing.T) {
		ix, _, _, _, _ := historyIndex(t, refindex.HistoryLimits{MaxFileBytes: 1})
		h, err := ix.History(ctx, "")
		if err != nil || len(h.Entries) == 0 {
			t.Fatalf("%+v %v", h, err)
		}
		for _, e := range h.Entries {
			if e.SHA256 != "" || !strings.Contains(e.NoCopy, "per-file cap") {
				t.Errorf("%s copied over the 1-byte cap: %+v", e.Metadata, e)
			}
		}
		c := firstCheckpoint(t, ix)
		if _, err := ix.RestoreMetadata(ctx, c.Metadata); !errors.Is(err, refindex.ErrNoHistory) {
			t.Errorf("restore without a copy: %v", err)
		}
	})
	t.Run("total budget drops retired copies first", func(t *testing.T) {
		ix, root, _, clk, reopen := historyIndex(t, refindex.HistoryLimits{})
		h, _ := ix.History(ctx, "")
		c := firstCheckpoint(t, ix)
		if err := os.Remove(filepath.Join(root, filepath.FromSlash(c.Metadata))); err != nil {
			t.Fatal(err)
		}
		clk.add(time.Minute)
		if err := ix.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		// A budget of everything but one byte: the retired copy goes, the live ones stay.
		ix2 := reopen(refindex.HistoryLimits{MaxTotalBytes: h.Bytes - 1})
		h2, _ := ix2.History(ctx, "")
		for _, e := range h2.Entries {
			switch {
			case e.Metadata == c.Metadata && e.SHA256 != "":
				t.Errorf("retired copy kept over the budget: %+v", e)
			case e.Metadata != c.Metadata && e.SHA256 == "":
				t.Errorf("live copy dropped while a retired one could go: %+v", e)
			}
		}
		if h2.Bytes > h.Bytes-1 {
			t.Errorf("history holds %d bytes, budget %d", h2.Bytes, h.Bytes-1)
		}
	})
	t.Run("retired entries expire", func(t *testing.T) {
		ix, root, _, clk, _ := historyIndex(t, refindex.HistoryLimits{KeepRetired: time.Hour})
		c := firstCheckpoint(t, ix)
		if err := os.Remove(filepath.Join(root, filepath.FromSlash(c.Metadata))); err != nil {
			t.Fatal(err)
		}
		clk.add(time.Minute)
		if err := ix.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := historyEntry(t, ix, c.Metadata); !ok {
			t.Fatal("retired entry dropped at once")
		}
		clk.add(2 * time.Hour)
		if err := ix.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if e, ok := historyEntry(t, ix, c.Metadata); ok {
			t.Fatalf("retired entry kept past its retention: %+v", e)
		}
	})
}
