// Package refindex holds the reference index: which storage objects the live Flink checkpoints and
// savepoints of a store reference, and the decision whether a path may be deleted, renamed or truncated
// (Decide; its vocabulary is in refindex/verdict). *Index is the guard.Checker both mounts ask.
package refindex

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
)

// ErrSchema is wrapped by Open when the index directory holds an index of another schema version.
var ErrSchema = errors.New("index schema mismatch")

// ErrLocked is wrapped by Open when another process has the index open (for example a running mount).
var ErrLocked = errors.New("index is in use by another process")

// Index is the reference index of one store. It is safe for concurrent use; Decide never blocks on
// a running Sync (it reads the last committed state).
type Index struct {
	// Set by Open, never changed.
	dir  string
	st   store.Store
	norm *pathnorm.Normalizer
	opt  options
	log  *slog.Logger
	lock *os.File // holds the index directory's flock: one process per index

	forst forstCache                 // working-folder walks of ForSt jobs (forst.go)
	flink atomic.Pointer[flinkFacts] // the last Flink REST poll (flinkjobs.go); nil: none yet

	retire retireGuard // asked before a sync retires `_metadata` gone from the store (retireguard.go)

	// badMu guards badLogged: the bad `_metadata` logged, with the error they were logged with
	// (readmeta.go logBad: once per file, not per sync).
	badMu     sync.Mutex
	badLogged map[string]string

	histOnce  sync.Once
	histState *history // the metadata history (history.go)

	// syncMu runs one Sync or Rebuild at a time. It guards no field; it is taken before writeMu, so
	// that a sync lists and parses the store while writers through the mount go on.
	syncMu sync.Mutex

	// writeMu serialises the writers of the index: Sync's apply, Rebuild, IndexMetadata, Deleted,
	// NoteRenamed, Pin and Unpin, and the start of a filter build. A writer reads the current state,
	// writes the generation and installs the result with no other writer in between, so no commit is
	// lost or applied to a state it was not computed from. It guards no field of its own; the fields
	// a commit replaces (mu.cur, mu.state, mu.snap, mu.pins) change only while it is held, and under
	// mu. Taken before mu.
	writeMu sync.Mutex

	// mu guards what decisions and queries read (acquire copies it into a view) and what writers
	// replace. Readers take it shared for a copy of the fields; Close takes it exclusive to close the
	// current generation.
	mu struct {
		sync.RWMutex
		pol   Policy
		cur   *generation
		state *memState
		snap  *snapshot            // read transaction of cur matching state (replaced with it)
		pins  map[string]time.Time // _metadata key → pin time (kept beside the generations)

		lastSync    time.Time // start time of the last complete listing
		syncErr     string    // last sync failed: fail closed until a sync succeeds
		failedAt    time.Time // when syncErr was set: only a sync whose listing started later clears it
		needRebuild bool      // fingerprint changed or empty index
		interrupted bool      // a multi-transaction change stopped half-way (rolling.go): rebuilt by the next sync
		closed      bool
		skew        time.Duration // ≤ 0: how far ages of store files are corrected (clockState)
		clockAhead  bool          // the store's clock was last seen ahead of this host's
		clockFailed bool          // the last reading of the store's clock failed (logged once)
		clock       clockState    // the readings skew is derived from

		listedJobs map[string][]string // job folder name → parents, from the last listing (jobParents)
		unknown    []UnknownSubtree    // entries the last listing could not read, sorted (unknown.go)
		shared     sharedPinsState     // the last load of the shared pins (sharedpins.go)
	}

	// Safe for concurrent use by themselves.
	bg             sync.WaitGroup // closing of previous generations, filter builds (Close waits for them)
	releasing      atomic.Bool    // a releaseTablePages runs (tablepages.go)
	done           chan struct{}  // closed by Close: stops background work (filter builds)
	snapSeq        atomic.Uint64  // sequence of the last snapshot (newSnapshot)
	protChanges    atomic.Uint64  // commits that changed the live checkpoints or the pins (ProtectedVersion)
	inferredWarned sync.Map       // inferred prefix maps already logged (resolveOutside warns once each)
}

