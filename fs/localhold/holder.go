// Package localhold is the local store's second line of defence outside the mount: FS_IMMUTABLE_FL on
// every file a live checkpoint or savepoint references and on every live `_metadata`, so that no
// process beside the mount (root included, unless it clears the flag first) can unlink, rename,
// truncate or write it. It is `--hold` on a local store (ext4, XFS, btrfs, tmpfs since Linux 6.0; not NFS, not ramfs).
//
// # When a file is flagged
//
// After each successful sync a pass compares the keys the index counts as protected
// (refindex.Index.ProtectedKeys) with what it flagged and flags the rest: a reference is immutable at
// the latest one pass after the sync that learned it. The mount's decisions never wait for a flag.
//
// # When the flag is cleared
//
// By the mount, before it changes the file itself: the enforcer calls BeforeChange under its lock for
// every path of an allowed change (an unlink or its staging into the quarantine, a rename, a
// truncation, a write) and a flagged file's flag is cleared there (one open, two ioctls): the guard's
// own changes, and Flink's through the mount, work as without holds. By a pass, for a flagged file the
// index no longer counts as protected, once the index's own decision for an unlink allows the deletion
// (no live reference, not pinned, past grace, index fresh): the release rule of the S3 legal holds.
// A stale or failed index refuses, so flags stay while the index cannot judge.
//
// Nothing here blocks under the enforcer's lock: BeforeChange takes flagMu, which a pass holds only
// around one flag change of one local file (never around the index, the ledger or a list).
//
// # Crash safety
//
// The ledger (LedgerName in the index folder, the S3 holds' format: `ckguard hold status --list` reads
// both) records the intent to flag a file, on disk before the ioctl; a clear is recorded after it. After
// a kill -9 the next mount's first pass finds every file the ledger may have flagged: it flags again
// what is protected and releases (by the same rule) what is not, so after restart and one sync no flag
// is left on a file that is no longer referenced.
package localhold

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
	"github.com/ckguard/ckguard/s3backend/s3hold"
)

// LedgerName is the ledger in the index folder: the same file and line format as the S3 holds'
// (s3hold.LedgerName), so `ckguard hold status --list` lists either.
const LedgerName = s3hold.LedgerName

// Files is how the holder reaches a file of the store (*localstore.Store is one): opened beneath the
// root through no symlink, read-only, non-blocking, a regular file only.
type Files interface {
	OpenInode(key string) (*os.File, error)
}

// Index is what the holder needs of the reference index (*refindex.Index is one).
type Index interface {
	ProtectedKeys(ctx context.Context, fn func(key string, kind refindex.ProtectedKind) bool) error
	Decide(ctx context.Context, p string, op verdict.Op, seen ...store.ObjectInfo) verdict.Decision
}

// Options configure a Holder.
type Options struct {
	Files  Files
	Index  Index
	Dir    string // the index folder: the ledger and the status file
	Logger *slog.Logger
	Mode   string // best-effort or required (shown in the status)
	Note   string // why the holder is inactive
	// Inactive: the filesystem cannot hold (best-effort on NFS, ramfs): nothing is flagged.
	Inactive bool
	Now      func() time.Time
}

type held struct {
	size int64
	seen uint64 // the pass that last found the key protected
}

// Holder keeps the immutable flags in line with the index.
type Holder struct {
	o    Options
	kick chan struct{}
	pass sync.Mutex // one pass at a time; owns the ledger file

	// flagMu orders a pass's flag changes against the mount's BeforeChange, and guards what follows.
	flagMu sync.Mutex
	held   map[string]*held
	// heldBytes is the sum of held's sizes; seenN counts the entries of held seen by the current (or
	// last) pass: while it equals len(held) no flag waits for a release and the pass scans nothing.
	// Both keep what runs under flagMu O(1) per key: it is taken under the enforcer's lock.
	heldBytes int64
	seenN     int
	curEpoch  uint64
	// cleared: keys BeforeChange cleared (their "x" lines are written by the next pass).
	cleared []string
	// passing: a pass is setting flags from a view of the index taken at its start; touched: keys
	// BeforeChange saw since, which that pass must not flag (the change the mount is about to make was
	// allowed after the view).
	passing bool
	touched map[string]struct{}

	// ledger (owned by pass, and by New before Run)
	lf      *os.File
	lw      *bufio.Writer
	lines   int
	damaged int

	mu    sync.Mutex
	st    s3hold.Status
	epoch uint64

	// failing: keys whose last attempt failed (owned by pass): a failure is logged when it starts,
	// not at every pass.
	failing map[string]bool
}

