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
//
// Memory (issue 15: the S3 mount within 1 GiB at 10 M objects): a slot is one byte, four to an
// atomic word, about 8 slots per distinct referenced object (8 bytes per object, 80 MiB at 10 M; it
// was a 4-byte counter with the slot count rounded up to a power of two, 512 MiB). A slot saturates
// at filterSaturated and then stays there: increments and decrements no longer change it, so it
// answers "maybe referenced" (the exact scan) until the filter is built again (next rebuild or
// reopen). A saturated slot can therefore never come back to zero, whatever the true count does.
type refFilter struct {
	seed  maphash.Seed
	n     uint64          // slots
	words []atomic.Uint32 // slot i is byte i%4 of words[i/4]
	ready atomic.Bool     // counts complete (a filter built in the background is not consulted before)
	// seq: the counts are those of snapshot seq plus every later commit, so only views of snapshot
	// seq or later may consult the filter (0: every snapshot of the generation, a filter that
	// counted the generation from its first state).
	seq uint64
	// pending holds the decrements that arrive before the filter is ready (a background fill reads the
	// snapshot before a commit whose decrements are applied meanwhile): a slot of one byte cannot go
	// below zero and come back, so they wait here and markReady applies them once every entry is
	// counted. pendMu orders them against markReady.
	pendMu  sync.Mutex
	pending []uint64
	// broken: a decrement found its slot at zero, so some count is wrong (a bug: counting that does
	// not match the reverse table). The filter is never consulted again; every decision takes the
	// exact scan.
	broken     atomic.Bool
	brokenOnce sync.Once
	log        *slog.Logger
}

// filterSaturated is the count at which a slot stops counting (sticky "maybe referenced").
const filterSaturated = 0xff

// filterSlotsPerObject keeps the share of unreferenced objects that collide with a referenced one near
// 1 - e^(-1/8), about 12 %, or below; filterMaxSlots caps the filter at 256 MiB (beyond it collisions
// only cost fallback scans).
const (
	filterSlotsPerObject = 8
	filterMaxSlots       = 1 << 28
)

// newRefFilter sizes the filter for about objects distinct referenced objects.
func newRefFilter(objects int, log *slog.Logger) *refFilter {
	n := max(uint64(objects)*filterSlotsPerObject, 1<<12)
	n = min(n, filterMaxSlots)
	n = (n + 3) &^ 3 // whole words
	return &refFilter{seed: maphash.MakeSeed(), n: n, words: make([]atomic.Uint32, n/4), log: log}
}

// bytes is the memory the slots take.
func (f *refFilter) bytes() int64 { return int64(len(f.words)) * 4 }

func (f *refFilter) hash(obj string) uint64      { return maphash.String(f.seed, obj) }
func (f *refFilter) hashBytes(obj []byte) uint64 { return maphash.Bytes(f.seed, obj) }

// slot maps a hash onto [0, n) (the high word of h×n: uniform for a uniform h, any n).
func (f *refFilter) slot(h uint64) uint64 {
	hi, _ := bits.Mul64(h, f.n)
	return hi
}

// countAt is slot i's count.
func (f *refFilter) countAt(i uint64) uint32 { return f.words[i/4].Load() >> (8 * (i % 4)) & 0xff }

// count is the count of the slot h maps to.
func (f *refFilter) count(h uint64) uint32 { return f.countAt(f.slot(h)) }

// inc counts one reverse entry; a saturated slot stays saturated.
func (f *refFilter) inc(h uint64) {
	i := f.slot(h)
	w, sh := &f.words[i/4], 8*(i%4)
	for {
		v := w.Load()
		if v>>sh&0xff == filterSaturated {
			return
		}
		if w.CompareAndSwap(v, v+1<<sh) {
			return
		}
	}
}

// dec uncounts one reverse entry. A saturated slot stays saturated (its true count is unknown). A
// slot at zero is never decremented (a wrapped slot would return to zero after increments while a
// referenced object hashes there): the filter is marked broken instead. Before the filter is ready
// the decrement waits in pending (see there).
func (f *refFilter) dec(h uint64) {
	if !f.ready.Load() {
		f.pendMu.Lock()
		if !f.ready.Load() {
			f.pending = append(f.pending, h)
			f.pendMu.Unlock()
			return
		}
		f.pendMu.Unlock()
	}
	f.decNow(h)
}

func (f *refFilter) decNow(h uint64) {
	i := f.slot(h)
	w, sh := &f.words[i/4], 8*(i%4)
	for {
		v := w.Load()
		c := v >> sh & 0xff
		if c == filterSaturated {
			return
		}
		if c == 0 {
			f.markBroken()
			return
		}
		if w.CompareAndSwap(v, v-1<<sh) {
			return
		}
	}
}

// markReady applies the decrements that waited for the counting to end (a decrement of a zero slot
// among them is an under-count: the entry it uncounts was never counted) and makes the filter
// consultable.
func (f *refFilter) markReady() {
	f.pendMu.Lock()
	defer f.pendMu.Unlock()
	for _, h := range f.pending {
		f.decNow(h)
	}
	f.pending = nil
	f.ready.Store(true)
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
	return f != nil && f.ready.Load() && seq >= f.seq && !f.broken.Load() && f.count(f.hash(obj)) == 0
}

// fill counts every reverse entry visible in txn (a background build of an existing generation)
// and makes the filter ready. Entries are sorted by object, so each object is hashed once. It stops
// early (false, not ready) when stop is closed.
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
	// Every entry is counted: the decrements that came meanwhile apply now.
	f.markReady()
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
