package hold

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// Primitive is one backend's way of holding an object (an S3 legal hold on a version, the local
// immutable flag on a file). Both calls are idempotent; the Engine owns the ledger and decides what is
// held when, so a primitive keeps no state of its own.
type Primitive interface {
	// Stat returns what a hold of key holds: the version (S3's current version id; "" where the
	// backend holds the key itself) and its size. An error wrapping fs.ErrNotExist: the object is gone.
	Stat(ctx context.Context, key string) (version string, size int64, err error)
	// Hold sets the hold on key's version.
	Hold(ctx context.Context, key, version string) error
	// Release lifts it. An error wrapping fs.ErrNotExist: the object is gone, nothing is held.
	Release(ctx context.Context, key, version string) error
}

// Fleet is the store's shared record of held objects (--shared; *guardd's adapter over shared.Holds
// is one): which mounts need each hold, so that a hold one mount needs is never released by another,
// and releases only by the holder of the sweeper lease.
type Fleet interface {
	// Need records that this mount needs key held (before the hold is set).
	Need(ctx context.Context, key, version string) error
	// Drop records that this mount no longer needs key; release: no mount needs it and mayRelease,
	// so the caller releases rec.Version and calls Released. rec.State shared.HeldOff: released already.
	Drop(ctx context.Context, key string, mayRelease bool) (release bool, rec shared.Held, err error)
	// Claim takes a record no mount needs (an orphan) for release.
	Claim(ctx context.Context, key string) (release bool, version string, err error)
	// Released records a release; rehold: a mount needed the key meanwhile, hold it again.
	Released(ctx context.Context, key string) (rehold bool, err error)
	// Orphans lists the holds no mount needs. With an error it may still return some: the records it
	// could read (a damaged record refuses only its own release).
	Orphans(ctx context.Context) ([]shared.Held, error)
	// MayRelease renews or takes the sweeper lease (once per pass) and reports whether this mount
	// holds it; StillMayRelease is the fence checked before each release.
	MayRelease(ctx context.Context) bool
	StillMayRelease() bool
}

// Index is what holds need of the reference index (*refindex.Index is one).
type Index interface {
	ProtectedKeys(ctx context.Context, fn func(key string, kind refindex.ProtectedKind) bool) error
	Decide(ctx context.Context, p string, op verdict.Op, seen ...store.ObjectInfo) verdict.Decision
}

// versionedIndex is an Index that names the state of its protected set (*refindex.Index is one).
type versionedIndex interface {
	ProtectedVersion() uint64
}

// fullPassEvery bounds how long passes are skipped on an unchanged index: a full scan at least this
// often, whatever the version says.
const fullPassEvery = 10 * time.Minute

// Defaults of Options.
const (
	DefaultBatch    = 64
	DefaultParallel = 8
)

// Options configure an Engine.
type Options struct {
	Primitive Primitive
	Index     Index
	Ledger    *Ledger
	// Pacer, when set, is waited on before every request (the loss check's limiter: holds share its
	// request budget).
	Pacer refindex.Pacer
	// Batch is the keys whose intents are written (and synced) at once before their requests go out
	// (0: DefaultBatch); Parallel bounds the requests in flight (0: DefaultParallel).
	Batch, Parallel int
	// Lifted: the hold stops the mount's own changes too (the immutable flag), so the mount lifts it
	// first (BeforeChange). Then every hold and release runs one at a time under the lock BeforeChange
	// takes, and a pass never holds a key the mount changed after the pass's view of the index.
	Lifted bool
	// Fleet, with --shared, is the store's shared record of held objects: a hold is released only once
	// no mount of the store needs it, and only by the holder of the sweeper lease (see Fleet).
	Fleet Fleet
	// Name starts the log lines ("legal holds", "immutable flag").
	Name   string
	Logger *slog.Logger
	Now    func() time.Time
	// Mode and Note are shown in Status ("required" or "best-effort"; Note: why holds are off).
	Mode string
	Note string
	// Inactive: the backend cannot hold (best-effort without the primitive): Pass does nothing.
	Inactive bool
	// StatusDir, when set, receives the Status after every pass (WriteStatus).
	StatusDir string
}