// New opens (or creates) the ledger in o.Dir and returns a Holder that trusts it: every key it names
// may carry the flag, and the first pass settles each.
func New(o Options) (*Holder, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	h := &Holder{o: o, kick: make(chan struct{}, 1), held: map[string]*held{}, touched: map[string]struct{}{}, failing: map[string]bool{}}
	h.st = s3hold.Status{Mode: o.Mode, Active: !o.Inactive, Note: o.Note}
	if err := h.openLedger(); err != nil {
		return nil, err
	}
	h.finish(time.Time{}, 0, 0, nil)
	return h, nil
}

// SetIndex gives the holder the index once the daemon has opened it (before Run).
func (h *Holder) SetIndex(ix Index) { h.o.Index = ix }

// Damaged is the number of ledger lines the open could not read (a torn last line after a crash).
func (h *Holder) Damaged() int { return h.damaged }

// record is one ledger line (s3hold's format): "p" the intent to flag (synced before the ioctl), "h"
// flagged, "x" cleared, "f" a failed attempt.
type record struct {
	Op   string    `json:"op"`
	Key  string    `json:"key"`
	Size int64     `json:"size,omitempty"`
	At   time.Time `json:"at,omitzero"`
	Err  string    `json:"err,omitempty"`
}

func (h *Holder) ledgerPath() string { return filepath.Join(h.o.Dir, LedgerName) }

// openLedger replays the ledger into held (a "p" counts: the flag may have been set before a crash)
// and compacts it to one line per key.
func (h *Holder) openLedger() error {
	if err := os.MkdirAll(h.o.Dir, 0o700); err != nil {
		return fmt.Errorf("hold ledger %s: %w", h.ledgerPath(), err)
	}
	b, err := os.ReadFile(h.ledgerPath())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("hold ledger %s: %w", h.ledgerPath(), err)
	}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r record
		if len(line) > 16<<10 || json.Unmarshal(line, &r) != nil || r.Key == "" {
			h.damaged++
			continue
		}
		switch r.Op {
		case "p", "h":
			h.forget(r.Key)
			h.held[r.Key] = &held{size: r.Size}
			h.heldBytes += r.Size
		case "x":
			h.forget(r.Key)
		}
	}
	return h.compact()
}

// forget drops key from held, keeping heldBytes and seenN (under flagMu, or before the holder is shared).
func (h *Holder) forget(key string) {
	e, ok := h.held[key]
	if !ok {
		return
	}
	h.heldBytes -= e.size
	if e.seen == h.curEpoch && h.curEpoch != 0 {
		h.seenN--
	}
	delete(h.held, key)
}

// compact rewrites the ledger with one "h" line per key that may be flagged (atomically).
func (h *Holder) compact() error {
	if h.lf != nil {
		_ = h.lw.Flush()
		_ = h.lf.Close()
		h.lf = nil
	}
	p := h.ledgerPath()
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("hold ledger %s: %w", p, err)
	}
	w := bufio.NewWriter(f)
	keys := make([]string, 0, len(h.held))
	h.flagMu.Lock()
	for k := range h.held {
		keys = append(keys, k)
	}
	sizes := make([]int64, len(keys))
	sort.Strings(keys)
	for i, k := range keys {
		sizes[i] = h.held[k].size
	}
	h.flagMu.Unlock()
	for i, k := range keys {
		line, _ := json.Marshal(record{Op: "h", Key: k, Size: sizes[i]})
		_, _ = w.Write(append(line, '\n'))
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		return fmt.Errorf("hold ledger %s: compact: %w", p, err)
	}
	if d, err := os.Open(h.o.Dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	h.lines = len(keys)
	if h.lf, err = os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0o600); err != nil {
		return fmt.Errorf("hold ledger %s: %w", p, err)
	}
	h.lw = bufio.NewWriter(h.lf)
	return nil
}

