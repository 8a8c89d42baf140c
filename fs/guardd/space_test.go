package guardd

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// TestSpaceWatch: the store's free space is exported after every sync; falling under 5 % warns once,
// not at every sync, and again only after it was back over 10 %; a failing statfs is said once.
func TestSpaceWatch(t *testing.T) {
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	met := metrics.New()
	var w spaceWatch
	free := []int64{50, 4, 3, 8, 11, 2}
	wantLow := []int{0, 1, 1, 1, 1, 2} // cumulative "almost full" warnings
	for i, f := range free {
		w.check(context.Background(), func(context.Context) (quarantine.Space, error) {
			return quarantine.Space{Size: 100, Free: f}, nil
		}, met, log)
		if got := strings.Count(logBuf.String(), "almost full"); got != wantLow[i] {
			t.Fatalf("after free=%d%%: %d warnings, want %d\n%s", f, got, wantLow[i], logBuf.String())
		}
		if got := gauge(t, met, "ckguard_store_free_bytes"); got != float64(f) {
			t.Fatalf("ckguard_store_free_bytes = %v, want %d", got, f)
		}
	}
	if !strings.Contains(logBuf.String(), "has room again") {
		t.Errorf("recovery not logged:\n%s", logBuf.String())
	}
	for range 3 {
		w.check(context.Background(), func(context.Context) (quarantine.Space, error) {
			return quarantine.Space{}, errors.New("statfs: input/output error")
		}, met, log)
	}
	if got := strings.Count(logBuf.String(), "cannot read the store filesystem"); got != 1 {
		t.Errorf("a failing statfs logged %d times over 3 syncs, want once", got)
	}
}
