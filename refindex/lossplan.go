package refindex

import (
	"bytes"
	"context"
	"path"
	"slices"
	"sort"

	"github.com/dgraph-io/badger/v4"
)

// A loss-check pass streams the reverse table (r/<obj>\x00<meta>) in key order instead of collecting
// every referenced key first: its memory is its chunk (at most a chunk's or the budget's worth of
// units) plus the known losses, whatever the size of the store.
//
// Grouping. unitPlanner groups the stream into the same units planUnits makes of the whole sorted set.
// A folder's own keys are not contiguous in key order ("d/x" < "d/x/a" < "d/x0"), but all of them lie
// in the contiguous range of keys starting with "d/": the planner keeps a stack of open folders (each
// an ancestor, by name, of the one above it) and closes a folder only when a key arrives whose folder
// is not inside it; no later key can belong to it then. A folder's keys are cut into listing units of
// listPage as soon as listPage+minListKeys of them are open (so the tail rule of planUnits holds), the
// rest when the folder closes. For keys path.Dir takes apart literally (no "." or ".." elements, no
// doubled or trailing "/": every key the index derives) the units are exactly planUnits'; for others a
// folder may close and reopen, which splits its unit in two but never drops a key.
//
// Cuts. A chunk and a pass end before the key that would take their expected requests (the units
// made plus what the open folders will cost when closed) over Chunk or Budget, and a segment of a
// chunk (what is planned and checked at once) after lossSegment keys; the open folders are then closed, so a chunk covers one contiguous range of keys, and the next chunk or pass starts after
// its last key (the rotation's cursor). A cut through a folder costs at most one request more per open
// folder (a few: one per path level that holds referenced keys), and the rotation's cost and passes
// (LossReport.RoundRequests, RoundPasses) are counted with the same cuts.

// openFolder is a folder of the planner with keys not yet put into a unit.
type openFolder struct {
	dir  string
	keys []string // nil when only counting
	n    int
}

// unitPlanner turns a key-ordered stream of distinct referenced keys into loss units (see above).
// With keep unset it only counts (no key is retained): the rotation's cost.
type unitPlanner struct {
	canList bool
	keep    bool
	open    []openFolder
	units   []lossUnit // made since the last take (keep)
	made    int        // expected requests of the units made
	owed    int        // expected requests of the open folders' keys once closed
	keys    int        // keys added
	held    int        // keys held now in open folders and units not taken (keep)
	outside int        // keys the pass holds outside the planner meanwhile (a segment in flight)
	maxHeld int        // the most keys held at once since the planner was made, outside included
}

// keyDir is the folder planUnits files a key under (path.Dir, "" for "."). The planner reads keys as
// the iterator's bytes, valid for one call, and allocates only what it keeps: for a key path.Dir takes
// apart literally (every key the index derives) the folder is the bytes before the last '/'; any
// other goes through path.Dir.
func keyDir(k []byte) []byte {
	i := bytes.LastIndexByte(k, '/')
	if literalPath(k) {
		if i < 0 {
			return nil
		}
		return k[:i]
	}
	d := path.Dir(string(k))
	if d == "." {
		return nil
	}
	return []byte(d)
}

// literalPath reports whether path.Clean leaves k as it is and k has no trailing '/': not rooted, no
// empty, "." or ".." element.
func literalPath(k []byte) bool {
	if len(k) == 0 || k[0] == '/' || k[len(k)-1] == '/' {
		return false
	}
	start := 0
	for i := 0; i <= len(k); i++ {
		if i < len(k) && k[i] != '/' {
			continue
		}
		switch e := k[start:i]; {
		case len(e) == 0, len(e) == 1 && e[0] == '.', len(e) == 2 && e[0] == '.' && e[1] == '.':
			return false
		}
		start = i + 1
	}
	return true
}

// inside reports whether folder d is f or lies below it, by name.
func inside(d []byte, f string) bool {
	return f == "" || string(d) == f || len(d) > len(f) && string(d[:len(f)]) == f && d[len(f)] == '/'
}

// openCost is what n keys of one folder cost once the folder closes (n <= listPage+minListKeys-1).
func (p *unitPlanner) openCost(n int) int {
	if n >= minListKeys {
		return (n + listPage - 1) / listPage
	}
	return n
}

