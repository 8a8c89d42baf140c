// Package refindex holds the reference index: which storage objects the live Flink checkpoints and
// savepoints of a store reference, and the decision whether a path may be deleted, renamed or truncated
// (Decide; its vocabulary is in refindex/verdict). *Index is the guard.Checker both mounts ask.
package refindex

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
)

// ErrSchema is wrapped by Open when the index directory holds an index of another schema version.
var ErrSchema = errors.New("index schema mismatch")

// ErrLocked is wrapped by Open when another process has the index open (for example a running mount).
var ErrLocked = errors.New("index is in use by another process")

// Option configures Open.
type Option func(*options)

type options struct {
	maps        []pathnorm.Mapping
	external    []string
	mountpoints []string
	entropyKey  string
	log         *slog.Logger
	progress    io.Writer
	workers     int
	rebuild     bool
	parse       parseFunc
	ports       map[string]int
	work        func() (done func())
	txnWrites   int // > 0: an apply commits after this many writes (tests of multi-transaction changes)
}

// WithPathMap sets the prefix maps (--map) and the S3 entropy key (--entropy-key) used to normalise
// references. Changing them changes derived keys: the next Sync rebuilds the index.
func WithPathMap(maps []pathnorm.Mapping, entropyKey string) Option {
	return func(o *options) { o.maps, o.entropyKey = maps, entropyKey }
}

// WithExternal declares URI prefixes of other storage that checkpoints may legitimately reference
// (--external): references below them are reported, never refused (pathnorm.Config.External). Changing
// them changes the index: the next Sync rebuilds it.
func WithExternal(prefixes []string) Option {
	return func(o *options) { o.external = prefixes }
}

// WithMountpoint tells the index that a guard mount shows the store at dir: Flink configured with the
// mountpoint writes references as file:<dir>/…, and they name store keys. The prefix map file:<dir>= is
// added unless a --map already maps that prefix (the user's mapping wins). Both mount daemons set it.
func WithMountpoint(dir string) Option {
	return func(o *options) { o.mountpoints = append(o.mountpoints, dir) }
}

// WithDefaultPorts sets the port an authority without one means, per scheme (nil = hdfs 8020; see
// pathnorm.Config.DefaultPorts).
func WithDefaultPorts(ports map[string]int) Option { return func(o *options) { o.ports = ports } }

// WithWork sets a hook called when CPU-heavy index work starts (a sync, a rebuild, the reference
// filter's fill, a verify or orphans walk); the work calls the function it returns when it ends. A mount
// daemon raises GOMAXPROCS for that time (fs/procs).
func WithWork(begin func() (done func())) Option { return func(o *options) { o.work = begin } }

// WithLogger sets the structured logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithProgress shows progress bars for rebuild, sync, verify and orphans on w (pass os.Stderr when it is a
// terminal; nil = none).
func WithProgress(w io.Writer) Option { return func(o *options) { o.progress = w } }

// WithParseWorkers bounds how many `_metadata` files are read and parsed at once (default 2×CPUs,
// at least 4: reading is I/O bound on network stores).
func WithParseWorkers(n int) Option { return func(o *options) { o.workers = n } }

// WithFreshIndex makes Open start from an empty generation when the current one cannot be used
// (another schema, a damaged generation) instead of failing; that generation is stale, so the caller
// then runs Rebuild, or Sync (which rebuilds it). A usable generation is still opened. `ckguard index
// rebuild` and the mount use it.
func WithFreshIndex() Option { return func(o *options) { o.rebuild = true } }

// Index is the reference index of one store. It is safe for concurrent use; Decide never blocks on
// a running Sync (it reads the last committed state).
type Index struct {
	dir  string
	st   store.Store
	norm *pathnorm.Normalizer
	opt  options
	log  *slog.Logger
	lock *os.File

	syncMu  sync.Mutex     // one Sync or Rebuild at a time (taken before writeMu)
	writeMu sync.Mutex     // serialises index writes: Sync's apply, Rebuild, the Note*/IndexMetadata writers
	bg      sync.WaitGroup // closing of previous generations

	done chan struct{} // closed by Close: stops background work (filter builds)

	snapSeq atomic.Uint64 // sequence of the last snapshot (newSnapshot)

	mu    sync.RWMutex // guards everything below
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

	inferredWarned sync.Map            // inferred prefix maps already logged (resolveOutside warns once each)
	listedJobs     map[string][]string // job folder name → parents, from the last listing (jobParents)
}

