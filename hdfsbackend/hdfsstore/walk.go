package hdfsstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/refindex/store"
)

// walk lists the directory key and everything below it with up to opts.Parallel concurrent paged
// listings, and calls fn (from the calling goroutine only, one entry at a time) for every entry. The
// first listing error or fn error stops the walk and is returned: a walk never ends "successfully"
// with a directory it could not list. A missing prefix below the root is an empty walk; a missing
// store root is an error.
func (s *Store) walk(ctx context.Context, key string, fn func(store.ObjectInfo) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if err := ctx.Err(); err != nil {
		return err
	}

	q := &dirQueue{}
	var owners sync.Map // folder key -> its owner (OwnerID), for the unknown subtree of a folder that cannot be listed
	q.cond = sync.NewCond(&q.mu)
	q.push(key)
	// A worker waiting for work must wake when the walk is cancelled.
	stop := context.AfterFunc(ctx, func() { q.mu.Lock(); q.cond.Broadcast(); q.mu.Unlock() })
	defer stop()
	out := make(chan []store.ObjectInfo, s.opts.Parallel)
	var wg sync.WaitGroup
	for range s.opts.Parallel {
		wg.Go(func() {
			for {
				dir, ok := q.pop(ctx)
				if !ok {
					return
				}
				err := s.fs.List(ctx, s.abs(dir), func(page []hdfsclient.FileInfo) error {
					batch := make([]store.ObjectInfo, 0, len(page))
					for _, fi := range page {
						if !validName(fi.Name) {
							return fmt.Errorf("HDFS listing of %s returned the invalid name %q", s.abs(dir), fi.Name)
						}
						if dir == "" && fi.Name == store.QuarantineDir {
							continue // staged deletions are not store data (a `_metadata` there is no live checkpoint)
						}
						oi := s.info(rel(dir, fi.Name), fi)
						if fi.IsDir {
							if oi.HasUID {
								owners.Store(oi.Path, oi.UID)
							}
							q.push(oi.Path)
						}
						batch = append(batch, oi)
					}
					select {
					case out <- batch:
						return nil
					case <-ctx.Done():
						return context.Cause(ctx)
					}
				})
				// A missing (or non-directory) starting prefix is an empty walk, and a folder below it
				// that is gone by the time it is listed (Flink removing a subsumed chk-N meanwhile) is
				// simply gone, as on a local store; anything else stops the walk, a missing store root
				// too (an empty answer would retire every checkpoint).
				startGone := dir == key && key != "" && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrInvalid))
				belowGone := dir != key && errors.Is(err, fs.ErrNotExist)
				if err != nil && !startGone && !belowGone {
					// A folder that cannot be listed (permission denied for the guard's user, a name
					// that is no valid key, an error of the NameNode on that folder) is an unknown
					// subtree when the caller takes them: the rest of the walk goes on.
					if ctx.Err() == nil {
						u := store.UnknownSubtree{Key: dir, Err: fmt.Errorf("listing %s: %w", s.abs(dir), err)}
						if uid, ok := owners.Load(dir); ok { // its owner, from its parent's listing
							u.UID, u.HasUID = uid.(uint32), true
						}
						err = store.ReportUnknown(ctx, u)
					}
					if err != nil {
						cancel(err)
					}
				}
				q.done()
			}
		})
	}
	go func() { wg.Wait(); close(out) }()

	var fnErr error
	for batch := range out {
		if fnErr != nil {
			continue // drain until the workers have stopped
		}
		for _, oi := range batch {
			if err := fn(oi); err != nil {
				fnErr = err
				cancel(err)
				break
			}
		}
	}
	if fnErr != nil {
		return fnErr
	}
	if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

// dirQueue holds the directories still to list; pop blocks until one is there or none is pending
// (every pushed directory has been listed), which ends the walk.
type dirQueue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	dirs    []string
	pending int // pushed and not yet done
}

func (q *dirQueue) push(d string) {
	q.mu.Lock()
	q.dirs = append(q.dirs, d)
	q.pending++
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *dirQueue) done() {
	q.mu.Lock()
	q.pending--
	q.mu.Unlock()
	q.cond.Broadcast()
}

func (q *dirQueue) pop(ctx context.Context) (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.dirs) == 0 && q.pending > 0 && ctx.Err() == nil {
		q.cond.Wait()
	}
	if ctx.Err() != nil || len(q.dirs) == 0 {
		q.cond.Broadcast()
		return "", false
	}
	d := q.dirs[len(q.dirs)-1] // depth first keeps the queue short
	q.dirs = q.dirs[:len(q.dirs)-1]
	return d, true
}
