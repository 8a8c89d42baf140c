package s3mount

import (
	"time"

	"github.com/ckguard/ckguard/s3backend/deleteq"
)

// TuneQueue lets tests adjust the delete queue's options (wrap its rechecker or deleter).
func TuneQueue(o *Options, f func(*deleteq.Options)) { o.tuneQueue = f }

// HashInodes replaces the hash inode numbers start from (tests make every key collide).
func HashInodes(o *Options, h func(string) uint64) { o.inoHash = h }

// LiveFileInodes is the number of file inodes the kernel holds.
func (m *Mounted) LiveFileInodes() int { return m.fsys.inos.liveFiles() }

// InodeKnown reports whether the kernel holds an inode numbered for key.
func (m *Mounted) InodeKnown(key string) bool {
	t := m.fsys.inos
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.live {
		if s.key == key {
			return true
		}
	}
	return false
}

// ListedAhead is the number of first pages an opendir took from the pages listed ahead.
func (m *Mounted) ListedAhead() int64 { return m.fsys.ahead.served.Load() }

// ListAheadTTL replaces the age past which a page listed ahead is discarded.
func ListAheadTTL(o *Options, d time.Duration) { o.listAheadTTL = d }

// ListAheadEvents makes the list-ahead send on the returned channel (without blocking) each time one
// of its requests ends: with ListAheadIdle, a wait for it to settle without sleeping.
func ListAheadEvents(o *Options) <-chan struct{} {
	ch := make(chan struct{}, 1)
	o.listAheadEvents = func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return ch
}

// ListAheadIdle reports whether no request listed ahead is in flight.
func (m *Mounted) ListAheadIdle() bool { return m.fsys.ahead.idle() }

// ListedAheadPages is the number of pages listed ahead and held for folder key (0: none).
func (m *Mounted) ListedAheadPages(key string) int { return m.fsys.ahead.heldPages()[key] }

// FollowedAhead is the number of pages after a folder's first an opendir took from the pages listed ahead.
func (m *Mounted) FollowedAhead() int64 { return m.fsys.ahead.followed.Load() }

// ListedAheadDone reports whether the first page of folder key is held, listed, and not yet taken.
func (m *Mounted) ListedAheadDone(key string) bool { return m.fsys.ahead.done(key) }

// ChunkBytes is the size of the read chunk buffers the open files hold.
func (m *Mounted) ChunkBytes() int64 { return m.fsys.chunkBytes.Load() }