// generation is one badger DB. Readers hold a reference while they use it, so that a rebuild can
// switch to a new generation and close the old one without pulling it from under a running decision.
type generation struct {
	db    *badger.DB
	n     int
	users sync.WaitGroup
	// filt is the generation's reference filter: built by a rebuild, or in the background from the
	// reverse table on the first decision after opening an existing generation (filtOnce).
	filt     atomic.Pointer[refFilter]
	filtOnce sync.Once
}

// memState is the in-memory part of the index: small tables consulted on every decision.
type memState struct {
	ckpts       map[string]*checkpointRecord // _metadata key → record (parseable or not)
	sorted      []string                     // keys of ckpts, sorted (prefix searches for directories)
	unparseable []string                     // sorted keys of records with Err
	unmapped    []string                     // sorted keys of records with Unmapped references
	// unproven: base name of an unmapped file reference → the first (sorted) record naming it;
	// unprovenDirs: sorted keys of records with unmapped directory handles (see unprovenFor).
	unproven     map[string]string
	unprovenDirs []string
	inferred     []string            // sorted keys of records with Inferred maps
	jobParents   map[string][]string // job folder name → the folders holding one (see Index.jobParents)
	// Per competition (newestGroup: a job folder and the owner of the _metadata), over the checkpoints
	// that compete for its newest (candidateID): the highest id and the latest completion (mtime).
	// See newest.
	newestID  map[string]int64
	newestMod map[string]time.Time
	// Per savepoint competition (savepointGroup): the latest completion. See newestSavepoint.
	savepointMod map[string]time.Time
	// owners counts, per job folder, the distinct owners of competing checkpoints (for messages).
	owners  map[string]int
	dirRefs map[string]int // file-merging directory key → number of checkpoints naming it
}

func newMemState() *memState {
	return &memState{ckpts: map[string]*checkpointRecord{}, newestID: map[string]int64{}, newestMod: map[string]time.Time{}, savepointMod: map[string]time.Time{}, dirRefs: map[string]int{}}
}

// finish recomputes the derived tables after ckpts changed.
func (s *memState) finish() {
	s.sorted = s.sorted[:0]
	s.unparseable = s.unparseable[:0]
	s.unmapped = s.unmapped[:0]
	s.unproven = nil
	s.unprovenDirs = s.unprovenDirs[:0]
	s.inferred = s.inferred[:0]
	s.jobParents = map[string][]string{}
	s.newestID = map[string]int64{}
	s.newestMod = map[string]time.Time{}
	s.savepointMod = map[string]time.Time{}
	s.owners = map[string]int{}
	for k, c := range s.ckpts {
		s.sorted = append(s.sorted, k)
		if c.Err != "" {
			// Still a candidate for the newest checkpoint of its job (its id comes from the chk-N
			// folder): an unparseable newest _metadata must not lose the active-window protection.
			s.unparseable = append(s.unparseable, k)
		}
		if len(c.Inferred) > 0 {
			s.inferred = append(s.inferred, k)
		}
		addJobParent(s.jobParents, k)
		if c.Unmapped > 0 {
			s.unmapped = append(s.unmapped, k)
			if len(c.UnprovenDirs) > 0 {
				s.unprovenDirs = append(s.unprovenDirs, k)
			}
			for b := range c.Unproven {
				if s.unproven == nil {
					s.unproven = map[string]string{}
				}
				if m, ok := s.unproven[b]; !ok || k < m {
					s.unproven[b] = k
				}
			}
		}
		if g, ok := c.savepointGroup(); ok {
			if cur, seen := s.savepointMod[g]; !seen || c.ModTime.After(cur) {
				s.savepointMod[g] = c.ModTime
			}
			continue
		}
		id, ok := c.candidateID()
		if !ok {
			continue
		}
		g := c.newestGroup()
		if _, seen := s.newestID[g]; !seen {
			s.owners[c.Job]++
		}
		if cur, seen := s.newestID[g]; !seen || id > cur {
			s.newestID[g] = id
		}
		// A job resubmitted with a fixed job id (application mode) restarts its ids in the same
		// folder: its new chk-51 is the one it restarts from, not the old chk-100.
		if cur, seen := s.newestMod[g]; !seen || c.ModTime.After(cur) {
			s.newestMod[g] = c.ModTime
		}
	}
	sort.Strings(s.sorted)
	sort.Strings(s.unparseable)
	sort.Strings(s.unmapped)
	sort.Strings(s.unprovenDirs)
	sort.Strings(s.inferred)
}