// Engine keeps the backend's holds in line with the index.
type Engine struct {
	o Options

	pass sync.Mutex // one pass at a time; the pass owns the ledger's file
	// lift orders the mount's BeforeChange against a pass's holds and releases (Lifted only), and
	// guards passing and touched. Under it run only one primitive call and O(1) ledger changes (no
	// I/O of the ledger, no index): BeforeChange takes it under the enforcer's lock.
	lift sync.Mutex
	// passing: a pass is holding from a view of the index taken at its start; touched: keys the
	// mount changed since, which that pass must not hold (the change was allowed after the view).
	passing bool
	touched map[string]struct{}
	// unneeded: keys BeforeChange lifted since the last pass, whose need the fleet still records; the
	// next pass drops the need of those it does not find protected again (no I/O under lift).
	unneeded []string

	mu       sync.Mutex // what follows
	epoch    uint64
	st       Status // the last pass's figures (the ledger's counts are read live)
	statFail int    // keys of the last pass whose object could not be read

	joined   atomic.Bool // the fleet's record has every need of this mount (FleetJoinedName)
	healed   atomic.Int64
	requests atomic.Int64
	kick     chan struct{}

	// failing: keys whose object could not be read (owned by the pass): logged when it starts, not at
	// every pass.
	failing map[string]bool

	// The last pass that left nothing to do (every protected key held, nothing to release or kept by
	// the rules, no failure), under mu: a pass with the same index version skips the scan.
	settled    bool
	settledVer uint64
	settledAt  time.Time
}

// New returns an Engine over o.Ledger, which it trusts: every key it names may be held, and the first
// pass settles each.
func New(o Options) *Engine {
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	if o.Parallel <= 0 {
		o.Parallel = DefaultParallel
	}
	if o.Lifted {
		o.Parallel = 1 // the holds run one at a time under lift anyway
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Name == "" {
		o.Name = "holds"
	}
	e := &Engine{o: o, kick: make(chan struct{}, 1), touched: map[string]struct{}{}, failing: map[string]bool{}}
	e.st = Status{Mode: o.Mode, Active: !o.Inactive, Note: o.Note}
	e.mu.Lock()
	e.writeStatus()
	e.mu.Unlock()
	return e
}

// SetFleet gives the engine the store's shared record of held objects (--shared; before Run).
func (e *Engine) SetFleet(f Fleet) { e.o.Fleet = f }

// SetIndex gives the engine the index once the daemon has opened it (before Run).
func (e *Engine) SetIndex(ix Index) { e.o.Index = ix }

// Ledger is the engine's ledger.
func (e *Engine) Ledger() *Ledger { return e.o.Ledger }

// Inactive reports whether the backend cannot hold (Options.Inactive).
func (e *Engine) Inactive() bool { return e.o.Inactive }

// Status returns the figures of the ledger and the last pass.
func (e *Engine) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status()
}

// status is st with the ledger's live counts (mu held).
func (e *Engine) status() Status {
	s := e.st
	if l := e.o.Ledger; l != nil {
		l.mu.Lock()
		s.Held, s.HeldBytes, s.Pending, s.Releasing, s.Failed = l.n.held, l.n.heldBytes, l.n.pending, l.n.releasing, l.n.failed+e.statFail
		l.mu.Unlock()
	}
	s.Healed = e.healed.Load()
	s.Requests = e.requests.Load()
	return s
}

// Held reports whether the ledger holds key (held, or announced: it may be held).
func (e *Engine) Held(key string) bool {
	en, ok := e.o.Ledger.Get(key)
	return ok && en.State != Releasing
}

// NoteHealed counts a held object brought back (S3 healing: a delete marker removed) and writes the
// status; requests are the ones it took.
func (e *Engine) NoteHealed(requests int) {
	e.requests.Add(int64(requests))
	e.healed.Add(1)
	e.mu.Lock()
	e.writeStatus()
	e.mu.Unlock()
}

// CountRequests adds requests a backend sent on the holds' behalf (a heal that found nothing to do).
func (e *Engine) CountRequests(n int) { e.requests.Add(int64(n)) }

