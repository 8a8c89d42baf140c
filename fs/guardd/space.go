package guardd

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// lowSpaceFraction is the free share of the store's filesystem under which the mount warns (once, until
// it is back over recoverFraction): a full store makes Flink fail its next checkpoint, and deleted data
// held in the quarantine is part of what fills it.
const (
	lowSpaceFraction = 0.05
	recoverFraction  = 0.10
)

// spaceWatch exports the store's free space after every sync and says when it runs low.
type spaceWatch struct {
	low, failed bool
}

func (w *spaceWatch) check(ctx context.Context, read func(context.Context) (quarantine.Space, error), met *metrics.Metrics, log *slog.Logger) {
	sp, err := read(ctx)
	if err != nil {
		if !w.failed {
			log.Warn("cannot read the store filesystem's free space (ckguard_store_free_bytes not updated)", "err", err)
		}
		w.failed = true
		return
	}
	w.failed = false
	met.SetStoreSpace(sp.Size, sp.Free)
	if sp.Size <= 0 {
		return
	}
	frac := float64(sp.Free) / float64(sp.Size)
	switch {
	case !w.low && frac < lowSpaceFraction:
		w.low = true
		log.Warn("the store's filesystem is almost full: Flink's next checkpoint may fail; free space (ckguard quarantine purge --older-than, or a shorter --quarantine, if the quarantine holds much: ckguard_quarantine_bytes)",
			"free_bytes", sp.Free, "size_bytes", sp.Size, "free", fmt.Sprintf("%.1f%%", 100*frac))
	case w.low && frac >= recoverFraction:
		w.low = false
		log.Info("the store's filesystem has room again", "free_bytes", sp.Free, "size_bytes", sp.Size)
	}
}