// inferredRecords returns the sorted keys of records with inferred prefix maps.
func (s *memState) inferredRecords() []string { return s.inferred }

// newest reports whether c is the newest checkpoint of its job folder among the checkpoints of its
// owner: the highest id or the most recently completed. Ties protect every record that has them, so no
// record can take the protection away from another (two checkpoints of a job completed within the same
// mtime tick).
//
// Checkpoints compete only with those of the same owner (newestGroup): a `_metadata` another user
// wrote into the job folder (a chk-<newest+1>/_metadata with a valid id, a copy of the real one with
// its id rewritten) is the newest of ITS owner's checkpoints, so it is protected itself, but it never
// takes the protection away from the job's real newest checkpoint. Only root can give a file away,
// so no other user can make a file look like the job's. The protected set is never smaller than
// when every checkpoint of the folder competed: the folder's highest id and latest completion are
// each the highest and latest of their owner's.
func (s *memState) newest(c *checkpointRecord) bool {
	id, ok := c.candidateID()
	if !ok {
		return false
	}
	g := c.newestGroup()
	return id == s.newestID[g] || c.ModTime.Equal(s.newestMod[g])
}

// newestGroup names the competition for the newest checkpoint c takes part in: its job folder and
// the owner of its `_metadata` ("?" where the store has no owners: S3, where every writer through
// the mount is the mount's own user and anyone else writing needs the bucket's credentials).
func (c *checkpointRecord) newestGroup() string {
	return c.Job + "\x00" + c.owner()
}

// owner returns the uid owning the `_metadata` as a string, "?" when unknown.
func (c *checkpointRecord) owner() string {
	if c.UID == nil {
		return "?"
	}
	return strconv.FormatUint(uint64(*c.UID), 10)
}

// candidateID reports whether c competes for the newest checkpoint of its job folder, and with which id.
// Only a _metadata that Flink could have completed where it lies does: one in a chk-<n> folder whose
// content holds checkpoint id n (or cannot be read, and so is judged by its folder). A copy anywhere else
// (cp -r chk-10 chk-10.bak, a _metadata copied aside to inspect it, the first half of a move done as copy
// and delete, a copy into a made-up chk-11) holds the copied id and a later mtime, and would otherwise take
// the protection away from the checkpoint it copies.
func (c *checkpointRecord) candidateID() (int64, bool) {
	if c.Kind == "savepoint" {
		return 0, false
	}
	_, folderID, _ := layoutOf(c.Key)
	if folderID < 0 || c.ID != folderID {
		return 0, false
	}
	return folderID, true
}

func (s *memState) clone() *memState {
	n := newMemState()
	for k, v := range s.ckpts {
		n.ckpts[k] = v
	}
	for k, v := range s.dirRefs {
		n.dirRefs[k] = v
	}
	return n
}

// below returns the checkpoint keys at or below directory dir ("" = all).
// unlisted returns the indexed _metadata keys a listing did not report.
func (s *memState) unlisted(listed map[string]bool) []string {
	var out []string
	for k := range s.ckpts {
		if !listed[k] {
			out = append(out, k)
		}
	}
	return out
}

func (s *memState) below(dir string) []string {
	if dir == "" {
		return s.sorted
	}
	p := dir + "/"
	i := sort.SearchStrings(s.sorted, p)
	j := i
	for j < len(s.sorted) && strings.HasPrefix(s.sorted[j], p) {
		j++
	}
	return s.sorted[i:j]
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
	ix := &Index{dir: dir, st: st, norm: norm, opt: o, log: o.log, lock: lock, pol: pol, state: newMemState(), done: make(chan struct{})}
	if err := ix.openCurrent(); err != nil {
		lock.Close()
		return nil, err
	}
	return ix, nil
}

func genName(n int) string { return fmt.Sprintf("gen-%08d", n) }

