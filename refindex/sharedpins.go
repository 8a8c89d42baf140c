package refindex

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// SharedPins is where the pins live when several mounts share the store (package shared): every
// mount's sync loads them, so a pin made on any host protects on every host from its next sync.
// The index keeps what it loaded as its pins (derived, like everything else in it); pins.json then
// only holds pins made before the store had a shared area, moved there once by the first sync.
type SharedPins interface {
	// Load returns the fleet's current pins (unexpired), _metadata key → since.
	Load(ctx context.Context) (map[string]time.Time, error)
	// Set pins (true) or unpins key in the shared area; since is the pin's time (an existing pin's,
	// or now).
	Set(ctx context.Context, key string, pinned bool, note string) (since time.Time, err error)
	// Where names the area in messages.
	Where() string
}

// PartialPins is the error a SharedPins.Load returns beside the pins it could read when some pin
// records could not be: Covers reports the _metadata keys an unread record may pin. Only those
// checkpoints stay unretired; the others are judged by the pins read.
type PartialPins interface {
	error
	Covers(key string) bool
}

// ErrSharedReadOnly is what a read-only SharedPins (an observer mount, --shared-read-only) answers to
// Set: the index then keeps its local pins beside the shared ones instead of moving them.
var ErrSharedReadOnly = errors.New("this mount only observes the store's shared state (--shared-read-only): pin and unpin through a mount or a host with write access to it")

// WithSharedPins makes the index take its pins from the shared area of the store (see SharedPins).
// Until a load succeeds, and while the last one failed, no checkpoint is retired (a pin made on
// another host may protect it); everything else is decided as usual.
func WithSharedPins(p SharedPins) Option { return func(o *options) { o.sharedPins = p } }

// sharedPinsState is kept under Index.mu (mu.shared).
type sharedPinsState struct {
	loaded bool      // a Load succeeded once
	err    string    // the last Load's error ("" when it succeeded)
	at     time.Time // when the last successful Load started
	seq    uint64    // bumped by every Pin and Unpin: a Load started before one is not installed over it
	// partial: the last Load could not read some pin records; the checkpoints they may pin are not
	// retired (view.pinUnknown).
	partial PartialPins
}

// SharedPinsStatus is what the last load of the shared pins found (for the fleet view and metrics).
type SharedPinsStatus struct {
	Enabled  bool      `json:"enabled"`
	Loaded   time.Time `json:"loaded,omitzero"` // start of the last successful load
	Error    string    `json:"error,omitempty"`
	Pins     int       `json:"pins"`
	Where    string    `json:"where,omitempty"`
	Migrated int       `json:"migrated,omitempty"`
}

// SharedPinsStatus reports the shared pins' state.
func (ix *Index) SharedPinsStatus() SharedPinsStatus {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	s := SharedPinsStatus{Enabled: ix.opt.sharedPins != nil, Loaded: ix.mu.shared.at, Error: ix.mu.shared.err, Pins: len(ix.mu.pins)}
	if s.Error == "" && ix.mu.shared.partial != nil {
		s.Error = ix.mu.shared.partial.Error()
	}
	if ix.opt.sharedPins != nil {
		s.Where = ix.opt.sharedPins.Where()
	}
	return s
}

// loadSharedPins replaces the index's pins by the shared area's (syncMu held). Local pins (pins.json,
// written before the area was used) are moved there first, once: each is set in the area, then the
// file is emptied; a crash between leaves them in both, and the next sync sets them again (no change).
func (ix *Index) loadSharedPins(ctx context.Context) {
	src := ix.opt.sharedPins
	if src == nil {
		return
	}
	started := time.Now()
	ix.mu.RLock()
	seq := ix.mu.shared.seq
	ix.mu.RUnlock()
	err := ix.migrateLocalPins(ctx, src)
	var local map[string]time.Time
	if errors.Is(err, ErrSharedReadOnly) {
		// An observer cannot move them: they keep protecting here, beside the shared ones.
		local, err = ix.readPinsFile()
	}
	var pins map[string]time.Time
	var partial PartialPins
	if err == nil {
		pins, err = src.Load(ctx)
		if errors.As(err, &partial) && pins != nil {
			err = nil // the damaged records refuse only the checkpoints they may pin (view.pinUnknown)
		} else {
			partial = nil
		}
	}
	for k, t := range local {
		if _, ok := pins[k]; !ok && pins != nil {
			pins[k] = t
		}
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err != nil {
		if ix.mu.shared.err == "" {
			ix.log.Error("cannot read the shared pins; no checkpoint is retired until they are read (a pin made on another host may protect it)", "area", src.Where(), "err", err)
		}
		ix.mu.shared.err = err.Error()
		return
	}
	if ix.mu.shared.err != "" {
		ix.log.Info("shared pins read again", "area", src.Where(), "pins", len(pins))
	}
	if partial != nil && (ix.mu.shared.partial == nil || ix.mu.shared.partial.Error() != partial.Error()) {
		ix.log.Error("some shared pin records cannot be read; the checkpoints they may pin are not retired, all others are judged by the pins read", "area", src.Where(), "err", partial)
	}
	if ix.mu.shared.seq != seq {
		// A Pin or Unpin of this index ran during the Load, which may not show it: keep the pins it
		// installed; the next sync loads both.
		ix.mu.shared.err = ""
		return
	}
	ix.mu.shared = sharedPinsState{loaded: true, at: started, seq: seq, partial: partial}
	ix.mu.pins = pins
}

// migrateLocalPins moves the pins of pins.json into the shared area (see loadSharedPins).
func (ix *Index) migrateLocalPins(ctx context.Context, src SharedPins) error {
	local, err := ix.readPinsFile()
	if err != nil || len(local) == 0 {
		return err
	}
	for k := range local {
		if _, err := src.Set(ctx, k, true, "moved from the local pins of index "+ix.dir); err != nil {
			if errors.Is(err, ErrSharedReadOnly) {
				return err
			}
			return fmt.Errorf("move the local pin of %s into the shared area %s: %w", k, src.Where(), err)
		}
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if err := ix.savePins(map[string]time.Time{}); err != nil {
		return fmt.Errorf("empty the local pins after moving them into the shared area: %w", err)
	}
	ix.log.Info("moved the local pins into the shared area (once: pins live there from now on)", "pins", len(local), "from", ix.dir, "area", src.Where(), "keys", fmt.Sprint(sortedKeys(local)))
	return nil
}

func sortedKeys(m map[string]time.Time) []string {
	ks := make([]string, 0, len(m))
	for k := range maps.Keys(m) {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// sharedPinsUnknown says why the pins cannot be judged now ("" when they can): shared pins on and
// not loaded, or the last load failed. A view copies it (view.pinsUnknown).
func (ix *Index) sharedPinsUnknownLocked() string {
	if ix.opt.sharedPins == nil {
		return ""
	}
	if ix.mu.shared.err != "" {
		return "the shared pins cannot be read (" + ix.mu.shared.err + ")"
	}
	if !ix.mu.shared.loaded {
		return "the shared pins have not been read yet"
	}
	return ""
}

// pinUnknown says why k's pins cannot be judged ("" when they can): the shared pins as a whole (not
// read yet, the last load failed), or a damaged pin record that may be k's.
func (v *view) pinUnknown(k string) string {
	if v.pinsUnknown != "" {
		return v.pinsUnknown
	}
	if v.pinsPartial != nil && v.pinsPartial.Covers(k) {
		return "its shared pin record cannot be read (" + v.pinsPartial.Error() + ")"
	}
	return ""
}