// write appends records; with sync they are on disk when it returns (an intent must be, before its
// ioctl).
func (h *Holder) write(sync bool, rs ...record) error {
	if len(rs) == 0 {
		return nil
	}
	for _, r := range rs {
		b, _ := json.Marshal(r)
		if _, err := h.lw.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("hold ledger %s: %w", h.ledgerPath(), err)
		}
		h.lines++
	}
	if err := h.lw.Flush(); err != nil {
		return fmt.Errorf("hold ledger %s: %w", h.ledgerPath(), err)
	}
	if sync {
		if err := h.lf.Sync(); err != nil {
			return fmt.Errorf("hold ledger %s: %w", h.ledgerPath(), err)
		}
	}
	h.flagMu.Lock()
	n := len(h.held)
	h.flagMu.Unlock()
	if h.lines > 2*n+10000 {
		return h.compact()
	}
	return nil
}

// Close flushes and closes the ledger.
func (h *Holder) Close() error {
	h.pass.Lock()
	defer h.pass.Unlock()
	if h.lf == nil {
		return nil
	}
	err := h.lw.Flush()
	if cerr := h.lf.Close(); err == nil {
		err = cerr
	}
	h.lf = nil
	return err
}

// BeforeChange is the enforcer's hook (guard.Config.BeforeChange): the mount is about to change key,
// as the guard allowed; a flag this holder set on it is cleared first. It never blocks on more than
// one flag change of the pass and one of its own.
func (h *Holder) BeforeChange(op verdict.Op, key string) {
	h.flagMu.Lock()
	defer h.flagMu.Unlock()
	keys := []string{key}
	if op == verdict.OpRename {
		// A folder renamed moves every file below it to names no pass looks at: their flags would
		// stay for good. Clear them too (a scan of the held set; folder renames are rare, and the
		// guard allows one only when nothing below is referenced).
		for k := range h.held {
			if strings.HasPrefix(k, key+"/") || key == "" {
				keys = append(keys, k)
			}
		}
	}
	for _, k := range keys {
		h.clearBefore(k)
	}
}

// clearBefore clears the flag of the file at key before the mount changes it (flagMu held).
func (h *Holder) clearBefore(key string) {
	if h.passing {
		h.touched[key] = struct{}{}
	}
	if _, ok := h.held[key]; !ok {
		return
	}
	if err := h.set(key, false); err != nil && !errors.Is(err, fs.ErrNotExist) {
		// The change itself will fail (EPERM) and say so; the next pass tries again.
		h.o.Logger.Warn("immutable flag: could not clear the flag before the mount's own change of the file; the change fails", "file", key, "err", err)
		return
	}
	h.forget(key)
	h.cleared = append(h.cleared, key)
}

// set sets or clears the flag on the file at key.
func (h *Holder) set(key string, on bool) error {
	f, err := h.o.Files.OpenInode(key)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = setImmutable(int(f.Fd()), on)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// Kick asks for a pass (after a successful sync).
func (h *Holder) Kick() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Run runs a pass per Kick until ctx ends, then closes the ledger.
func (h *Holder) Run(ctx context.Context) {
	defer h.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
		}
		if err := h.Pass(ctx); err != nil && ctx.Err() == nil {
			h.o.Logger.Warn("immutable flag: a pass failed; it is retried after the next sync", "err", err)
		}
	}
}

// Heal: a local file deleted beside the mount cannot be brought back by the flag (a flagged one cannot
// be deleted); the loss check reports it as before.
func (h *Holder) Heal(context.Context, string, string) (bool, error) { return false, nil }

// batch is how many intents are synced at once before their ioctls.
const batch = 256

