package refindex_test

import (
	"context"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// A file whose mtime is later than the decision's clock reading (a writer racing the decision, or
// clock granularity) is still "in grace" under a positive --grace, but --grace 0 switches the rule off
// entirely (go-fuse's posixtest ParallelFileOpen decides such files through a --grace 0s mount).
func TestGraceWithFutureModTime(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	young := tr.InGrace(treegen.DefaultPolicy)
	if len(young) != 1 {
		t.Fatalf("scenario: young %v", young)
	}
	ix := openTree(t, tr)
	tests := []struct {
		name  string
		grace time.Duration
		allow bool
	}{
		{"grace off", 0, true},
		{"grace on", time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := ix.Policy()
			pol.Grace = tt.grace
			// The decision's clock reads an hour before the file's mtime.
			pol.Now = func() time.Time { return testNow.Add(-3 * time.Hour) }
			if err := ix.SetPolicy(pol); err != nil {
				t.Fatal(err)
			}
			for _, op := range []verdict.Op{verdict.OpWrite, verdict.OpUnlink} {
				d := ix.Decide(ctx, young[0], op)
				if d.Allow != tt.allow {
					t.Errorf("%s %s with --grace %s: %+v", op, young[0], tt.grace, d)
				}
			}
		})
	}
}
