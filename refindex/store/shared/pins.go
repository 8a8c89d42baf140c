package shared

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

// Pin is one pin record, pins/<sha256 of the key, 32 hex digits>. An unpin keeps the record with
// Pinned false (a change is a replace, never a delete), so its history shows who released it.
type Pin struct {
	Key     string    `json:"key"` // the _metadata's store key
	Pinned  bool      `json:"pinned"`
	Since   time.Time `json:"since"`            // when it was pinned (kept while pinned)
	By      string    `json:"by,omitempty"`     // who: user@host, or the mount that moved it
	Why     string    `json:"why,omitempty"`    // the operator's note
	Expires time.Time `json:"expires,omitzero"` // after it the pin no longer protects (zero: never)
	Changed time.Time `json:"changed"`          // the last change, by the writer's clock
	ByHost  string    `json:"host,omitempty"`   // the host of the last change
}

// Active reports whether the pin protects at now.
func (p Pin) Active(now time.Time) bool {
	return p.Pinned && (p.Expires.IsZero() || now.Before(p.Expires))
}

// PinName is the record name of key's pin.
func PinName(key string) string {
	h := sha256.Sum256([]byte(key))
	return "pins/" + hex.EncodeToString(h[:16])
}

// Pins reads and writes the pins of a shared area. Load costs one listing (one request per 1,000
// pins on S3) plus one read per pin record that changed since the last Load (the listing's versions
// say which). Safe for concurrent use.
type Pins struct {
	c    CAS
	host string // this host, recorded with each change
	now  func() time.Time

	cache recordCache[Pin]
}

// NewPins returns the pins of area c; host names this host in the records it writes.
func NewPins(c CAS, host string) *Pins {
	return &Pins{c: c, host: host, now: time.Now}
}

// Where names the area.
func (p *Pins) Where() string { return p.c.Where() }

// List returns every pin record (active, expired and released), read afresh.
func (p *Pins) List(ctx context.Context) ([]Pin, error) { return p.load(ctx) }

func (p *Pins) load(ctx context.Context) ([]Pin, error) {
	return p.cache.load(ctx, p.c, "pins/", func(name string, pin Pin) bool { return pin.Key != "" && PinName(pin.Key) == name },
		func(name string, err error) error {
			return fmt.Errorf("shared pin %s/%s is damaged (%v): move it away and pin again", p.c.Where(), name, err)
		}, true) // a damaged pin is left out and named: its name says the one checkpoint it could pin
}

// DamagedPinsError is Load's error when some pin records could not be read: Load returned the others.
// A pin record is named by the hash of the one _metadata key it pins, so a damaged one leaves only
// that checkpoint unjudged (Covers), never the store's others: anyone who can write the area's prefix
// (on S3 often a Flink job's own credentials) can damage a record.
type DamagedPinsError struct {
	names map[string]bool
	err   error
}

func (e *DamagedPinsError) Error() string { return e.err.Error() }
func (e *DamagedPinsError) Unwrap() error { return e.err }

// Covers reports whether a damaged record may pin key.
func (e *DamagedPinsError) Covers(key string) bool { return e.names[PinName(key)] }

// Load implements refindex.SharedPins: the active pins, key → since. With damaged records it returns
// the readable pins and a *DamagedPinsError.
func (p *Pins) Load(ctx context.Context) (map[string]time.Time, error) {
	pins, err := p.load(ctx)
	var damaged *DamagedPinsError
	if names := skippedNames(err); names != nil {
		damaged = &DamagedPinsError{names: map[string]bool{}, err: err}
		for _, n := range names {
			damaged.names[n] = true
		}
	} else if err != nil {
		return nil, err
	}
	now := p.now()
	out := map[string]time.Time{}
	for _, pin := range pins {
		if pin.Active(now) {
			out[pin.Key] = pin.Since
		}
	}
	if damaged != nil {
		return out, damaged
	}
	return out, nil
}

// Requests is the number of requests the last Load sent.
func (p *Pins) Requests() int { return p.cache.requests() }

// Set implements refindex.SharedPins: pin or unpin key with a note (by whom, for the migration).
func (p *Pins) Set(ctx context.Context, key string, pinned bool, note string) (time.Time, error) {
	pin, err := p.Change(ctx, Pin{Key: key, Pinned: pinned, By: note})
	return pin.Since, err
}

// Change writes want's state for want.Key: pinning keeps an active pin's since, who and why unless
// want sets them (an expiry is replaced); unpinning an unpinned key changes nothing.
func (p *Pins) Change(ctx context.Context, want Pin) (Pin, error) {
	var got Pin
	_, err := Update(ctx, p.c, PinName(want.Key), UpdateOptions{}, func(cur []byte, exists bool) ([]byte, error) {
		now := p.now().UTC().Truncate(time.Second)
		var old Pin
		if exists {
			if err := decodeRecord(cur, &old); err != nil {
				return nil, fmt.Errorf("shared pin of %s is damaged: %w", want.Key, err)
			}
		}
		next := old
		next.Key = want.Key
		switch {
		case want.Pinned && old.Active(now) && want.Why == "" && want.Expires.IsZero() && (want.By == "" || want.By == old.By):
			got = old
			return nil, ErrNoChange // pinned already: the first pin's time and reason stay
		case want.Pinned:
			if !old.Active(now) {
				next.Since = now
				next.By, next.Why = "", ""
			}
			if want.By != "" {
				next.By = want.By
			}
			if want.Why != "" {
				next.Why = want.Why
			}
			next.Expires = want.Expires
		case !old.Pinned:
			got = old
			return nil, ErrNoChange
		default:
			if want.By != "" {
				next.By = want.By
			}
		}
		next.Pinned = want.Pinned
		next.Changed, next.ByHost = now, p.host
		got = next
		return encodeRecord(next)
	})
	if err != nil {
		return Pin{}, fmt.Errorf("pin state of %s in %s: %w", want.Key, p.c.Where(), err)
	}
	return got, nil
}
