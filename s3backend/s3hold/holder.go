// Package s3hold is the S3 mount's second line of defence outside the mount: a legal hold (S3 Object
// Lock) on the current version of every object a live checkpoint or savepoint references and on every
// live `_metadata`, released once the guard's own rules would let the object be deleted, and the
// healing of a delete marker a client beside the mount put on a held object.
//
// A held version cannot be deleted by its version id, by any client or lifecycle rule. A delete
// without a version id still adds a delete marker above it (readers such as Flink then see the object
// as gone): the loss check finds it and Heal removes the marker, so the held version is current again.
//
// # When a reference is held
//
// Holds follow the index: after each successful sync the reconciler (Pass) compares the keys the index
// counts as protected (refindex.Index.ProtectedKeys) with the ledger and sends the missing holds. So a
// reference is held at the latest one reconciliation pass after the sync that learned it. Until then
// the mount's own decision protects it (a deletion through the mount is refused from the moment the
// sync commits, and a young unreferenced file is protected for --grace before it); what the window
// leaves open is a deletion beside the mount in that time, which the loss check reports as before.
// The mount's decisions never wait for a hold: a hold is a second, server-side line of defence.
//
// # When a hold is released
//
// A held key the index no longer counts as protected is judged by the index's own decision for an
// unlink (no live reference, not pinned, past grace, index fresh): only when it allows the deletion is
// the hold released. A stale or failed index refuses, so holds stay while the index cannot judge.
//
// # Crash safety
//
// The Ledger is written ahead of every request (see Ledger); both requests are idempotent on the
// server, so a pass after a crash completes what the crashed one began.
package s3hold

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// Server is what holds need of the bucket (*s3client.Client is one). Keys are store keys.
type Server interface {
	Head(ctx context.Context, rel string) (s3client.Object, error)
	SetLegalHold(ctx context.Context, rel, versionID string, on bool) error
	Versions(ctx context.Context, rel string) ([]s3client.Version, error)
	DeleteVersion(ctx context.Context, rel, versionID string) error
}

// Index is what holds need of the reference index (*refindex.Index is one).
type Index interface {
	ProtectedKeys(ctx context.Context, fn func(key string, kind refindex.ProtectedKind) bool) error
	Decide(ctx context.Context, p string, op verdict.Op, seen ...store.ObjectInfo) verdict.Decision
}

// Defaults of Options.
const (
	DefaultBatch    = 64
	DefaultParallel = 8
)

// Options configure a Holder.
type Options struct {
	Server Server
	Index  Index
	Ledger *Ledger
	// Pacer, when set, is waited on before every request (the loss check's limiter: holds share its
	// request budget).
	Pacer refindex.Pacer
	// Batch is the keys whose intents are written (and synced) at once before their requests go out
	// (0: DefaultBatch); Parallel bounds the requests in flight (0: DefaultParallel).
	Batch, Parallel int
	Audit           audit.Sink
	Logger          *slog.Logger
	Now             func() time.Time
	// Mode and Note are shown in Status ("required" or "best-effort"; Note: why holds are off).
	Mode string
	Note string
	// Inactive: the server cannot hold (best-effort without Object Lock): Pass does nothing.
	Inactive bool
	// StatusDir, when set, receives the Status after every pass and heal (WriteStatus).
	StatusDir string
}

// Status is what `ckguard hold status` and `stats` show.
type Status struct {
	Mode   string `json:"mode"`
	Active bool   `json:"active"`
	Note   string `json:"note,omitempty"`
	// Held: keys the server answered the hold for; HeldBytes their sizes.
	Held      int   `json:"held_objects"`
	HeldBytes int64 `json:"held_bytes"`
	// Pending: keys whose hold was announced and not answered yet (or failed and retried);
	// Releasing the same for release.
	Pending   int `json:"pending"`
	Releasing int `json:"releasing"`
	// Failed: keys whose last hold or release attempt failed (they are retried every pass).
	Failed int `json:"failed"`
	// Kept: held keys no longer referenced that the guard's rules still protect (grace, pins, a stale
	// index); Directories: file-merging directory handles, which no hold covers.
	Kept        int       `json:"kept"`
	Directories int       `json:"unheld_directories"`
	Healed      int64     `json:"healed_total"`
	LastPass    time.Time `json:"last_pass,omitzero"`
	LastTook    string    `json:"last_took,omitempty"`
	LastErr     string    `json:"last_error,omitempty"`
	Requests    int64     `json:"requests_total"`
}