// Open opens (or creates) the index in dir for store st. It does not sync: until the first Sync or
// Rebuild completes, Decide refuses everything (the index is stale).
func Open(dir string, st store.Store, pol Policy, opts ...Option) (*Index, error) {
	o := options{log: slog.Default()}
	for _, f := range opts {
		f(&o)
	}
	if o.workers <= 0 {
		o.workers = max(4, 2*runtime.GOMAXPROCS(0))
	}
	if o.parse == nil {
		o.parse = parseFlinkMetadata
	}
	if err := pol.Validate(); err != nil {
		return nil, err
	}
	maps := o.maps
	for _, mp := range o.mountpoints {
		from := "file:" + mp
		mapped := false
		for _, m := range maps {
			mapped = mapped || pathnorm.ParseURI(m.From).String() == pathnorm.ParseURI(from).String()
		}
		if !mapped {
			maps = append(maps[:len(maps):len(maps)], pathnorm.Mapping{From: from, Mountpoint: true})
		}
	}
	var aliases []string
	if ra, ok := st.(store.RootAliaser); ok {
		aliases = ra.RootAliases() // e.g. a local store given through a symlink
	}
	norm, err := pathnorm.New(pathnorm.Config{StoreRoot: st.Root(), Maps: maps, EntropyKey: o.entropyKey, RootAliases: aliases, DefaultPorts: o.ports, External: o.external})
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("index dir %s: %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("index dir %s: %w", dir, err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%w: %s (is a `ckguard mount` running? query it through its control socket, or stop it first)", ErrLocked, dir)
	}
	ix := &Index{dir: dir, st: st, norm: norm, opt: o, log: o.log, lock: lock, done: make(chan struct{})}
	ix.mu.pol, ix.mu.state = pol, newMemState()
	if _, err := ix.forstRoots(pol); err != nil {
		lock.Close()
		return nil, err
	}
	if err := ix.openCurrent(); err != nil {
		lock.Close()
		return nil, err
	}
	return ix, nil
}

// SetPolicy replaces the decision policy (for example after a configuration reload).
func (ix *Index) SetPolicy(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if _, err := ix.forstRoots(p); err != nil {
		return err
	}
	ix.mu.Lock()
	ix.mu.pol = p
	ix.mu.Unlock()
	return nil
}

// Policy returns the decision policy in force.
func (ix *Index) Policy() Policy {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.mu.pol
}

// Store returns the store the index is derived from.
func (ix *Index) Store() store.Store { return ix.st }

// Dir returns the index directory.
func (ix *Index) Dir() string { return ix.dir }

// Close closes the index and releases its directory lock.
func (ix *Index) Close() error {
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.mu.closed {
		return nil
	}
	ix.mu.closed = true
	close(ix.done)
	ix.bg.Wait()
	ix.mu.cur.users.Wait()
	ix.mu.snap.release() // the last user: discards its transaction before the DB closes
	err := ix.mu.cur.db.Close()
	ix.lock.Close()
	return err
}

// view is a consistent read view: one generation (held until release) and the state that goes with it.
type view struct {
	g       *generation
	snap    *snapshot  // read transaction matching st
	filt    *refFilter // the generation's filter as of acquire (nil or not ready: not consulted)
	st      *memState
	pol     Policy
	last    time.Time
	syncErr string
	pins    map[string]time.Time
	// pinsUnknown: the shared pins cannot be judged (sharedpins.go); no checkpoint is retired.
	pinsUnknown string
	// pinsPartial: some shared pin records cannot be read; the checkpoints they may pin are not retired.
	pinsPartial PartialPins
	// remap: the index was derived with another path mapping (fingerprint) and not rebuilt yet.
	remap bool
	// interrupted: the remap is due to a large change stopped half-way (rolling.go).
	interrupted bool
	skew        time.Duration    // see Index.mu.skew
	unknown     []UnknownSubtree // see Index.mu.unknown
}