// delta is the expected requests adding k would add (made plus owed).
func (p *unitPlanner) delta(k []byte) int {
	if !p.canList {
		return 1
	}
	d := keyDir(k)
	for i := len(p.open) - 1; i >= 0; i-- {
		if p.open[i].dir == string(d) {
			n := p.open[i].n
			if n+1 == listPage+minListKeys {
				return 0 // a page goes out, minListKeys stay: same cost
			}
			return p.openCost(n+1) - p.openCost(n)
		}
	}
	return 1
}

// add adds k (read for this call only: what is kept is copied).
func (p *unitPlanner) add(k []byte) {
	p.keys++
	if !p.canList {
		if p.keep {
			p.emit(lossUnit{dir: string(keyDir(k)), keys: p.one(string(k))}, 1)
		} else {
			p.emit(lossUnit{}, 1)
		}
		return
	}
	d := keyDir(k)
	for len(p.open) > 0 && !inside(d, p.open[len(p.open)-1].dir) {
		p.closeTop()
	}
	if len(p.open) == 0 || p.open[len(p.open)-1].dir != string(d) {
		p.open = append(p.open, openFolder{dir: string(d)})
	}
	f := &p.open[len(p.open)-1]
	p.owed -= p.openCost(f.n)
	f.n++
	if p.keep {
		f.keys = append(f.keys, string(k))
		p.held++
		p.maxHeld = max(p.maxHeld, p.held+p.outside)
	}
	if f.n == listPage+minListKeys {
		// Enough keys for a full page with minListKeys left over: planUnits cuts the same unit.
		var page []string
		if p.keep {
			page = f.keys[:listPage:listPage]
			f.keys = append([]string(nil), f.keys[listPage:]...)
		}
		f.n -= listPage
		p.emit(lossUnit{dir: f.dir, keys: page, list: true}, 1)
	}
	p.owed += p.openCost(f.n)
}

func (p *unitPlanner) one(k string) []string {
	if !p.keep {
		return nil
	}
	p.held++
	p.maxHeld = max(p.maxHeld, p.held+p.outside)
	return []string{k}
}

func (p *unitPlanner) emit(u lossUnit, cost int) {
	p.made += cost
	if p.keep {
		p.units = append(p.units, u)
	}
}

// closeTop puts the innermost open folder's keys into units.
func (p *unitPlanner) closeTop() {
	f := p.open[len(p.open)-1]
	p.open = p.open[:len(p.open)-1]
	c := p.openCost(f.n)
	p.owed -= c
	switch {
	case f.n == 0:
	case f.n >= minListKeys:
		p.emit(lossUnit{dir: f.dir, keys: f.keys, list: true}, c)
	default:
		for i := range f.n {
			var ks []string
			if p.keep {
				ks = f.keys[i : i+1 : i+1]
			}
			p.emit(lossUnit{dir: f.dir, keys: ks}, 1)
		}
	}
}

// cost is the expected requests of everything added so far.
func (p *unitPlanner) cost() int { return p.made + p.owed }

// cut closes every open folder.
func (p *unitPlanner) cut() {
	for len(p.open) > 0 {
		p.closeTop()
	}
}

// take returns the units made since the last take and forgets them.
func (p *unitPlanner) take() []lossUnit {
	u := p.units
	p.units = nil
	p.held = 0
	for _, f := range p.open {
		p.held += len(f.keys)
	}
	return u
}

// passCutter applies the Budget and Chunk cuts to a planner.
type passCutter struct {
	p          *unitPlanner
	budget     int // 0: none
	chunk      int // 0: none
	passStart  int // p.cost() when the pass began
	chunkStart int // p.cost() when the chunk began
	passKeys   int // keys the pass took
	chunkKeys  int
	passes     int // passes begun (counting a rotation)
	seg        int // keys of a segment (0: none)
	segKeys    int
}

// lossSegment is the most keys a pass plans before it checks them, whatever its chunk (a pass without
// Chunk, such as an unpaced one over a local store, is one chunk): a segment is planned, checked and
// forgotten before the next is read, and reported with its chunk. A segment cut costs what a chunk's
// does (at most one request per open folder), once per 65,536 keys.
const lossSegment = 1 << 16

type cutKind int

const (
	cutNone    cutKind = iota // k was added
	cutChunk                  // k was not added: the chunk is full
	cutPass                   // k was not added: the pass is full
	cutSegment                // k was not added: the segment is full (the chunk goes on)
)