// Kick asks for a pass (after a successful sync); Run's loop takes it. A kick while a pass runs asks
// for one more after it.
func (e *Engine) Kick() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// Run runs a pass per Kick until ctx ends, then closes the ledger.
func (e *Engine) Run(ctx context.Context) {
	defer e.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.kick:
		}
		if err := e.Pass(ctx); err != nil && ctx.Err() == nil {
			e.o.Logger.Warn(e.o.Name+": a pass failed; it is retried after the next sync", "err", err)
		}
	}
}

// Close writes what the ledger has queued and closes it.
func (e *Engine) Close() error {
	e.pass.Lock()
	defer e.pass.Unlock()
	if e.o.Ledger == nil {
		return nil
	}
	return e.o.Ledger.Close()
}

// BeforeChange is the enforcer's hook (guard.Config.BeforeChange) for a Lifted backend: the mount is
// about to change key, as the guard allowed; a hold on it is lifted first. It never waits for more
// than one hold or release of the pass and its own.
func (e *Engine) BeforeChange(op verdict.Op, key string) {
	if !e.o.Lifted || e.o.Inactive {
		return
	}
	e.lift.Lock()
	defer e.lift.Unlock()
	keys := []string{key}
	if op == verdict.OpRename {
		// A folder renamed moves every file below it to names no pass looks at: their holds would
		// stay for good. Lift them too (a scan of the ledger; folder renames are rare, and the guard
		// allows one only when nothing below is referenced).
		keys = append(keys, e.o.Ledger.keysUnder(key)...)
	}
	lifted := false
	for _, k := range keys {
		if e.passing {
			e.touched[k] = struct{}{}
		}
		en, ok := e.o.Ledger.Get(k)
		if !ok {
			continue
		}
		if err := e.o.Primitive.Release(context.Background(), k, en.Version); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// The change itself will fail (EPERM) and say so; the next pass tries again.
			e.o.Logger.Warn(e.o.Name+": could not lift the hold before the mount's own change of the file; the change fails", "file", k, "err", err)
			continue
		}
		e.o.Ledger.apply(record{Op: "x", Key: k, Version: en.Version}) // written by the next pass
		if e.o.Fleet != nil {
			e.unneeded = append(e.unneeded, k)
		}
		lifted = true
	}
	if lifted {
		e.mu.Lock()
		e.settled = false // a key still protected must be held again by the next pass
		e.mu.Unlock()
	}
}

type job struct {
	key, version string
	size         int64
	err          error
}

// errSkipped: the mount changed the key after the pass's view of the index.
var errSkipped = errors.New("changed through the mount since the pass began")

// Pass brings the holds in line with the index once: holds for every protected key the ledger does
// not hold, then releases for every held key the index no longer protects and the guard's rules would
// let be deleted. When the protected keys cannot be read, nothing is released.
func (e *Engine) Pass(ctx context.Context) error {
	if e.o.Inactive {
		return nil
	}
	e.pass.Lock()
	defer e.pass.Unlock()
	t0 := e.o.Now()
	var ver uint64
	vi, versioned := e.o.Index.(versionedIndex)
	if versioned {
		ver = vi.ProtectedVersion() // before the scan (see refindex.Index.ProtectedVersion)
	}
	epoch, ok := e.beginEpochUnlessSettled(versioned, ver, t0)
	if !ok {
		return e.settledPass(ctx)
	}
	unneeded, endPassing := e.beginPassing(epoch)
	defer endPassing()
	if err := e.o.Ledger.flush(false); err != nil { // what the mount lifted since the last pass
		e.finish(t0, 0, -1, -1, err)
		return err
	}
	joined := e.o.Fleet == nil || e.fleetJoined()
	if e.o.Fleet == nil && e.o.StatusDir != "" {
		// Without the fleet this mount may hold and release what it alone decides: when it joins
		// again, every need is recorded afresh.
		_ = os.Remove(filepath.Join(e.o.StatusDir, FleetJoinedName))
	}
	todo, dirs, err := e.toHold(ctx, epoch, joined)
	if err != nil {
		e.finish(t0, dirs, -1, -1, err)
		return fmt.Errorf("%s: read the protected keys from the index: %w", e.o.Name, err)
	}
	statFail, firstErr := e.holdAll(ctx, epoch, todo)
	kept := 0
	if firstErr == nil {
		kept, firstErr = e.releaseUnseen(ctx, epoch)
	}
	e.dropLifted(ctx, unneeded)
	e.finish(t0, dirs, kept, statFail, firstErr)
	if !joined && firstErr == nil && statFail == 0 && e.Status().Failed == 0 {
		e.joinFleet()
	}
	if versioned && firstErr == nil && kept == 0 {
		e.noteSettled(todo, ver, t0)
	}
	return firstErr
}