// acquire returns the committed state Decide and the queries read; call release when done.
func (ix *Index) acquire() (*view, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if ix.mu.closed {
		return nil, errors.New("index is closed")
	}
	ix.mu.cur.users.Add(1)
	ix.mu.snap.acquire()
	return &view{g: ix.mu.cur, snap: ix.mu.snap, filt: ix.mu.cur.filt.Load(), st: ix.mu.state, pol: ix.mu.pol, last: ix.mu.lastSync, syncErr: ix.mu.syncErr, pins: ix.mu.pins, remap: ix.mu.needRebuild && !ix.mu.lastSync.IsZero(), interrupted: ix.mu.interrupted, skew: ix.mu.skew, unknown: ix.mu.unknown, pinsUnknown: ix.sharedPinsUnknownLocked(), pinsPartial: ix.mu.shared.partial}, nil
}

// release ends the view: the snapshot first (finishing it may discard its transaction), then the
// generation (whose DB may then close).
func (v *view) release() {
	v.snap.release()
	v.g.users.Done()
}

// beginWork tells the WithWork hook that CPU-heavy work starts; call the result when it ends.
func (ix *Index) beginWork() (done func()) {
	if ix.opt.work == nil {
		return func() {}
	}
	return ix.opt.work()
}

// startFilter builds the reference filter of generation g in the background (an existing generation
// opened without one). It takes its snapshot under writeMu, so that every later commit adjusts the
// filter and no earlier one needs to; until the scan completes the filter is not consulted.
func (ix *Index) startFilter(g *generation) {
	go func() {
		ix.writeMu.Lock()
		ix.mu.RLock()
		if ix.mu.closed || ix.mu.cur != g || g.filt.Load() != nil {
			ix.mu.RUnlock()
			ix.writeMu.Unlock()
			return
		}
		refs := 0
		for _, c := range ix.mu.state.ckpts {
			refs += c.Refs
		}
		g.users.Add(1)
		ix.bg.Add(1) // under writeMu, which Close holds while it waits for bg
		// The fill reads the state of the current snapshot (no commit can come between: writeMu):
		// views of older snapshots never consult the filter (they may read reverse entries that a
		// commit before the fill removed and the filter never counted).
		seq := ix.mu.snap.seq
		ix.mu.RUnlock()
		// The number of distinct objects is not stored; incremental checkpoints reference a shared
		// file from about as many checkpoints as it survives, so assume ~16 references per object
		// (a wrong guess only changes how many unreferenced files fall back to the exact scan).
		f := newRefFilter(refs/16, ix.log)
		f.seq = seq
		g.filt.Store(f)
		txn := g.db.NewTransaction(false)
		ix.writeMu.Unlock()
		defer ix.bg.Done()
		defer g.users.Done()
		defer txn.Discard()
		defer ix.beginWork()()
		t0 := time.Now()
		if f.fill(txn, ix.done) {
			ix.log.Debug("reference filter built", "generation", g.n, "slots", f.n, "bytes", f.bytes(), "took", time.Since(t0).Round(time.Millisecond))
		}
		ix.releaseGenerationPages(g) // the fill read the whole reverse table

	}()
}

// switchGeneration makes g (already committed via CURRENT) the live generation with state st. The
// previous one is closed in the background once its last reader (a long orphans walk, say) is done,
// so writers through the mount are not held up.
func (ix *Index) switchGeneration(g *generation, st *memState, last time.Time) {
	snap := ix.newSnapshot(g)
	ix.mu.Lock()
	old, oldSnap := ix.mu.cur, ix.mu.snap
	ix.mu.cur, ix.mu.snap, ix.mu.state, ix.mu.lastSync, ix.mu.syncErr, ix.mu.needRebuild, ix.mu.interrupted = g, snap, st, last, "", false, false
	ix.mu.Unlock()
	ix.protChanges.Add(1) // another generation: another protected set (ProtectedVersion)
	oldSnap.retire()
	oldSnap.release() // no longer current; finished with its last view
	ix.bg.Add(1)
	go func() {
		defer ix.bg.Done()
		old.users.Wait()
		if err := old.db.Close(); err != nil {
			ix.log.Warn("closing the previous index generation", "gen", old.n, "err", err)
		}
		if err := os.RemoveAll(filepath.Join(ix.dir, genName(old.n))); err != nil {
			ix.log.Warn("removing the previous index generation", "gen", old.n, "err", err)
		}
	}()
}
