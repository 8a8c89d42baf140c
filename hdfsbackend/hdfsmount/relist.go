package hdfsmount

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
)

// relister lists a directory again to refresh the attributes of the names still in it, when a caller
// needs them younger than the last listing (filesystem.stat).
//
// Invariants:
//   - The refreshed attributes go through attrCache.put stamped no later than the RPC that listed
//     them, so they are judged by their true age and never bring back a name the mount changed since.
//   - Bounded cost: one relisting of a directory at a time (callers wait for it and share it), at most
//     one every relistMinInterval per directory (a name the relisting did not show is stat'ed), and
//     none of a directory that had more than relistMaxEntries entries (stat'ed name by name).
//   - A failed relisting only means the caller stats: the errors a decision sees are its own stat's.
type relister struct {
	fsys *filesystem

	mu   sync.Mutex
	busy map[string]*relisting
	last map[string]time.Time // start of the last relisting, per directory
	big  map[string]bool      // directories too big to relist
}

type relisting struct {
	done chan struct{}
	ok   bool
}

const (
	// relistWindow: only names a listing showed this recently are refreshed by relisting (a walk
	// under way), others are stat'ed.
	relistWindow = 30 * time.Second
	// relistMinInterval bounds how often one directory is relisted.
	relistMinInterval = 500 * time.Millisecond
	// relistMaxEntries bounds a relisting (5 pages): a bigger directory is stat'ed name by name.
	relistMaxEntries = 5000
	// relistMaxDirs bounds the per-directory bookkeeping.
	relistMaxDirs = 4096
)

var errRelistTooBig = errors.New("directory too big to relist")

func newRelister(f *filesystem) *relister {
	return &relister{fsys: f, busy: map[string]*relisting{}, last: map[string]time.Time{}, big: map[string]bool{}}
}

// relist lists dir again (or waits for the relisting under way); false when it did not.
func (r *relister) relist(ctx context.Context, dir string) bool {
	r.mu.Lock()
	if r.big[dir] {
		r.mu.Unlock()
		return false
	}
	if l := r.busy[dir]; l != nil {
		r.mu.Unlock()
		select {
		case <-l.done:
			return l.ok
		case <-ctx.Done():
			return false
		}
	}
	now := time.Now()
	if now.Sub(r.last[dir]) < relistMinInterval {
		r.mu.Unlock()
		return false
	}
	if len(r.last) >= relistMaxDirs {
		clear(r.last)
	}
	r.last[dir] = now
	l := &relisting{done: make(chan struct{})}
	r.busy[dir] = l
	r.mu.Unlock()

	n := 0
	stamp := now
	err := r.fsys.fs.List(ctx, r.fsys.abs(dir), func(page []hdfsclient.FileInfo) error {
		r.fsys.attrs.put(dir, page, stamp)
		if n += len(page); n > relistMaxEntries {
			return errRelistTooBig
		}
		stamp = time.Now() // the next RPC starts after this
		return nil
	})

	r.mu.Lock()
	if errors.Is(err, errRelistTooBig) {
		if len(r.big) >= relistMaxDirs {
			clear(r.big)
		}
		r.big[dir] = true
	}
	l.ok = err == nil || errors.Is(err, errRelistTooBig)
	delete(r.busy, dir)
	r.mu.Unlock()
	close(l.done)
	return l.ok
}