// Holder keeps the holds in line with the index.
type Holder struct {
	o Options

	pass  sync.Mutex // one pass at a time
	mu    sync.Mutex // the ledger and st
	epoch uint64
	st    Status

	healed   atomic.Int64
	requests atomic.Int64
	kick     chan struct{}

	// The last pass that left nothing to do (every protected key held, nothing to release or kept by
	// the rules, no failure), under mu: a pass with the same index version skips the scan.
	settled    bool
	settledVer uint64
	settledAt  time.Time
}

// versionedIndex is an Index that names the state of its protected set (*refindex.Index is one).
type versionedIndex interface {
	ProtectedVersion() uint64
}

// fullPassEvery bounds how long passes are skipped on an unchanged index: a full scan at least this
// often, whatever the version says.
const fullPassEvery = 10 * time.Minute

// New returns a Holder.
func New(o Options) *Holder {
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	if o.Parallel <= 0 {
		o.Parallel = DefaultParallel
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	h := &Holder{o: o, kick: make(chan struct{}, 1)}
	h.st = Status{Mode: o.Mode, Active: !o.Inactive, Note: o.Note}
	h.mu.Lock()
	h.count()
	h.writeStatus()
	h.mu.Unlock()
	return h
}

// Status returns the figures of the ledger and the last pass.
func (h *Holder) Status() Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.st
	s.Healed = h.healed.Load()
	s.Requests = h.requests.Load()
	return s
}

// count refreshes the ledger's figures in st (under mu).
func (h *Holder) count() {
	if h.o.Ledger == nil {
		return
	}
	s := &h.st
	s.Held, s.HeldBytes, s.Pending, s.Releasing, s.Failed = 0, 0, 0, 0, 0
	for _, e := range h.o.Ledger.entries {
		switch e.State {
		case Held:
			s.Held++
			s.HeldBytes += e.Size
		case Pending:
			s.Pending++
		case Releasing:
			s.Releasing++
		}
		if e.Failures > 0 {
			s.Failed++
		}
	}
}

// Kick asks for a pass (after a successful sync); Run's loop takes it. A kick while a pass runs asks
// for one more after it.
func (h *Holder) Kick() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Run runs a pass per Kick until ctx ends.
func (h *Holder) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
		}
		if err := h.Pass(ctx); err != nil && ctx.Err() == nil {
			h.o.Logger.Warn("legal holds: a reconciliation pass failed; it is retried after the next sync", "err", err)
		}
	}
}

type job struct {
	key, version string
	size         int64
	err          error
}

// Pass brings the server's holds in line with the index once: holds for every protected key the
// ledger does not hold, then releases for every held key the index no longer protects and the guard's
// rules would let be deleted. When the protected keys cannot be read, nothing is released.
func (h *Holder) Pass(ctx context.Context) error {
	if h.o.Inactive {
		return nil
	}
	h.pass.Lock()
	defer h.pass.Unlock()
	t0 := h.o.Now()
	var ver uint64
	vi, versioned := h.o.Index.(versionedIndex)
	if versioned {
		ver = vi.ProtectedVersion() // before the scan (see refindex.Index.ProtectedVersion)
	}
	h.mu.Lock()
	if versioned && h.settled && ver == h.settledVer && t0.Sub(h.settledAt) < fullPassEvery {
		// Nothing changed since a pass that left nothing to do: the same scan would find nothing.
		h.st.LastPass, h.st.LastTook = t0, "0s (index unchanged)"
		h.mu.Unlock()
		return nil
	}
	h.settled = false
	h.epoch++
	epoch := h.epoch
	h.mu.Unlock()
	var todo []job
	dirs := 0
	err := h.o.Index.ProtectedKeys(ctx, func(k string, kind refindex.ProtectedKind) bool {
		if kind == refindex.ProtectedDirectory {
			dirs++
			return true
		}
		h.mu.Lock()
		e := h.o.Ledger.Get(k)
		if e != nil {
			e.seen = epoch
		}
		h.mu.Unlock()
		switch {
		case e == nil:
			todo = append(todo, job{key: k})
		case e.State != Held:
			// Pending (a crash, a failure) or Releasing (protected again): ON for the recorded version.
			todo = append(todo, job{key: k, version: e.Version, size: e.Size})
		}
		return true
	})
	if err != nil {
		h.finish(t0, dirs, -1, err)
		return fmt.Errorf("legal holds: read the protected keys from the index: %w", err)
	}
	var firstErr error
	for i := 0; i < len(todo); i += h.o.Batch {
		if err := h.holdBatch(ctx, epoch, todo[i:min(i+h.o.Batch, len(todo))]); err != nil {
			firstErr = err
			break // the ledger cannot be written: send no more requests
		}
	}
	kept := 0
	if firstErr == nil {
		kept, firstErr = h.releaseUnseen(ctx, epoch)
	}
	h.finish(t0, dirs, kept, firstErr)
	if versioned && firstErr == nil && kept == 0 {
		h.mu.Lock()
		settled := h.st.Pending == 0 && h.st.Releasing == 0 && h.st.Failed == 0
		for _, j := range todo {
			if e := h.o.Ledger.Get(j.key); e == nil || e.State != Held {
				settled = false // gone (the loss check reports it) or refused: the next pass tries again
				break
			}
		}
		h.settled, h.settledVer, h.settledAt = settled, ver, t0
		h.mu.Unlock()
	}
	return firstErr
}

