package refindex

import (
	"context"
	"sync"
)

// inParallel calls fn(i) for every i in [0, n), at most ix.opt.workers calls at once (stats and
// reads of a network store are latency bound), advancing b by one per call. Once ctx is done it
// starts no further call; it returns when every call it started has returned, so the caller then
// checks ctx: a call that was never made checked nothing.
func (ix *Index) inParallel(ctx context.Context, n int, b bar, fn func(i int)) {
	sem := make(chan struct{}, ix.opt.workers)
	var wg sync.WaitGroup
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done(); b.Add(1) }()
			fn(i)
		}()
	}
	wg.Wait()
}