// beginEpochUnlessSettled starts the pass's epoch, or, when the index's protected set is still the
// version of a pass that left nothing to do (and a full pass is not due), records a pass that did
// nothing and returns ok false: the same scan would find nothing.
func (e *Engine) beginEpochUnlessSettled(versioned bool, ver uint64, t0 time.Time) (epoch uint64, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if versioned && e.settled && ver == e.settledVer && t0.Sub(e.settledAt) < fullPassEvery {
		e.st.LastPass, e.st.LastTook = t0, "0s (index unchanged)"
		return 0, false
	}
	e.settled = false
	e.epoch++
	return e.epoch, true
}

// settledPass is what a pass does when the index is unchanged since a settled pass: only the lease
// holder of a fleet releases the holds other mounts let go, whatever this index does.
func (e *Engine) settledPass(ctx context.Context) error {
	if e.o.Fleet != nil && e.o.Fleet.MayRelease(ctx) {
		if err := e.releaseOrphans(ctx); err != nil {
			return err
		}
		return e.o.Ledger.flush(false)
	}
	return nil
}

// beginPassing opens the ledger's epoch and marks the pass running for the mount's lifts (passing,
// touched reset), taking the keys the mount found unneeded since the last pass; endPassing undoes the
// marks.
func (e *Engine) beginPassing(epoch uint64) (unneeded []string, endPassing func()) {
	e.o.Ledger.beginEpoch(epoch)
	e.lift.Lock()
	e.passing = true
	clear(e.touched)
	unneeded = e.unneeded
	e.unneeded = nil
	e.lift.Unlock()
	return unneeded, func() {
		e.lift.Lock()
		e.passing = false
		clear(e.touched)
		e.lift.Unlock()
	}
}

// toHold reads the index's protected keys, marks each seen in the ledger's epoch, and returns those
// to hold: the ones the ledger does not hold yet, and (until this mount has joined its fleet) every
// one, so its need is recorded; dirs counts the protected folders, which are not held.
func (e *Engine) toHold(ctx context.Context, epoch uint64, joined bool) (todo []job, dirs int, err error) {
	l := e.o.Ledger
	err = e.o.Index.ProtectedKeys(ctx, func(k string, kind refindex.ProtectedKind) bool {
		if kind == refindex.ProtectedDirectory {
			dirs++
			return true
		}
		if store.InQuarantine(k) {
			// ckguard's own folders (the quarantine, the shared area) hold no checkpoint's file; any
			// user of the store can write a `_metadata` naming them, and a hold there would keep
			// staged entries from every restore and purge and records from their collection.
			return true
		}
		en, ok := l.see(k, epoch)
		switch {
		case !ok:
			todo = append(todo, job{key: k})
		case en.State != Held, !joined:
			// Pending (a crash, a failure) or Releasing (protected again): hold the recorded version.
			// Not joined yet: held before the fleet knew this mount, so its need is recorded too.
			todo = append(todo, job{key: k, version: en.Version, size: en.Size})
		}
		return true
	})
	return todo, dirs, err
}

// holdAll holds todo in batches and returns the stat failures; it stops at the first error (the
// ledger cannot be written: no more requests are sent).
func (e *Engine) holdAll(ctx context.Context, epoch uint64, todo []job) (statFail int, err error) {
	for i := 0; i < len(todo); i += e.o.Batch {
		n, err := e.holdBatch(ctx, epoch, todo[i:min(i+e.o.Batch, len(todo))])
		statFail += n
		if err != nil {
			return statFail, err
		}
	}
	return statFail, nil
}

