package main

import (
	"context"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/refindex"
)

// retiringIndex answers verifies whose only broken checkpoints were retired while checked, for the
// first `retiring` verifies, then a clean one; Sync counts the re-syncs between them.
type retiringIndex struct {
	refindex.Querier
	retiring, verifies, syncs int
}

func (r *retiringIndex) Verify(context.Context) (*refindex.VerifyResult, error) {
	r.verifies++
	if r.verifies <= r.retiring {
		return &refindex.VerifyResult{OK: true, Broken: []refindex.BrokenCheckpoint{}, RetiredDuringCheck: []string{"ck/j/chk-7/_metadata"}}, nil
	}
	return &refindex.VerifyResult{OK: true, Broken: []refindex.BrokenCheckpoint{}}, nil
}

func (r *retiringIndex) Sync(context.Context) error { r.syncs++; return nil }

// TestSettledVerify: a verify whose only broken checkpoints were retired while it checked is asked
// again after a re-sync of the index, and one that never settles is not green (Untrusted names the
// retired checkpoint): their successors, not indexed yet, may need the same missing objects.
func TestSettledVerify(t *testing.T) {
	for _, tc := range []struct {
		name            string
		retiring        int
		verifies, syncs int
		stillUnsettled  bool
	}{
		{"settles after one re-sync", 1, 2, 1, false},
		{"never settles", 100, settleTries, settleTries - 1, true},
		{"clean at once", 0, 1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &retiringIndex{retiring: tc.retiring}
			v, err := settledVerify(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			if q.verifies != tc.verifies || q.syncs != tc.syncs {
				t.Errorf("%d verifies, %d syncs; want %d, %d", q.verifies, q.syncs, tc.verifies, tc.syncs)
			}
			if unsettled(v) != tc.stillUnsettled {
				t.Errorf("unsettled %v, want %v", unsettled(v), tc.stillUnsettled)
			}
			if tc.stillUnsettled && !strings.Contains(unsettledWhy(v), "ck/j/chk-7/_metadata") {
				t.Errorf("why: %s", unsettledWhy(v))
			}
		})
	}
}
