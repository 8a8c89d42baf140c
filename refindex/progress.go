package refindex

import (
	"time"

	"github.com/schollz/progressbar/v3"
)

// bar is a progress display (a progress bar, or nothing).
type bar interface {
	Add(int) error
	Finish() error
}

type noBar struct{}

func (noBar) Add(int) error { return nil }
func (noBar) Finish() error { return nil }

func (ix *Index) newBar(n int, what string) bar {
	if n < 100 {
		return noBar{}
	}
	return ix.progressBar(n, what)
}

// newCounter shows progress for work of unknown size (a store walk): a running count, no total.
func (ix *Index) newCounter(what string) bar { return ix.progressBar(-1, what) }

// progressBar draws on the WithProgress writer (total -1: a running count), or nothing without one.
func (ix *Index) progressBar(total int, what string) bar {
	if ix.opt.progress == nil {
		return noBar{}
	}
	return progressbar.NewOptions(total, progressbar.OptionSetWriter(ix.opt.progress), progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
}