// noteSettled records, after a pass that released nothing and failed nothing, whether it left nothing
// to do at index version ver: nothing pending, releasing or failed, and every key it tried to hold held
// (one gone, which the loss check reports, or refused is tried again by the next pass).
func (e *Engine) noteSettled(todo []job, ver uint64, t0 time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.status()
	settled := s.Pending == 0 && s.Releasing == 0 && s.Failed == 0
	for _, j := range todo {
		if en, ok := e.o.Ledger.Get(j.key); !ok || en.State != Held {
			settled = false
			break
		}
	}
	e.settled, e.settledVer, e.settledAt = settled, ver, t0
}

// finish records the pass's figures and writes the status (kept, statFail < 0: not counted this pass).
func (e *Engine) finish(t0 time.Time, dirs, kept, statFail int, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.st.LastPass, e.st.LastTook, e.st.Directories = e.o.Now(), e.o.Now().Sub(t0).Round(time.Millisecond).String(), dirs
	if kept >= 0 {
		e.st.Kept = kept
	}
	if statFail >= 0 {
		e.statFail = statFail
	}
	e.st.LastErr = ""
	if err != nil {
		e.st.LastErr = err.Error()
	}
	e.writeStatus()
}

// writeStatus writes the status for the commands (mu held).
func (e *Engine) writeStatus() {
	if e.o.StatusDir == "" {
		return
	}
	if err := WriteStatus(e.o.StatusDir, e.status()); err != nil {
		e.o.Logger.Warn(e.o.Name+": could not write the status file for `ckguard hold status`", "dir", e.o.StatusDir, "err", err)
	}
}

// each runs fn for every job, at most Parallel at a time, each after a pacer slot; for a Lifted
// backend under lift, one at a time.
func (e *Engine) each(ctx context.Context, jobs []job, fn func(*job) error) {
	sem := make(chan struct{}, e.o.Parallel)
	var wg sync.WaitGroup
	for i := range jobs {
		j := &jobs[i]
		var release func()
		if e.o.Pacer != nil {
			r, err := e.o.Pacer.Wait(ctx)
			if err != nil {
				j.err = err
				continue
			}
			release = r
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if release != nil {
				defer release()
			}
			e.requests.Add(1)
			j.err = fn(j)
		}()
	}
	wg.Wait()
}

// holdBatch holds one batch: the object of each key whose version is not known yet is read (its
// current version is what is held), the intents go on disk, then the holds. It fails only when the
// ledger cannot be written; a request's failure is recorded on its key; statFail counts the keys whose
// object could not be read. Every entry its intents create is marked seen in epoch: the key was found
// protected by this pass, so releaseUnseen must not take it for one the index no longer protects (a
// live `_metadata` is deletable by the guard's own rules, so Decide would let its fresh hold go).
func (e *Engine) holdBatch(ctx context.Context, epoch uint64, batch []job) (statFail int, err error) {
	var unknown []*job
	for i := range batch {
		if batch[i].version == "" {
			unknown = append(unknown, &batch[i])
		}
	}
	stat := make([]job, len(unknown))
	for i, j := range unknown {
		stat[i] = *j
	}
	e.each(ctx, stat, func(j *job) error {
		v, size, err := e.o.Primitive.Stat(ctx, j.key)
		j.version, j.size = v, size
		return err
	})
	for i, j := range unknown {
		*j = stat[i]
	}
	var send []job
	var intents []record
	for _, j := range batch {
		if j.err != nil {
			// Gone (deleted beside the mount: the loss check reports it) or unreadable: nothing to
			// hold yet; the next pass tries again.
			if errors.Is(j.err, fs.ErrNotExist) {
				delete(e.failing, j.key)
				continue
			}
			statFail++
			if !e.failing[j.key] {
				e.failing[j.key] = true
				e.o.Logger.Warn(e.o.Name+": could not read a protected object to hold it; it is not held (retried at every pass, logged again only after it worked once)", "file", j.key, "err", j.err)
			}
			continue
		}
		delete(e.failing, j.key)
		send = append(send, j)
		intents = append(intents, record{Op: "p", Key: j.key, Version: j.version, Size: j.size})
	}
	if len(send) == 0 {
		return statFail, nil
	}
	e.o.Ledger.intend(epoch, intents)
	if err := e.o.Ledger.flush(true); err != nil {
		return statFail, err
	}
	e.each(ctx, send, func(j *job) error {
		// The fleet's record first (never under lift: it is a request to the store): a lease holder
		// reading it after this sees the need. Its failure still sets the hold (the safe side) and
		// retries both at the next pass.
		var nerr error
		if e.o.Fleet != nil {
			if nerr = e.o.Fleet.Need(ctx, j.key, j.version); nerr != nil {
				nerr = fmt.Errorf("record the need in the store's shared holds: %w", nerr)
			}
		}
		if !e.o.Lifted {
			err := e.o.Primitive.Hold(ctx, j.key, j.version)
			if err == nil {
				err = nerr
			}
			e.holdDone(j, err)
			return err
		}
		e.lift.Lock()
		defer e.lift.Unlock()
		err := errSkipped
		if _, touched := e.touched[j.key]; !touched {
			err = e.o.Primitive.Hold(ctx, j.key, j.version)
			if err == nil {
				err = nerr
			}
		}
		e.holdDone(j, err) // under lift: BeforeChange sees the hold as soon as it is set
		return err
	})
	return statFail, e.o.Ledger.flush(false)
}