func (ix *Index) badgerOptions(path string) badger.Options {
	// Memory is bounded for stores of millions of references: small memtables (each costs its arena
	// plus a mapped write-ahead file of twice its size), a modest block cache for decisions, table
	// indices kept in memory (they are small), and 256 MiB value-log files.
	return badger.DefaultOptions(path).
		WithLogger(nil).
		WithNumVersionsToKeep(1).
		WithMemTableSize(32 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(8).
		WithNumLevelZeroTablesStall(16).
		WithBlockCacheSize(64 << 20).
		WithIndexCacheSize(0).
		WithValueThreshold(1 << 10).
		WithValueLogFileSize(256 << 20).
		// Bottom-level tables are BaseTableSize×2^5; a rebuild's StreamWriter builds up to 16 of them
		// at once in memory, so keep them at 8 MiB.
		WithBaseTableSize(256 << 10).
		WithNumCompactors(2).
		WithDetectConflicts(false).
		WithCompactL0OnClose(false)
}

// readCurrent returns the generation number CURRENT names (0 = none).
func (ix *Index) readCurrent() (int, error) {
	b, err := os.ReadFile(filepath.Join(ix.dir, "CURRENT"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("index %s: %w", ix.dir, err)
	}
	s := strings.TrimSpace(string(b))
	n, err := strconv.Atoi(strings.TrimPrefix(s, "gen-"))
	if err != nil || !strings.HasPrefix(s, "gen-") {
		return 0, fmt.Errorf("index %s: CURRENT names %q, not a generation: run `ckguard index rebuild`", ix.dir, s)
	}
	return n, nil
}

// writeCurrent atomically points CURRENT at generation n. This rename is the single commit point of
// a rebuild.
func (ix *Index) writeCurrent(n int) error {
	return writeFileAtomic(ix.dir, "CURRENT", []byte(genName(n)+"\n"))
}

// writeFileAtomic replaces dir/name with b so that a crash leaves the old or the new content: write a
// temporary file, fsync it, rename it over name, fsync dir.
func writeFileAtomic(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// removeStaleGenerations deletes generation directories other than keep: leftovers of a rebuild that
// was killed before its commit, or the previous generation after one.
func (ix *Index) removeStaleGenerations(keep int) {
	ents, _ := os.ReadDir(ix.dir)
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "gen-") || e.Name() == genName(keep) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(ix.dir, e.Name())); err != nil {
			ix.log.Warn("cannot remove old index generation", "dir", e.Name(), "err", err)
		}
	}
}

func (ix *Index) openCurrent() error {
	if err := ix.loadPins(); err != nil {
		return err
	}
	if err := ix.loadClock(); err != nil {
		return err
	}
	cur, err := ix.readCurrent()
	if err != nil && !ix.opt.rebuild {
		return err
	}
	if cur != 0 {
		err := ix.openExisting(cur)
		if err == nil || !ix.opt.rebuild || errors.Is(err, errGenerationBusy) {
			return err
		}
		// WithFreshIndex: the current generation cannot be used (another schema, damaged); start
		// from an empty one. A usable generation is kept: Rebuild replaces it atomically, so a
		// rebuild that is interrupted leaves the previous index in place. The unusable one is set
		// aside, not deleted, for whoever wants to know what happened to it.
		aside := ix.setAside(cur)
		ix.log.Warn("an index generation cannot be opened; it is set aside and the index is rebuilt from the store", "index", ix.dir, "set_aside", aside, "err", err)
	}
	// Start from an empty generation; it is stale (no lastsync) until Sync/Rebuild fills it.
	next := max(cur, ix.maxGenOnDisk()) + 1
	db, err := ix.createGeneration(next)
	if err != nil {
		return err
	}
	if err := ix.writeCurrent(next); err != nil {
		db.Close()
		return fmt.Errorf("index %s: %w", ix.dir, err)
	}
	ix.removeStaleGenerations(next)
	g := &generation{db: db, n: next}
	f := newRefFilter(0, ix.log) // empty generation: nothing is referenced
	f.ready.Store(true)
	g.filt.Store(f)
	ix.cur, ix.snap, ix.needRebuild = g, ix.newSnapshot(g), true
	return nil
}

