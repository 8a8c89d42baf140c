package refindex

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/ckguard/ckguard/internal/fsync"
)

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

func genName(n int) string { return fmt.Sprintf("gen-%08d", n) }

func (ix *Index) badgerOptions(path string) badger.Options {
	// Memory is bounded for stores of millions of references: small memtables (each costs its arena
	// plus a mapped write-ahead file of twice its size), a modest block cache for decisions, and
	// values up to 1 MiB (a checkpoint's forward references, tens of KB) inline in the tables rather
	// than in the value log: the tables' pages are given back after each pass (releaseTablePages),
	// while the value log is written through a mapping that stays resident (a rebuild at 10 M objects
	// wrote most of a GB there). An index written with the old threshold opens as it is: badger
	// records per entry whether its value is inline or a value-log pointer.
	threshold := int64(1 << 20)
	if ix.opt.valueThresh > 0 {
		threshold = ix.opt.valueThresh
	}
	return badger.DefaultOptions(path).
		WithLogger(nil).
		WithNumVersionsToKeep(1).
		WithMemTableSize(32 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(8).
		WithNumLevelZeroTablesStall(16).
		WithBlockCacheSize(64 << 20).
		WithIndexCacheSize(0).
		WithValueThreshold(threshold).
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
	return fsync.Dir(dir)
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
	f.markReady()
	g.filt.Store(f)
	ix.mu.cur, ix.mu.snap, ix.mu.needRebuild = g, ix.newSnapshot(g), true
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
	var unknown []UnknownSubtree
	pending := false
	err = db.View(func(txn *badger.Txn) error {
		schema = getString(txn, keySchema)
		fp = getString(txn, keyFingerprint)
		syncErr = getString(txn, keySyncErr)
		unknown = loadUnknown(txn)
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
	ix.mu.cur, ix.mu.snap, ix.mu.state, ix.mu.lastSync, ix.mu.syncErr = g, ix.newSnapshot(g), st, last, syncErr
	ix.mu.unknown = unknown
	if fp != ix.norm.Fingerprint() {
		ix.log.Info("path mapping changed since the index was built; the next sync rebuilds it", "index", ix.dir)
		ix.mu.needRebuild = true
	} else if err := ix.adoptMountRules(db); err != nil {
		db.Close()
		return fmt.Errorf("open index %s: %w", ix.dir, err)
	}
	if pending {
		ix.log.Warn("the index was stopped in the middle of writing a large sync; every deletion is refused until the next sync rebuilds it", "index", ix.dir)
		ix.mu.needRebuild, ix.mu.interrupted = true, true
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