// Pass flags every protected file not flagged yet, then releases every flagged file the index no
// longer protects where its decision for an unlink allows the deletion.
func (h *Holder) Pass(ctx context.Context) error {
	if h.o.Inactive {
		return nil
	}
	h.pass.Lock()
	defer h.pass.Unlock()
	t0 := h.o.Now()
	h.mu.Lock()
	h.epoch++
	epoch := h.epoch
	h.mu.Unlock()

	h.flagMu.Lock()
	cleared := h.cleared
	h.cleared = nil
	h.passing = true
	h.curEpoch, h.seenN = epoch, 0
	clear(h.touched)
	h.flagMu.Unlock()
	defer func() {
		h.flagMu.Lock()
		h.passing = false
		clear(h.touched)
		h.flagMu.Unlock()
	}()
	var xs []record
	for _, k := range cleared {
		xs = append(xs, record{Op: "x", Key: k})
	}
	if err := h.write(false, xs...); err != nil {
		h.finish(t0, 0, -1, err)
		return err
	}

	var todo []string
	dirs := 0
	err := h.o.Index.ProtectedKeys(ctx, func(k string, kind refindex.ProtectedKind) bool {
		if kind == refindex.ProtectedDirectory {
			dirs++
			return true
		}
		h.flagMu.Lock()
		e := h.held[k]
		if e != nil && e.seen != epoch {
			e.seen = epoch
			h.seenN++
		}
		h.flagMu.Unlock()
		if e == nil {
			todo = append(todo, k)
		}
		return true
	})
	if err != nil {
		h.finish(t0, dirs, -1, err)
		return fmt.Errorf("immutable flag: read the protected keys from the index: %w", err)
	}
	failed := 0
	for i := 0; i < len(todo); i += batch {
		if err := h.flagBatch(ctx, epoch, todo[i:min(i+batch, len(todo))], &failed); err != nil {
			h.finish(t0, dirs, -1, err)
			return err
		}
	}
	kept, err := h.releaseUnseen(ctx, epoch, &failed)
	h.mu.Lock()
	h.st.Failed = failed
	h.mu.Unlock()
	h.finish(t0, dirs, kept, err)
	return err
}

// flagBatch writes the intents of keys, then flags each (unless the mount touched it since the pass
// began), recording the outcome.
func (h *Holder) flagBatch(ctx context.Context, epoch uint64, keys []string, failed *int) error {
	var intents []record
	sizes := make([]int64, len(keys))
	for i, k := range keys {
		if f, err := h.o.Files.OpenInode(k); err == nil {
			if fi, err := f.Stat(); err == nil {
				sizes[i] = fi.Size()
			}
			f.Close()
		}
		intents = append(intents, record{Op: "p", Key: k, Size: sizes[i]})
	}
	if err := h.write(true, intents...); err != nil {
		return err
	}
	var done []record
	for i, k := range keys {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		h.flagMu.Lock()
		var err error
		if _, touched := h.touched[k]; touched {
			err = errSkipped
		} else if err = h.set(k, true); err == nil {
			h.forget(k)
			h.held[k] = &held{size: sizes[i], seen: epoch}
			h.heldBytes += sizes[i]
			h.seenN++
		}
		h.flagMu.Unlock()
		if err == nil || errors.Is(err, errSkipped) || errors.Is(err, fs.ErrNotExist) {
			delete(h.failing, k)
		}
		switch {
		case err == nil:
			done = append(done, record{Op: "h", Key: k, Size: sizes[i], At: h.o.Now()})
		case errors.Is(err, errSkipped), errors.Is(err, fs.ErrNotExist):
			// Changed through the mount since the pass's view, or gone (the loss check reports a
			// referenced file deleted beside the mount): nothing flagged; the next pass looks again.
			done = append(done, record{Op: "x", Key: k})
		default:
			*failed++
			if !h.failing[k] {
				h.failing[k] = true
				h.o.Logger.Warn("immutable flag: could not flag a protected file; retried at every pass (logged again only after it worked once)", "file", k, "err", err)
			}
			done = append(done, record{Op: "x", Key: k}, record{Op: "f", Key: k, Err: err.Error()})
		}
	}
	return h.write(false, done...)
}

var errSkipped = errors.New("changed through the mount since the pass began")

