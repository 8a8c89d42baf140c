package refindex

import (
	"bytes"
	"hash/maphash"
	"log/slog"
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
	txn *badger.Txn
	// seq orders the snapshots of an Index (all generations): a later commit or switch has a
	// higher one. A reference filter built in the background counts the state of one snapshot and is
	// consulted only by views of that snapshot or a later one (refFilter.seq).
	seq   uint64
	users atomic.Int64
	// Set once, when the next snapshot replaces this one (under Index.writeMu and Index.mu):
	next  *snapshot  // released when this one is finished
	filt  *refFilter // the filter undo applies to (nil: none)
	undo  []uint64   // hashes of reverse entries the commit after this snapshot removed
	owner *generation

	// Idle iterators over the reverse table, reused by decisions (creating one builds an iterator
	// per memtable and level, a good part of a decision's cost). Closed when the snapshot stops
	// being current (retire): an old snapshot is only read by the views that started on it, and one
	// long view (an orphans walk) can keep a chain of later snapshots unfinished; their idle
	// iterators would pin memtables and deleted tables until it ends.
	itMu    sync.Mutex
	its     []*badger.Iterator
	retired bool // no longer current: iterators given back are closed, not kept
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
	if !s.retired && len(s.its) < maxIdleIterators {
		s.its = append(s.its, it)
		s.itMu.Unlock()
		return
	}
	s.itMu.Unlock()
	it.Close()
}

// newSnapshot opens the read transaction of g's latest committed state as the next snapshot. Callers
// hold writeMu (or are opening the index), so sequence order is commit order.
func (ix *Index) newSnapshot(g *generation) *snapshot {
	s := &snapshot{txn: g.db.NewTransaction(false), owner: g, seq: ix.snapSeq.Add(1)}
	s.users.Store(1) // current
	return s
}

// retire marks s as no longer current and closes its idle iterators (views still reading it open
// new ones, and close them when done).
func (s *snapshot) retire() {
	s.itMu.Lock()
	its := s.its
	s.its, s.retired = nil, true
	s.itMu.Unlock()
	for _, it := range its {
		it.Close()
	}
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
	// seq: the counts are those of snapshot seq plus every later commit, so only views of snapshot
	// seq or later may consult the filter (0: every snapshot of the generation, a filter that
	// counted the generation from its first state).
	seq uint64
	// broken: a decrement found its slot at zero, so some count is wrong (a bug: counting that does
	// not match the reverse table). The filter is never consulted again; every decision takes the
	// exact scan.
	broken     atomic.Bool
	brokenOnce sync.Once
	log        *slog.Logger
}

// newRefFilter sizes the filter for about objects distinct referenced objects: ≥ 8 slots per object
// keeps the share of unreferenced objects that collide with a referenced one near 1/8 or below.
func newRefFilter(objects int, log *slog.Logger) *refFilter {
	n := uint64(1) << 12
	if want := uint64(objects) * 8; want > n {
		n = uint64(1) << bits.Len64(want-1)
	}
	n = min(n, 1<<28) // 1 GiB of counters: beyond it collisions only cost fallback scans
	return &refFilter{seed: maphash.MakeSeed(), mask: n - 1, slots: make([]atomic.Uint32, n), log: log}
}

func (f *refFilter) hash(obj string) uint64      { return maphash.String(f.seed, obj) }
func (f *refFilter) hashBytes(obj []byte) uint64 { return maphash.Bytes(f.seed, obj) }
func (f *refFilter) inc(h uint64)                { f.slots[h&f.mask].Add(1) }

// wrapped: a slot at or above it went below zero (no slot counts 2^31 reverse entries).
const wrapped = 1 << 31

// dec uncounts one reverse entry. Once the filter is ready, a slot that is already zero is never
// wrapped (to 2^32-1, and a later increment back to 0 would prove a referenced object unreferenced):
// the filter is marked broken instead.
//
// While a background fill still counts, a decrement may legitimately reach a slot before the fill
// has counted the entry it uncounts (the fill reads the snapshot before that commit): counts are
// sums, so the slot is right once the fill has passed it. Such a decrement wraps; the fill checks
// every slot when it ends, and a wrap seen after ready is an under-count.
func (f *refFilter) dec(h uint64) {
	s := &f.slots[h&f.mask]
	if !f.ready.Load() {
		s.Add(^uint32(0))
		if f.ready.Load() && s.Load() >= wrapped {
			f.markBroken()
		}
		return
	}
	for {
		c := s.Load()
		if c == 0 {
			f.markBroken()
			return
		}
		if s.CompareAndSwap(c, c-1) {
			return
		}
	}
}

func (f *refFilter) markBroken() {
	f.broken.Store(true)
	f.brokenOnce.Do(func() {
		if f.log != nil {
			f.log.Error("reference filter under-count detected (a decrement of a zero count); the filter is disabled and every decision scans the index (slower, still exact). Please report this bug")
		}
	})
}

// unreferenced reports whether no reverse entry of obj can exist in the state of snapshot seq
// (false when unsure).
func (f *refFilter) unreferenced(obj string, seq uint64) bool {
	return f != nil && f.ready.Load() && seq >= f.seq && !f.broken.Load() && f.slots[f.hash(obj)&f.mask].Load() == 0
}

// fill counts every reverse entry visible in txn (a background build of an existing generation).
// Entries are sorted by object, so each object is hashed once. It stops early (false) when stop is
// closed.
func (f *refFilter) fill(txn *badger.Txn, stop <-chan struct{}) bool {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: reversePrefix})
	defer it.Close()
	var prev []byte
	var h uint64
	n := 0
	for it.Seek(reversePrefix); it.ValidForPrefix(reversePrefix); it.Next() {
		if n++; n&0xffff == 0 {
			select {
			case <-stop:
				return false
			default:
			}
		}
		obj, ok := reverseObject(it.Item().Key())
		if !ok {
			continue
		}
		if prev == nil || !bytes.Equal(prev, obj) {
			prev = append(prev[:0], obj...)
			h = f.hashBytes(prev)
		}
		f.inc(h)
	}
	// Every entry is counted: a slot still below zero had a decrement without its entry.
	for i := range f.slots {
		if f.slots[i].Load() >= wrapped {
			f.markBroken()
			break
		}
	}
	return true
}

// testSkipFilterInc breaks apply's filter increments (BreakFilter, tests only): the model test must
// catch it.
var testSkipFilterInc bool

// reverseObjects returns the distinct objects the refs of checkpoint meta put into the reverse table
// (one entry each), as the filter hashes them: read back from the reverse key with reverseObject,
// the function the background fill uses.
func reverseObjects(refs []ref, meta string) map[string]struct{} {
	out := make(map[string]struct{}, len(refs))
	for _, r := range refs {
		if r.Inside && r.Kind != RefDirectory {
			obj, _ := reverseObject(pairKeyFor(r, meta))
			out[string(obj)] = struct{}{}
		}
	}
	return out
}