// holdDone records the answer to a hold.
func (e *Engine) holdDone(j *job, err error) {
	l := e.o.Ledger
	switch {
	case err == nil:
		l.apply(record{Op: "h", Key: j.key, Version: j.version, Size: j.size, At: e.o.Now()})
	case errors.Is(err, errSkipped), errors.Is(err, fs.ErrNotExist):
		// Changed through the mount since the pass's view, or gone (the loss check reports a
		// referenced object deleted beside the mount): nothing held; the next pass looks again.
		l.apply(record{Op: "x", Key: j.key, Version: j.version})
	default:
		e.failed(j, err, "could not hold a protected object")
	}
}

// releaseUnseen releases the holds of the keys the pass did not find protected, where the index's
// decision for an unlink allows the deletion; kept counts those it refuses. With a fleet, a key this
// mount lets go is released only when no mount needs it and this mount holds the sweeper lease; else
// its entry stays Releasing (the mount still lifts it before its own changes) until the lease holder
// releases it, and the lease holder also releases the holds every mount let go (releaseOrphans).
func (e *Engine) releaseUnseen(ctx context.Context, epoch uint64) (kept int, err error) {
	cands := e.o.Ledger.unseen(epoch)
	mayRelease := false
	if e.o.Fleet != nil {
		mayRelease = e.o.Fleet.MayRelease(ctx)
	}
	for i := 0; i < len(cands); i += e.o.Batch {
		batch := cands[i:min(i+e.o.Batch, len(cands))]
		var send []job
		for _, j := range batch {
			if ctx.Err() != nil {
				return kept, ctx.Err()
			}
			if d := e.o.Index.Decide(ctx, j.key, verdict.OpUnlink); !d.Allow {
				kept++
				continue
			}
			if e.o.Fleet != nil && !e.drop(ctx, &j, mayRelease) {
				continue
			}
			send = append(send, j)
		}
		if err := e.release(ctx, send); err != nil {
			return kept, err
		}
	}
	if mayRelease {
		err = e.releaseOrphans(ctx)
	}
	return kept, err
}

// drop tells the fleet this mount no longer needs j's key and reports whether to release it now (at
// the fleet's version). Otherwise the entry waits, Releasing, or goes when the key was released.
func (e *Engine) drop(ctx context.Context, j *job, mayRelease bool) bool {
	release, rec, err := e.o.Fleet.Drop(ctx, j.key, mayRelease && e.o.Fleet.StillMayRelease())
	switch {
	case err != nil:
		e.failed(j, fmt.Errorf("tell the store's shared holds this mount no longer needs it: %w", err), "could not release the hold of an object no longer referenced")
	case release:
		if rec.Version != "" {
			j.version = rec.Version
		}
		return true
	case rec.State == shared.HeldOff:
		e.o.Ledger.apply(record{Op: "x", Key: j.key}) // released by the lease holder
	default:
		if en, ok := e.o.Ledger.Get(j.key); ok && en.State != Releasing {
			e.o.Ledger.apply(record{Op: "r", Key: j.key}) // another mount needs it, or the lease holder releases it
		}
	}
	return false
}