func (h *Holder) finish(t0 time.Time, dirs, kept int, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count()
	h.st.LastPass, h.st.LastTook, h.st.Directories = h.o.Now(), h.o.Now().Sub(t0).Round(time.Millisecond).String(), dirs
	if kept >= 0 {
		h.st.Kept = kept
	}
	h.st.LastErr = ""
	if err != nil {
		h.st.LastErr = err.Error()
	}
	h.writeStatus()
}

// writeStatus writes the status for the commands (under mu).
func (h *Holder) writeStatus() {
	if h.o.StatusDir == "" {
		return
	}
	s := h.st
	s.Healed, s.Requests = h.healed.Load(), h.requests.Load()
	if err := WriteStatus(h.o.StatusDir, s); err != nil {
		h.o.Logger.Warn("legal holds: could not write the status file for `ckguard hold status`", "dir", h.o.StatusDir, "err", err)
	}
}

// each runs fn for every job, at most Parallel at a time, each after a pacer slot.
func (h *Holder) each(ctx context.Context, jobs []job, fn func(*job) error) {
	sem := make(chan struct{}, h.o.Parallel)
	var wg sync.WaitGroup
	for i := range jobs {
		j := &jobs[i]
		var release func()
		if h.o.Pacer != nil {
			r, err := h.o.Pacer.Wait(ctx)
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
			h.requests.Add(1)
			j.err = fn(j)
		}()
	}
	wg.Wait()
}

