package refindex_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// TestLargeSyncIsNoRebuild: a sync that sees more changed references than one badger transaction holds
// (50 new checkpoints of 500 references: 25,000, past badger's limit with the index's memtables) applies
// them in several transactions under one sync epoch, in the same generation (no rebuild, which would list
// the whole store and re-read every _metadata); the result decides like a fresh index, and a reopened
// index is no half-written one. With tiny transactions the same holds.
func TestLargeSyncIsNoRebuild(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		txnWrites int
	}{
		{"badger's own limit", 0},
		{"tiny transactions", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "store")
			base := treegen.LargeSpec{Jobs: 2, CheckpointsPerJob: 2, RefsPerCheckpoint: 50, NewPerCheckpoint: 10, Seed: "base"}
			if _, err := treegen.Large(root, base, time.Now().Add(-48*time.Hour)); err != nil {
				t.Fatal(err)
			}
			st, err := localstore.New(root)
			if err != nil {
				t.Fatal(err)
			}
			idx := filepath.Join(t.TempDir(), "index")
			var logs bytes.Buffer
			opts := []refindex.Option{refindex.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))}
			if tc.txnWrites > 0 {
				opts = append(opts, refindex.WithTxnWrites(tc.txnWrites))
			}
			ix, err := refindex.Open(idx, st, crashPolicy(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			gen := stats(t, ix).Generation
			burst := treegen.LargeSpec{Jobs: 50, CheckpointsPerJob: 1, RefsPerCheckpoint: 500, NewPerCheckpoint: 500, Seed: "burst"}
			lr, err := treegen.Large(root, burst, time.Now().Add(-47*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			s := stats(t, ix)
			if !strings.Contains(logs.String(), "several transactions") {
				t.Errorf("the burst was written in one transaction (test assumption wrong); log:\n%s", logs.String())
			}
			if s.Generation != gen {
				t.Errorf("the sync rebuilt the index (generation %d → %d)", gen, s.Generation)
			}
			if s.References < 25_000 {
				t.Fatalf("index holds %d references, want the burst's 25,000 and more", s.References)
			}
			if got, want := liveSet(t, ix), listMetadata(t, root); !slices.Equal(got, want) {
				t.Fatalf("index holds %d checkpoints, the store %d", len(got), len(want))
			}
			for _, k := range lr.SampleReferenced {
				if d := ix.Decide(ctx, k, verdict.OpUnlink); d.Allow {
					t.Errorf("%s is referenced by the burst but may be deleted", k)
				}
			}
			if err := refindex.CheckFilter(ix); err != nil {
				t.Error(err)
			}
			ix.Close()
			ix, err = refindex.Open(idx, st, crashPolicy(), refindex.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			defer ix.Close()
			for _, k := range lr.SampleUnreferenced {
				if d := ix.Decide(ctx, k, verdict.OpUnlink); !d.Allow {
					t.Errorf("reopened after a complete multi-transaction sync, %s (unreferenced) is refused: %s", k, d.Message)
				}
			}
		})
	}
}

func stats(t *testing.T, ix *refindex.Index) *refindex.StatsResult {
	t.Helper()
	s, err := ix.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