// release writes the intents of send (each key's entry Releasing; a key the ledger does not know, an
// orphan of the fleet, gets one), then releases each and records the outcome.
func (e *Engine) release(ctx context.Context, send []job) error {
	l := e.o.Ledger
	var intents []record
	for _, j := range send {
		if _, ok := l.Get(j.key); !ok {
			intents = append(intents, record{Op: "p", Key: j.key, Version: j.version})
		}
		intents = append(intents, record{Op: "r", Key: j.key})
	}
	l.apply(intents...)
	if err := l.flush(len(send) > 0); err != nil {
		return err
	}
	e.each(ctx, send, func(j *job) error {
		var err error
		lifted := false
		if !e.o.Lifted {
			err = e.o.Primitive.Release(ctx, j.key, j.version)
		} else {
			e.lift.Lock()
			if en, ok := l.Get(j.key); ok && en.State == Releasing {
				err = e.o.Primitive.Release(ctx, j.key, j.version)
			} else {
				lifted = true // the mount lifted it meanwhile (BeforeChange)
			}
			e.lift.Unlock()
		}
		err = e.released(ctx, j, err) // the fleet's record: never under lift
		if !lifted || err != nil {
			e.releaseDone(j, err)
		}
		return err
	})
	return l.flush(false)
}

// released records a release in the fleet (when there is one): a mount that needed the key while it
// was being released gets its hold back at once.
func (e *Engine) released(ctx context.Context, j *job, err error) error {
	if e.o.Fleet == nil || err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	rehold, ferr := e.o.Fleet.Released(ctx, j.key)
	if ferr != nil {
		return fmt.Errorf("released, but the store's shared holds could not record it (the lease holder retries): %w", ferr)
	}
	if rehold {
		if e.o.Lifted {
			e.lift.Lock()
			defer e.lift.Unlock()
		}
		if herr := e.o.Primitive.Hold(ctx, j.key, j.version); herr != nil {
			return fmt.Errorf("another mount needed it while it was released; holding it again failed: %w", herr)
		}
		e.o.Logger.Info(e.o.Name+": another mount needed the object while this one released it; it is held again", "file", j.key)
	}
	return err
}

// releaseOrphans releases, as the lease holder, the holds no mount of the store needs any more (every
// mount let go of it, the last one not the lease holder), where this mount's own rules allow the
// deletion too.
func (e *Engine) releaseOrphans(ctx context.Context) error {
	orphans, listErr := e.o.Fleet.Orphans(ctx)
	if listErr != nil {
		listErr = fmt.Errorf("%s: list the store's shared holds no mount needs: %w", e.o.Name, listErr)
		if len(orphans) == 0 {
			return listErr
		}
	}
	var send []job
	for _, o := range orphans {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !e.o.Fleet.StillMayRelease() {
			break // the lease lapsed: its next holder goes on
		}
		if d := e.o.Index.Decide(ctx, o.Key, verdict.OpUnlink); !d.Allow {
			continue // this mount's rules keep it: it needs it, and says so at its next pass
		}
		ok, version, err := e.o.Fleet.Claim(ctx, o.Key)
		if err != nil {
			e.o.Logger.Warn(e.o.Name+": could not claim a hold no mount needs for release; retried at the next pass", "file", o.Key, "err", err)
			continue
		}
		if ok {
			send = append(send, job{key: o.Key, version: version})
		}
	}
	return errors.Join(e.release(ctx, send), listErr)
}

// releaseDone records the answer to a release.
func (e *Engine) releaseDone(j *job, err error) {
	switch {
	case err == nil, errors.Is(err, fs.ErrNotExist):
		// Released, or the object is gone (it can only have gone after the release): nothing held.
		e.o.Ledger.apply(record{Op: "x", Key: j.key, Version: j.version})
	default:
		e.failed(j, err, "could not release the hold of an object no longer referenced")
	}
}

// keysUnder lists the keys below folder dir ("" is the root: every key).
func (l *Ledger) keysUnder(dir string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k := range l.entries {
		if dir == "" || strings.HasPrefix(k, dir+"/") {
			out = append(out, k)
		}
	}
	return out
}