// openExisting opens generation cur and loads its state.
func (ix *Index) openExisting(cur int) error {
	ix.removeStaleGenerations(cur)
	genDir := filepath.Join(ix.dir, genName(cur))
	removed, err := removeEmptyBadgerLogs(genDir)
	if err != nil {
		return fmt.Errorf("open index %s: %w", ix.dir, err)
	}
	if len(removed) > 0 {
		ix.log.Info("removed empty log files a killed process left in the index", "index", genDir, "files", removed)
	}
	db, err := badger.Open(ix.badgerOptions(genDir))
	if err != nil && strings.Contains(err.Error(), "Cannot acquire directory lock") {
		return fmt.Errorf("%w: open index %s: %v (another process, a badger tool say, has the generation open; stop it)", errGenerationBusy, ix.dir, err)
	}
	if err != nil {
		return fmt.Errorf("open index %s: %w (the index is derived data: `ckguard index rebuild` recreates it)", ix.dir, err)
	}
	var schema, fp string
	var last time.Time
	var syncErr string
	pending := false
	err = db.View(func(txn *badger.Txn) error {
		schema = getString(txn, keySchema)
		fp = getString(txn, keyFingerprint)
		syncErr = getString(txn, keySyncErr)
		if _, err := txn.Get(keySyncPending); err == nil {
			pending = true
		}
		if it, err := txn.Get(keyLastSync); err == nil {
			v, _ := it.ValueCopy(nil)
			last = decodeTime(v)
		}
		return nil
	})
	if err == nil && schema != strconv.Itoa(SchemaVersion) {
		db.Close()
		return fmt.Errorf("%w: index %s has schema %q, this ckguard uses schema %d: run `ckguard index rebuild --store … --index %s`", ErrSchema, ix.dir, schema, SchemaVersion, ix.dir)
	}
	if err != nil {
		db.Close()
		return fmt.Errorf("open index %s: %w", ix.dir, err)
	}
	st, err := loadState(db)
	if err != nil {
		db.Close()
		return fmt.Errorf("open index %s: %w (run `ckguard index rebuild`)", ix.dir, err)
	}
	g := &generation{db: db, n: cur}
	ix.cur, ix.snap, ix.state, ix.lastSync, ix.syncErr = g, ix.newSnapshot(g), st, last, syncErr
	if fp != ix.norm.Fingerprint() {
		ix.log.Info("path mapping changed since the index was built; the next sync rebuilds it", "index", ix.dir)
		ix.needRebuild = true
	} else if err := ix.adoptMountRules(db); err != nil {
		db.Close()
		return fmt.Errorf("open index %s: %w", ix.dir, err)
	}
	if pending {
		ix.log.Warn("the index was stopped in the middle of writing a large sync; every deletion is refused until the next sync rebuilds it", "index", ix.dir)
		ix.needRebuild, ix.interrupted = true, true
	}
	return nil
}

// errGenerationBusy: badger's own lock on a generation is held by another process. That is no damage,
// so WithFreshIndex does not set the generation aside.
var errGenerationBusy = errors.New("index generation in use")

// setAside renames generation n to "damaged-gen-…" (replacing an earlier one: one is kept) and
// returns the new name, or "" when it had to be removed instead.
func (ix *Index) setAside(n int) string {
	ents, _ := os.ReadDir(ix.dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "damaged-") {
			os.RemoveAll(filepath.Join(ix.dir, e.Name()))
		}
	}
	aside := "damaged-" + genName(n)
	if err := os.Rename(filepath.Join(ix.dir, genName(n)), filepath.Join(ix.dir, aside)); err != nil {
		ix.log.Warn("cannot set an unusable index generation aside; removing it", "dir", genName(n), "err", err)
		os.RemoveAll(filepath.Join(ix.dir, genName(n)))
		return ""
	}
	return aside
}

func (ix *Index) maxGenOnDisk() int {
	n := 0
	ents, _ := os.ReadDir(ix.dir)
	for _, e := range ents {
		if v, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "gen-")); err == nil && strings.HasPrefix(e.Name(), "gen-") {
			n = max(n, v)
		}
	}
	return n
}