// offer adds k unless it would take the pass over the budget or the chunk over its size; the first
// key of a pass or chunk is always added, however dear.
func (c *passCutter) offer(k []byte) cutKind {
	d := c.p.delta(k)
	now := c.p.cost()
	if c.budget > 0 && c.passKeys > 0 && now-c.passStart+d > c.budget {
		return cutPass
	}
	if c.chunk > 0 && c.chunkKeys > 0 && now-c.chunkStart+d > c.chunk {
		return cutChunk
	}
	if c.seg > 0 && c.segKeys >= c.seg {
		return cutSegment
	}
	c.p.add(k)
	c.passKeys++
	c.chunkKeys++
	c.segKeys++
	return cutNone
}

// endSegment cuts the open folders and starts a new segment of the chunk.
func (c *passCutter) endSegment() {
	c.p.cut()
	c.segKeys = 0
}

// endChunk cuts the open folders and starts a new chunk.
func (c *passCutter) endChunk() {
	c.endSegment()
	c.chunkStart, c.chunkKeys = c.p.cost(), 0
}

// endPass cuts the open folders and starts a new pass.
func (c *passCutter) endPass() {
	c.endChunk()
	c.passStart, c.passKeys = c.p.cost(), 0
	c.passes++
}

// feedRotation offers k to a counting cutter that simulates a whole rotation's passes.
func (c *passCutter) feedRotation(k []byte) {
	for {
		switch c.offer(k) {
		case cutNone:
			return
		case cutSegment:
			c.endSegment()
		case cutChunk:
			c.endChunk()
		case cutPass:
			c.endPass()
		}
	}
}

// scanReferenced calls fn, in key order, with every distinct object after `after` ("" from the
// start) that a parseable live checkpoint of st references: the objects of the reverse table, merged
// with the file-merging directories (d/ table, counted in st.dirRefs: few, already in memory). It stops
// when fn returns false (that key is not consumed) or at the end (done). fn's key is valid for the call
// only. It retains nothing between keys but the sorted directory keys.
func scanReferenced(ctx context.Context, txn *badger.Txn, st *memState, after string, fn func(k []byte) bool) (done bool, err error) {
	var dirs []string
	for d, n := range st.dirRefs {
		if n > 0 && (after == "" || d > after) {
			dirs = append(dirs, d)
		}
	}
	sort.Strings(dirs)
	// emit hands fn the directories before k (all of them when k is nil), and k unless it is one.
	emit := func(k []byte, last bool) bool {
		for len(dirs) > 0 && (last || dirs[0] <= string(k)) {
			d := dirs[0]
			dirs = dirs[1:]
			if !last && d == string(k) {
				continue // the object itself is handed below, once
			}
			if !fn([]byte(d)) {
				return false
			}
		}
		return last || fn(k)
	}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: reversePrefix})
	defer it.Close()
	seek := reversePrefix
	if after != "" {
		seek = pairKey(tblReverse, after, "")
	}
	var cur []byte
	have, valid := false, false
	n := 0
	for it.Seek(seek); it.Valid(); it.Next() {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return false, err
			}
		}
		key := it.Item().Key()
		obj, ok := reverseObject(key)
		if !ok {
			continue
		}
		meta := key[len(tblReverse)+len(obj)+1:]
		if have && bytes.Equal(obj, cur) {
			valid = valid || liveRef(st, meta)
			continue
		}
		if have && valid && !emit(cur, false) {
			return false, nil
		}
		have, valid = false, false
		if after != "" && string(obj) <= after {
			continue
		}
		cur = append(cur[:0], obj...)
		have, valid = true, liveRef(st, meta)
	}
	if have && valid && !emit(cur, false) {
		return false, nil
	}
	if !emit(nil, true) {
		return false, nil
	}
	return true, ctx.Err()
}

// liveRef reports whether meta is a parseable live checkpoint of st (what the loss check checks).
func liveRef(st *memState, meta []byte) bool {
	c := st.ckpts[string(meta)]
	return c != nil && c.Err == ""
}

// referencingMetas returns the checkpoints whose reverse (r/) or directory (d/) entries name obj,
// in key order.
func referencingMetas(txn *badger.Txn, obj string) []string {
	var out []string
	for _, tbl := range []string{tblReverse, tblDir} {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pairKey(tbl, obj, "")})
		for it.Rewind(); it.Valid(); it.Next() {
			o, m := splitPair(it.Item().Key(), tbl)
			if o != obj {
				continue // an older generation's object key holding a NUL
			}
			out = append(out, m)
		}
		it.Close()
	}
	sort.Strings(out)
	return slices.Compact(out)
}