// releaseUnseen clears the flags of the files the pass did not find protected, where the index's
// decision for an unlink allows the deletion; kept counts those it refuses.
func (h *Holder) releaseUnseen(ctx context.Context, epoch uint64, failed *int) (kept int, err error) {
	h.flagMu.Lock()
	if h.seenN >= len(h.held) {
		h.flagMu.Unlock()
		return 0, nil // every flagged file is still protected: nothing to scan
	}
	var cands []string
	for k, e := range h.held {
		if e.seen != epoch {
			cands = append(cands, k)
		}
	}
	h.flagMu.Unlock()
	sort.Strings(cands)
	var done []record
	for _, k := range cands {
		if ctx.Err() != nil {
			return kept, ctx.Err()
		}
		if d := h.o.Index.Decide(ctx, k, verdict.OpUnlink); !d.Allow {
			kept++
			continue
		}
		h.flagMu.Lock()
		var err error
		if _, ok := h.held[k]; ok { // BeforeChange may have cleared it meanwhile
			if err = h.set(k, false); err == nil || errors.Is(err, fs.ErrNotExist) {
				err = nil
				h.forget(k)
			}
		}
		h.flagMu.Unlock()
		if err != nil {
			*failed++
			if !h.failing[k] {
				h.failing[k] = true
				h.o.Logger.Warn("immutable flag: could not clear the flag of a file no longer referenced; retried at every pass (logged again only after it worked once)", "file", k, "err", err)
			}
			continue
		}
		delete(h.failing, k)
		done = append(done, record{Op: "x", Key: k})
	}
	return kept, h.write(false, done...)
}

// finish refreshes the status and writes it for the commands (kept < 0: not counted this pass).
func (h *Holder) finish(t0 time.Time, dirs, kept int, err error) {
	h.flagMu.Lock()
	n, bytes := len(h.held), h.heldBytes
	h.flagMu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &h.st
	s.Held, s.HeldBytes = n, bytes
	if !t0.IsZero() {
		s.LastPass, s.LastTook, s.Directories = h.o.Now(), h.o.Now().Sub(t0).Round(time.Millisecond).String(), dirs
		s.LastErr = ""
		if err != nil {
			s.LastErr = err.Error()
		}
	}
	if kept >= 0 {
		s.Kept = kept
	}
	if werr := s3hold.WriteStatus(h.o.Dir, *s); werr != nil {
		h.o.Logger.Warn("immutable flag: could not write the status file for `ckguard hold status`", "dir", h.o.Dir, "err", werr)
	}
}

// Status returns the figures of the last pass.
func (h *Holder) Status() s3hold.Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st
}

// Held reports whether the holder counts key as flagged (for tests).
func (h *Holder) Held(key string) bool {
	h.flagMu.Lock()
	defer h.flagMu.Unlock()
	_, ok := h.held[key]
	return ok
}

// Register adds the holds' gauges (the S3 holds' names) to reg.
func Register(reg prometheus.Registerer, h *Holder) error {
	g := func(opts prometheus.GaugeOpts, f func(s3hold.Status) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(opts, func() float64 { return f(h.Status()) })
	}
	cs := []prometheus.Collector{
		g(prometheus.GaugeOpts{Name: "ckguard_hold_active", Help: "1 when the immutable flag is applied (--hold on a filesystem that has it), 0 when --hold best-effort runs without it."},
			func(s s3hold.Status) float64 {
				if s.Active {
					return 1
				}
				return 0
			}),
		g(prometheus.GaugeOpts{Name: "ckguard_held_objects", Help: "Files the mount keeps immutable (FS_IMMUTABLE_FL)."}, func(s s3hold.Status) float64 { return float64(s.Held) }),
		g(prometheus.GaugeOpts{Name: "ckguard_held_bytes", Help: "Bytes of the files the mount keeps immutable."}, func(s s3hold.Status) float64 { return float64(s.HeldBytes) }),
		g(prometheus.GaugeOpts{Name: "ckguard_holds_failed", Help: "Files whose last flag or release attempt failed (retried every pass)."}, func(s s3hold.Status) float64 { return float64(s.Failed) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