// createGeneration makes a new, empty badger DB for generation n carrying schema and fingerprint.
func (ix *Index) createGeneration(n int) (*badger.DB, error) {
	p := filepath.Join(ix.dir, genName(n))
	if err := os.RemoveAll(p); err != nil {
		return nil, err
	}
	db, err := badger.Open(ix.badgerOptions(p))
	if err != nil {
		return nil, fmt.Errorf("create index generation %s: %w", p, err)
	}
	err = db.Update(func(txn *badger.Txn) error {
		if err := txn.Set(keySchema, []byte(strconv.Itoa(SchemaVersion))); err != nil {
			return err
		}
		if err := txn.Set(keyMountRules, []byte(ix.norm.MountRules())); err != nil {
			return err
		}
		return txn.Set(keyFingerprint, []byte(ix.norm.Fingerprint()))
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func getString(txn *badger.Txn, k []byte) string {
	it, err := txn.Get(k)
	if err != nil {
		return ""
	}
	v, _ := it.ValueCopy(nil)
	return string(v)
}

// loadState reads the checkpoint records and directory references into memory.
func loadState(db *badger.DB) (*memState, error) {
	st := newMemState()
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 100, Prefix: []byte(tblCheckpoint)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			c, err := unmarshalRecord(v)
			if err != nil {
				return err
			}
			st.ckpts[c.Key] = c
		}
		dit := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(tblDir)})
		defer dit.Close()
		for dit.Rewind(); dit.Valid(); dit.Next() {
			obj, _ := splitPair(dit.Item().Key(), tblDir)
			st.dirRefs[obj]++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	st.finish()
	return st, nil
}

// SetPolicy replaces the decision policy (for example after a configuration reload).
func (ix *Index) SetPolicy(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	ix.mu.Lock()
	ix.pol = p
	ix.mu.Unlock()
	return nil
}

// Policy returns the decision policy in force.
func (ix *Index) Policy() Policy {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.pol
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
	if ix.closed {
		return nil
	}
	ix.closed = true
	close(ix.done)
	ix.bg.Wait()
	ix.cur.users.Wait()
	ix.snap.release() // the last user: discards its transaction before the DB closes
	err := ix.cur.db.Close()
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
	// remap: the index was derived with another path mapping (fingerprint) and not rebuilt yet.
	remap bool
	// interrupted: the remap is due to a large change stopped half-way (rolling.go).
	interrupted bool
	skew        time.Duration // see Index.skew
}

// acquire returns the committed state Decide and the queries read; call release when done.
func (ix *Index) acquire() (*view, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if ix.closed {
		return nil, errors.New("index is closed")
	}
	ix.cur.users.Add(1)
	ix.snap.acquire()
	return &view{g: ix.cur, snap: ix.snap, filt: ix.cur.filt.Load(), st: ix.state, pol: ix.pol, last: ix.lastSync, syncErr: ix.syncErr, pins: ix.pins, remap: ix.needRebuild && !ix.lastSync.IsZero(), interrupted: ix.interrupted, skew: ix.skew}, nil
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
		if ix.closed || ix.cur != g || g.filt.Load() != nil {
			ix.mu.RUnlock()
			ix.writeMu.Unlock()
			return
		}
		refs := 0
		for _, c := range ix.state.ckpts {
			refs += c.Refs
		}
		g.users.Add(1)
		ix.bg.Add(1) // under writeMu, which Close holds while it waits for bg
		// The fill reads the state of the current snapshot (no commit can come between: writeMu):
		// views of older snapshots never consult the filter (they may read reverse entries that a
		// commit before the fill removed and the filter never counted).
		seq := ix.snap.seq
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
			f.ready.Store(true)
			ix.log.Debug("reference filter built", "generation", g.n, "slots", len(f.slots), "took", time.Since(t0).Round(time.Millisecond))
		}
	}()
}

// switchGeneration makes g (already committed via CURRENT) the live generation with state st. The
// previous one is closed in the background once its last reader (a long orphans walk, say) is done,
// so writers through the mount are not held up.
func (ix *Index) switchGeneration(g *generation, st *memState, last time.Time) {
	snap := ix.newSnapshot(g)
	ix.mu.Lock()
	old, oldSnap := ix.cur, ix.snap
	ix.cur, ix.snap, ix.state, ix.lastSync, ix.syncErr, ix.needRebuild, ix.interrupted = g, snap, st, last, "", false, false
	ix.mu.Unlock()
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
