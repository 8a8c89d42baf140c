package refindex

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
)

// defaultProgressLogEvery is how often long index work logs its progress when no progress writer is
// set (a mount daemon under a service manager: a rebuild of a big bucket at start takes minutes to
// hours, and an operator reading the journal must see it advance rather than a daemon that looks hung).
const defaultProgressLogEvery = 30 * time.Second

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

// progressBar draws on the WithProgress writer (total -1: a running count); without one it logs a line
// at most every WithProgressLog interval (none when that is negative).
func (ix *Index) progressBar(total int, what string) bar {
	if ix.opt.progress == nil {
		if ix.opt.progressLog < 0 {
			return noBar{}
		}
		every := ix.opt.progressLog
		if every == 0 {
			every = defaultProgressLogEvery
		}
		now := time.Now()
		b := &logBar{log: ix.log, what: what, total: int64(total), every: every, start: now}
		b.last.Store(now.UnixNano())
		return b
	}
	return progressbar.NewOptions(total, progressbar.OptionSetWriter(ix.opt.progress), progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
}

// logBar logs the work done so far, at most once per interval, from whichever Add crosses it (Add is
// called from several goroutines); Finish logs the total when a progress line was logged.
type logBar struct {
	log    *slog.Logger
	what   string
	total  int64 // -1: unknown
	every  time.Duration
	start  time.Time
	done   atomic.Int64
	last   atomic.Int64 // unix nanoseconds of the last line (or the start)
	logged atomic.Bool
}

func (b *logBar) Add(n int) error {
	d := b.done.Add(int64(n))
	now := time.Now()
	last := b.last.Load()
	if now.UnixNano()-last < int64(b.every) || !b.last.CompareAndSwap(last, now.UnixNano()) {
		return nil
	}
	b.logged.Store(true)
	b.line("index work in progress", d, now)
	return nil
}

func (b *logBar) Finish() error {
	if b.logged.Load() {
		b.line("index work finished", b.done.Load(), time.Now())
	}
	return nil
}

func (b *logBar) line(msg string, done int64, now time.Time) {
	attrs := []any{"work", b.what, "done", done}
	if b.total >= 0 {
		attrs = append(attrs, "total", b.total)
	}
	b.log.Info(msg, append(attrs, "elapsed", now.Sub(b.start).Round(time.Second))...)
}
