package refindex_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store/localstore"
)

// skewedStore is a local store whose own clock (store.Clock) runs skew away from this host's.
type skewedStore struct {
	*localstore.Store
	skew time.Duration
	err  error
}

func (s *skewedStore) StoreTime(context.Context) (time.Time, error) {
	if s.err != nil {
		return time.Time{}, s.err
	}
	return time.Now().Add(s.skew).Truncate(time.Second), nil
}

// TestGraceByStoreClock: the grace period and orphan ages are measured by the store's clock when
// it is behind this host's (files look older here than they are), and never shortened when it is
// ahead or cannot be read.
func TestGraceByStoreClock(t *testing.T) {
	ctx := context.Background()
	const grace = 15 * time.Minute
	// Ages by this host's clock (the policy's clock, testNow).
	files := map[string]time.Duration{"job/shared/old": 20 * time.Minute, "job/shared/young": 10 * time.Minute}
	tests := []struct {
		name      string
		skew      time.Duration
		deletable []string // by Decide and by Orphans
		behind    time.Duration
	}{
		{"clocks agree", 0, []string{"job/shared/old"}, 0},
		{"store 10 min behind", -10 * time.Minute, nil, 10 * time.Minute},
		{"store 1 s behind: within the measurement's error", -time.Second, []string{"job/shared/old"}, 0},
		// Ahead: files look younger here; measuring by the store's clock would age the young file
		// to 70 minutes. It stays protected.
		{"store 1 h ahead", time.Hour, []string{"job/shared/old"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for k, age := range files {
				p := filepath.Join(root, k)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(k), 0o644); err != nil {
					t.Fatal(err)
				}
				mt := testNow.Add(-age)
				if err := os.Chtimes(p, mt, mt); err != nil {
					t.Fatal(err)
				}
			}
			ls, err := localstore.New(root)
			if err != nil {
				t.Fatal(err)
			}
			st := &skewedStore{Store: ls, skew: tt.skew}
			pol := testPolicy()
			pol.Grace = grace
			ix, err := refindex.Open(t.TempDir(), st, pol, refindex.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			defer ix.Close()
			check := func(when string) {
				t.Helper()
				var decided []string
				for _, k := range []string{"job/shared/old", "job/shared/young"} {
					if d := ix.Decide(ctx, k, refindex.OpUnlink); d.Allow {
						decided = append(decided, k)
					} else if d.Reason != refindex.ReasonGrace {
						t.Errorf("%s: %s refused for %s (%s), want the grace rule", when, k, d.Reason, d.Message)
					}
				}
				if !slices.Equal(decided, tt.deletable) {
					t.Errorf("%s: deletable %v, want %v", when, decided, tt.deletable)
				}
				orph, err := ix.Orphans(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				var orphans []string
				for _, f := range orph.Files {
					orphans = append(orphans, f.Path)
				}
				if !slices.Equal(orphans, tt.deletable) {
					t.Errorf("%s: orphans %v, want %v", when, orphans, tt.deletable)
				}
			}
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			check("after a sync")
			s, err := ix.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if d := s.StoreClockBehind - tt.behind; d < -2*time.Second || d > 2*time.Second {
				t.Errorf("stats: store clock behind by %s, want about %s", s.StoreClockBehind, tt.behind)
			}
			// A store clock that cannot be read keeps the last correction.
			st.err = errors.New("clock unavailable")
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			check("after a sync that could not read the store's clock")
		})
	}
}