// beginEpoch starts counting the entries pass epoch finds protected.
func (l *Ledger) beginEpoch(epoch uint64) {
	l.mu.Lock()
	l.curEpoch, l.seenN = epoch, 0
	l.mu.Unlock()
}

// see marks key's entry found protected in epoch and returns a copy of it.
func (l *Ledger) see(key string, epoch uint64) (Entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	en, ok := l.entries[key]
	if !ok {
		return Entry{}, false
	}
	l.markSeen(en, epoch)
	return *en, true
}

func (l *Ledger) markSeen(en *Entry, epoch uint64) {
	if en.seen != epoch {
		en.seen = epoch
		if epoch == l.curEpoch {
			l.seenN++
		}
	}
}

// intend applies intents ("p") and marks their entries seen in epoch, in one step.
func (l *Ledger) intend(epoch uint64, rs []record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rs {
		l.change(r)
		if en, ok := l.entries[r.Key]; ok {
			l.markSeen(en, epoch)
		}
	}
}

// unseen returns the entries pass epoch did not find protected, sorted by key (none without a scan
// while every entry was found).
func (l *Ledger) unseen(epoch uint64) []job {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.curEpoch == epoch && l.seenN >= len(l.entries) {
		return nil
	}
	var out []job
	for _, en := range l.entries {
		if en.seen != epoch {
			out = append(out, job{key: en.Key, version: en.Version})
		}
	}
	sortJobs(out)
	return out
}

func sortJobs(js []job) {
	slices.SortFunc(js, func(a, b job) int { return strings.Compare(a.key, b.key) })
}

// Heal is asked about every referenced object the loss check finds missing; a backend that can bring
// one back wraps the engine (s3hold.Holder). Here nothing is healed: a file deleted beside the mount
// is reported by the loss check as before (a held one cannot be deleted).
func (e *Engine) Heal(context.Context, string, string) (bool, error) { return false, nil }

// failed records a failed hold or release on its entry; the first failure of a run is logged.
func (e *Engine) failed(j *job, err error, what string) {
	if en, ok := e.o.Ledger.Get(j.key); !ok || en.Failures == 0 {
		e.o.Logger.Warn(e.o.Name+": "+what+"; retried at every pass (logged again only after it worked once)", "file", j.key, "version", j.version, "err", err)
	}
	e.o.Ledger.apply(record{Op: "f", Key: j.key, Err: err.Error()})
}

// FleetJoinedName is the file in the status folder that says this mount's needs are all in the
// fleet's record (--shared): written after the first pass with a fleet recorded the need of every
// protected key, including those the ledger held from before (a mount that joins the fleet with holds
// of its own). Until then every pass records every protected key's need.
const FleetJoinedName = "holds-fleet-joined"

func (e *Engine) fleetJoined() bool {
	if e.o.StatusDir == "" {
		return e.joined.Load()
	}
	_, err := os.Stat(filepath.Join(e.o.StatusDir, FleetJoinedName))
	return err == nil
}

func (e *Engine) joinFleet() {
	e.joined.Store(true)
	if e.o.StatusDir == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(e.o.StatusDir, FleetJoinedName), []byte("the need of every key this mount holds is in the store's shared holds\n"), 0o600); err != nil {
		e.o.Logger.Warn(e.o.Name+": could not note that this mount's holds are in the store's shared record; the next start records them again", "err", err)
	}
}

// dropLifted removes this mount's need from the fleet's record of the keys the mount lifted for its
// own changes (BeforeChange) that this pass did not hold again: the mount changed them as its guard
// allowed, so it needs them no more, and a need left behind would keep a later object at the key held
// for good. A failure leaves the need (the safe side); the lease holder never releases a needed key.
func (e *Engine) dropLifted(ctx context.Context, keys []string) {
	for _, k := range keys {
		if _, ok := e.o.Ledger.Get(k); ok {
			continue // protected again: held, and needed, again
		}
		if _, _, err := e.o.Fleet.Drop(ctx, k, false); err != nil {
			e.o.Logger.Warn(e.o.Name+": could not drop this mount's need of a file it changed itself from the store's shared holds; the hold may stay until an operator releases it", "file", k, "err", err)
		}
	}
}
