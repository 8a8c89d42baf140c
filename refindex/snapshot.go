package refindex

import (
	"bytes"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
)

// snapshot is one read-only badger transaction shared by every decision between two commits.
// Opening a transaction per decision costs a read-timestamp round trip through badger's watermark
// goroutine (a channel send on begin and on discard: cross-thread wake-ups on the hot path); badger
// allows concurrent Gets and iterators on one read-only transaction (Txn.Get does not touch the
// transaction's state unless it is an update; NewIterator and Iterator.Close count iterators
// atomically). A commit (apply) or a generation switch installs a new snapshot beside the new memState.
//
// A snapshot is finished (transaction discarded, filter decrements applied) when its last user is
// gone. Its users: the views reading it, one reference while it is the current snapshot, and one
// held by its predecessor until the predecessor is finished. The last one orders finishing: the
// filter decrements of the commit that ended snapshot k are applied only once no view can read
// snapshot k or any older one, so a view never sees a zero filter slot for an object its snapshot
// still references.
type snapshot struct {
	txn   *badger.Txn
	users atomic.Int64
	// Set once, when the next snapshot replaces this one (under Index.writeMu and Index.mu):
	next  *snapshot  // released when this one is finished
	filt  *refFilter // the filter undo applies to (nil: none)
	undo  []uint64   // hashes of reverse entries the commit after this snapshot removed
	owner *generation

	// Idle iterators over the reverse table, reused by decisions (creating one builds an iterator
	// per memtable and level, a good part of a decision's cost). Closed when the snapshot finishes.
	itMu sync.Mutex
	its  []*badger.Iterator
}

// maxIdleIterators bounds the reverse-table iterators a snapshot keeps for reuse (about the number
// of decisions running at once).
const maxIdleIterators = 8

var reversePrefix = []byte(tblReverse)

// reverseIterator returns an iterator over the reverse table for one goroutine; give it back with
// putIterator.
func (s *snapshot) reverseIterator() *badger.Iterator {
	s.itMu.Lock()
	if n := len(s.its); n > 0 {
		it := s.its[n-1]
		s.its = s.its[:n-1]
		s.itMu.Unlock()
		return it
	}
	s.itMu.Unlock()
	return s.txn.NewIterator(badger.IteratorOptions{Prefix: reversePrefix})
}

func (s *snapshot) putIterator(it *badger.Iterator) {
	s.itMu.Lock()
	if len(s.its) < maxIdleIterators {
		s.its = append(s.its, it)
		s.itMu.Unlock()
		return
	}
	s.itMu.Unlock()
	it.Close()
}

func newSnapshot(g *generation) *snapshot {
	s := &snapshot{txn: g.db.NewTransaction(false), owner: g}
	s.users.Store(1) // current
	return s
}

func (s *snapshot) acquire() { s.users.Add(1) }

func (s *snapshot) release() {
	if s.users.Add(-1) != 0 {
		return
	}
	s.itMu.Lock()
	for _, it := range s.its {
		it.Close()
	}
	s.its = nil
	s.itMu.Unlock()
	s.txn.Discard()
	if s.filt != nil {
		for _, h := range s.undo {
			s.filt.dec(h)
		}
	}
	if s.next != nil {
		s.next.release()
	}
}

// refFilter is an exact, conservative "may be referenced" test for the reverse table: a counting
// array indexed by a hash of the object key, holding at least the number of reverse entries
// (r/<obj>\x00<meta>) of the objects hashing to each slot. A zero slot proves that no committed
// state a view can still read references the object, so an unreferenced file is decided without
// touching badger; a non-zero slot (referenced, or a collision) falls back to the exact prefix scan.
//
// Never under-count: apply increments before its commit and defers decrements until no view reads
// the state before that commit (snapshot.release); a rebuild fills the new generation's filter before
// the switch. Counts that are too high only cost the fallback scan. Directory handles (dirRefs) and
// the "anything below" scans of directories do not use the filter.
type refFilter struct {
	seed  maphash.Seed
	mask  uint64
	slots []atomic.Uint32
	ready atomic.Bool // counts complete (a filter built in the background is not consulted before)
}

// newRefFilter sizes the filter for about objects distinct referenced objects: ≥ 8 slots per object
// keeps the share of unreferenced objects that collide with a referenced one near 1/8 or below.
func newRefFilter(objects int) *refFilter {
	n := uint64(1) << 12
	if want := uint64(objects) * 8; want > n {
		n = uint64(1) << bits.Len64(want-1)
	}
	n = min(n, 1<<28) // 1 GiB of counters: beyond it collisions only cost fallback scans
	return &refFilter{seed: maphash.MakeSeed(), mask: n - 1, slots: make([]atomic.Uint32, n)}
}

func (f *refFilter) hash(obj string) uint64      { return maphash.String(f.seed, obj) }
func (f *refFilter) hashBytes(obj []byte) uint64 { return maphash.Bytes(f.seed, obj) }
func (f *refFilter) inc(h uint64)                { f.slots[h&f.mask].Add(1) }
func (f *refFilter) dec(h uint64)                { f.slots[h&f.mask].Add(^uint32(0)) }

// unreferenced reports whether no reverse entry of obj can exist (false when unsure).
func (f *refFilter) unreferenced(obj string) bool {
	return f != nil && f.ready.Load() && f.slots[f.hash(obj)&f.mask].Load() == 0
}

// fill counts every reverse entry visible in txn (a background build of an existing generation).
// Entries are sorted by object, so each object is hashed once. It stops early (false) when stop is
// closed.
func (f *refFilter) fill(txn *badger.Txn, stop <-chan struct{}) bool {
	prefix := []byte(tblReverse)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	var prev []byte
	var h uint64
	n := 0
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		if n++; n&0xffff == 0 {
			select {
			case <-stop:
				return false
			default:
			}
		}
		k := it.Item().Key()[len(tblReverse):]
		i := bytes.IndexByte(k, 0)
		if i < 0 {
			continue
		}
		if prev == nil || !bytes.Equal(prev, k[:i]) {
			prev = append(prev[:0], k[:i]...)
			h = f.hashBytes(prev)
		}
		f.inc(h)
	}
	return true
}

// testSkipFilterInc breaks apply's filter increments (BreakFilter, tests only): the model test must
// catch it.
var testSkipFilterInc bool

// reverseObjects returns the distinct objects refs puts into the reverse table (one entry each).
func reverseObjects(refs []ref) map[string]struct{} {
	out := make(map[string]struct{}, len(refs))
	for _, r := range refs {
		if r.Inside && r.Kind != RefDirectory {
			out[r.Key] = struct{}{}
		}
	}
	return out
}
