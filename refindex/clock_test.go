package refindex_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/verdict"
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
			idx := t.TempDir()
			ix := openIndexWith(t, idx, st, pol)
			defer func() { ix.Close() }()
			check := func(when string) {
				t.Helper()
				var decided []string
				for _, k := range []string{"job/shared/old", "job/shared/young"} {
					if d := ix.Decide(ctx, k, verdict.OpUnlink); d.Allow {
						decided = append(decided, k)
					} else if d.Reason != verdict.ReasonGrace {
						t.Errorf("%s: %s refused for %s (%s), want the grace rule", when, k, d.Reason, d.Message)
					} else if named := strings.Contains(d.Message, "by the store's clock"); named != (tt.behind > 0) {
						t.Errorf("%s: %s refused with %q: the store's clock correction (%s) named: %v", when, k, d.Message, tt.behind, named)
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
			if d := time.Duration(s.StoreClockBehind) - tt.behind; d < -2*time.Second || d > 2*time.Second {
				t.Errorf("stats: store clock behind by %s, want about %s", s.StoreClockBehind, tt.behind)
			}
			// A store clock that cannot be read keeps the last correction.
			st.err = errors.New("clock unavailable")
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			check("after a sync that could not read the store's clock")
			// The store's clock is fixed: files stamped while it was behind still look older than they
			// are, so the correction holds (for the longest age rule) ...
			st.err, st.skew = nil, 0
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			check("after the store's clock was fixed")
			// ... also in a process started later (the CLI, a restarted mount), before any sync.
			ix.Close()
			if ix, err = refindex.Open(idx, st, pol, refindex.WithLogger(quiet)); err != nil {
				t.Fatal(err)
			}
			check("reopened after the store's clock was fixed")
		})
	}
}

// clockState keeps the largest "behind" among readings superseded less than hold ago and the latest.
func TestClockStateHold(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const hold = 15 * time.Minute
	type reading struct {
		at     time.Duration // after t0
		behind time.Duration
		want   time.Duration // the correction after this reading
	}
	tests := []struct {
		name     string
		readings []reading
	}{
		{"in step", []reading{{0, 0, 0}, {time.Minute, time.Second, 0}}},
		{"behind, rounded up to whole seconds", []reading{{0, 10*time.Minute + 300*time.Millisecond, 10*time.Minute + time.Second}}},
		{"fixed: held until hold after the next reading", []reading{
			{0, 10 * time.Minute, 10 * time.Minute},
			{time.Minute, 0, 10 * time.Minute},
			{time.Minute + hold, 0, 10 * time.Minute},
			{time.Minute + hold + time.Second, 0, 0},
		}},
		{"drifting back: the largest one holds", []reading{
			{0, 5 * time.Minute, 5 * time.Minute},
			{time.Minute, 3 * time.Minute, 5 * time.Minute},
			{2 * time.Minute, 8 * time.Minute, 8 * time.Minute},
			{3 * time.Minute, 0, 8 * time.Minute},
			{3*time.Minute + hold + time.Second, 0, 0},
		}},
		{"the latest never expires", []reading{{0, 3 * time.Minute, 3 * time.Minute}, {10 * hold, 3 * time.Minute, 3 * time.Minute}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c refindex.ClockState
			for i, r := range tt.readings {
				if got := c.Add(r.behind, t0.Add(r.at), hold); got != r.want {
					t.Errorf("reading %d (%s behind at +%s): correction %s, want %s", i, r.behind, r.at, got, r.want)
				}
			}
		})
	}
}