// holdBatch holds one batch: a HEAD for each key whose version is not known yet (the current version
// is what is held), the intents on disk, then the holds. It fails only when the ledger cannot be
// written; a request's failure is recorded on its key. Every entry its intents create is marked seen
// in epoch: the key was found protected by this pass, so releaseUnseen must not take it for one the
// index no longer protects (a live `_metadata` is deletable by the guard's own rules, so Decide would
// let its fresh hold be released at once).
func (h *Holder) holdBatch(ctx context.Context, epoch uint64, batch []job) error {
	var unknown []job
	for _, j := range batch {
		if j.version == "" {
			unknown = append(unknown, j)
		}
	}
	h.each(ctx, unknown, func(j *job) error {
		o, err := h.o.Server.Head(ctx, j.key)
		if err == nil && o.VersionID == "" {
			err = fmt.Errorf("HEAD %s answered no version id: the bucket is not versioned, no hold is possible", j.key)
		}
		j.version, j.size = o.VersionID, o.Size
		return err
	})
	heads := map[string]job{}
	for _, j := range unknown {
		heads[j.key] = j
	}
	var send []job
	var intents []record
	for _, j := range batch {
		if u, ok := heads[j.key]; ok {
			j = u
		}
		if j.err != nil {
			// Gone (deleted beside the mount: the loss check reports it) or a failed HEAD: nothing to
			// hold yet; the next pass tries again.
			if !errors.Is(j.err, fs.ErrNotExist) {
				h.o.Logger.Warn("legal holds: could not read the current version of a protected object; it is not held yet", "file", j.key, "err", j.err)
			}
			continue
		}
		send = append(send, j)
		intents = append(intents, record{Op: "p", Key: j.key, Version: j.version, Size: j.size})
	}
	if len(send) == 0 {
		return nil
	}
	h.mu.Lock()
	err := h.o.Ledger.write(true, intents...)
	for _, j := range send {
		if e := h.o.Ledger.Get(j.key); e != nil {
			e.seen = epoch
		}
	}
	h.mu.Unlock()
	if err != nil {
		return err
	}
	h.each(ctx, send, func(j *job) error { return h.o.Server.SetLegalHold(ctx, j.key, j.version, true) })
	now := h.o.Now()
	var done []record
	for _, j := range send {
		if j.err != nil {
			h.o.Logger.Warn("legal holds: the server refused the hold of a protected object; retried at the next pass", "file", j.key, "version", j.version, "err", j.err)
			done = append(done, record{Op: "f", Key: j.key, Err: j.err.Error()})
			continue
		}
		done = append(done, record{Op: "h", Key: j.key, Version: j.version, Size: j.size, At: now})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.o.Ledger.write(false, done...)
}

// releaseUnseen releases the holds of the keys the pass did not find protected, where the index's
// decision for an unlink allows the deletion; kept counts those it refuses.
func (h *Holder) releaseUnseen(ctx context.Context, epoch uint64) (kept int, err error) {
	h.mu.Lock()
	var cands []job
	for _, e := range h.o.Ledger.entries {
		if e.seen != epoch {
			cands = append(cands, job{key: e.Key, version: e.Version})
		}
	}
	h.mu.Unlock()
	for i := 0; i < len(cands); i += h.o.Batch {
		batch := cands[i:min(i+h.o.Batch, len(cands))]
		var send []job
		var intents []record
		for _, j := range batch {
			d := h.o.Index.Decide(ctx, j.key, verdict.OpUnlink)
			if !d.Allow {
				kept++
				continue
			}
			send = append(send, j)
			intents = append(intents, record{Op: "r", Key: j.key})
		}
		if len(send) == 0 {
			continue
		}
		h.mu.Lock()
		err := h.o.Ledger.write(true, intents...)
		h.mu.Unlock()
		if err != nil {
			return kept, err
		}
		h.each(ctx, send, func(j *job) error { return h.o.Server.SetLegalHold(ctx, j.key, j.version, false) })
		var done []record
		for _, j := range send {
			switch {
			case j.err == nil, errors.Is(j.err, fs.ErrNotExist):
				// Released, or the version is gone (it can only have gone after an OFF): nothing held.
				done = append(done, record{Op: "x", Key: j.key, Version: j.version})
			default:
				h.o.Logger.Warn("legal holds: the server refused to release the hold of an object no longer referenced; retried at the next pass", "file", j.key, "version", j.version, "err", j.err)
				done = append(done, record{Op: "f", Key: j.key, Err: j.err.Error()})
			}
		}
		h.mu.Lock()
		err = h.o.Ledger.write(false, done...)
		h.mu.Unlock()
		if err != nil {
			return kept, err
		}
	}
	return kept, nil
}

// Audit vocabulary of a heal.
const (
	HealOp       = "hold-heal"
	HealDecision = "healed"
	HealReason   = "delete-marker-removed"
)

// Heal brings back a held object a delete marker hides: it removes the delete markers above the
// newest object version (by their version ids), so that version (the held one, which the server kept)
// is current again. It does nothing for a key the ledger does not hold. healed is whether a marker was
// removed; each heal is audited.
func (h *Holder) Heal(ctx context.Context, key, checkpoint string) (healed bool, err error) {
	return h.heal(ctx, key, func(marker, held string) string {
		return fmt.Sprintf("referenced object %s of live checkpoint %s was deleted beside the mount (delete marker %s); the held version %s is current again (the marker was removed)", key, checkpoint, marker, held)
	}, checkpoint)
}

// GuardRetire is the index's RetireGuard: a held `_metadata` a sync found gone is brought back (its
// delete markers removed, as Heal does) before it is retired, when the guard's own rules would have
// refused its deletion through the mount: pinned, a protected savepoint, a --protect glob, or the
// newest checkpoint of an active job while no newer checkpoint of that job arrives in the same sync
// (one that does is Flink subsuming it: retired as before, so Flink's retention is not undone). Its
// files' holds then stay, since the checkpoint stays live.
func (h *Holder) GuardRetire(ctx context.Context, gone, incoming []string) {
	if h.o.Inactive {
		return
	}
	newer := map[string]bool{} // job folders with a checkpoint arriving in this sync
	for _, k := range incoming {
		newer[jobOf(k)] = true
	}
	for _, k := range gone {
		h.mu.Lock()
		e := h.o.Ledger.Get(k)
		held := e != nil && e.State == Held
		h.mu.Unlock()
		if !held {
			continue
		}
		d := h.o.Index.Decide(ctx, k, verdict.OpUnlink)
		switch d.Reason {
		case verdict.ReasonPinned, verdict.ReasonProtectedSavepoint, verdict.ReasonProtectGlob:
		case verdict.ReasonProtectedMetadata:
			if newer[jobOf(k)] {
				continue
			}
		default:
			continue // the rules would have let it go through the mount: retired as before
		}
		why := d.Message
		if _, err := h.heal(ctx, k, func(marker, held string) string {
			return fmt.Sprintf("live checkpoint %s: its _metadata was deleted beside the mount (delete marker %s), but the guard's rules protect it (%s); the held version %s is current again (the marker was removed), so the checkpoint stays live", k, marker, why, held)
		}, k); err != nil && ctx.Err() == nil {
			h.o.Logger.Warn("legal holds: could not bring back a protected _metadata deleted beside the mount; the sync retires it", "file", k, "err", err)
		}
	}
}

// jobOf is the job folder of a checkpoint's `_metadata` key (job/chk-N/_metadata → job).
func jobOf(meta string) string { return path.Dir(path.Dir(meta)) }

// heal removes the delete markers above key's held version; msg words the audit record and log line.
func (h *Holder) heal(ctx context.Context, key string, msgf func(marker, held string) string, checkpoint string) (healed bool, err error) {
	if h.o.Inactive {
		return false, nil
	}
	h.mu.Lock()
	e := h.o.Ledger.Get(key)
	var held string
	if e != nil && e.State != Releasing {
		held = e.Version
	}
	h.mu.Unlock()
	if held == "" {
		return false, nil
	}
	h.requests.Add(1)
	vs, err := h.o.Server.Versions(ctx, key)
	if err != nil {
		return false, fmt.Errorf("heal %s: %w", key, err)
	}
	// Newest first: the markers on top, down to the first object version.
	var markers []string
	found := false
	for _, v := range vs {
		if !v.DeleteMarker {
			found = v.VersionID == held
			break
		}
		markers = append(markers, v.VersionID)
	}
	if len(markers) == 0 {
		return false, nil
	}
	if !found {
		// A newer version than the held one lies below the markers: removing them would make another
		// object current than the one the checkpoint referenced when the hold was set. Leave it to the
		// operator (the loss check keeps reporting the key).
		h.o.Logger.Warn("legal holds: a referenced object is hidden by a delete marker, but the newest version below it is not the held one; not healed", "file", key, "held_version", held)
		return false, nil
	}
	for _, m := range markers {
		h.requests.Add(1)
		if err := h.o.Server.DeleteVersion(ctx, key, m); err != nil {
			return healed, fmt.Errorf("heal %s: remove delete marker %s: %w", key, m, err)
		}
		healed = true
		msg := msgf(m, held)
		h.o.Logger.Warn(msg, "file", key, "checkpoint", checkpoint, "delete_marker", m, "version", held)
		if h.o.Audit != nil {
			rec := audit.Record{Time: h.o.Now(), Op: HealOp, Decision: HealDecision, Reason: HealReason, Message: msg, Referencing: []string{checkpoint}, RefCount: 1}
			rec.SetNames(key, "")
			if err := h.o.Audit.Record(&rec); err != nil {
				h.o.Logger.Error("audit record of a heal not written", "file", key, "err", err)
			}
		}
	}
	h.healed.Add(1)
	h.mu.Lock()
	h.writeStatus()
	h.mu.Unlock()
	return healed, nil
}
