package shared

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"
)

// LeaseRecord is a lease, leases/<name>: who holds it and its generation (the fencing token: it grows
// by one at every change of holder, so a holder that lost the lease can tell).
type LeaseRecord struct {
	Holder     string    `json:"holder"` // "" when released
	Gen        uint64    `json:"gen"`
	TTLSeconds float64   `json:"ttl_seconds"`
	Renewals   uint64    `json:"renewals"` // grows at each renewal, so the record's version changes
	Renewed    time.Time `json:"renewed"`  // by the holder's clock (for people; expiry never reads it)
}

// Lease is one mount's side of a lease in the shared area: store-wide maintenance (the quarantine's
// TTL purge) runs only while Valid.
//
// Expiry uses no clock but each host's own monotonic one, so clock skew between hosts cannot let two
// hold at once: the holder renews every time it runs Hold (more often than TTL/2) and counts itself
// holding only until TTL/2 after it STARTED its last successful renewal; another host takes over only
// after it has seen the same record version, unrenewed, for a whole TTL (which begins after that
// renewal was written, so after the holder's own deadline by TTL/2). A takeover is a conditional write
// of generation+1 on exactly the version that expired; a holder whose renewal finds another generation
// has lost the lease and stops.
type Lease struct {
	c      CAS
	name   string
	holder string
	ttl    time.Duration

	mu         sync.Mutex
	seenVer    string    // the last version read while not holding
	seenAt     time.Time // when seenVer was first read (local clock)
	held       bool
	gen        uint64
	validUntil time.Time
	other      LeaseRecord // the holder, when not us
}

// NewLease returns holder's side of the lease name with the given TTL.
func NewLease(c CAS, name, holder string, ttl time.Duration) *Lease {
	return &Lease{c: c, name: "leases/" + name, holder: holder, ttl: ttl}
}

// Valid reports whether this side may act now, and the generation it holds.
func (l *Lease) Valid() (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held && time.Now().Before(l.validUntil), l.gen
}

// Holder returns the lease's holder as last read ("" when free or unknown) and its generation.
func (l *Lease) Holder() (string, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held {
		return l.holder, l.gen
	}
	return l.other.Holder, l.other.Gen
}

// Hold renews the lease when this side holds it, takes it when it is free or has expired, and
// reports whether this side holds it now (then Valid for TTL/2 from the call's start).
func (l *Lease) Hold(ctx context.Context) (bool, error) {
	start := time.Now()
	raw, ver, err := Read(ctx, l.c, l.name)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		l.lose()
		return false, err
	}
	var cur LeaseRecord
	if exists {
		if err := json.Unmarshal(raw, &cur); err != nil {
			l.lose()
			return false, fmt.Errorf("lease %s/%s is damaged: %w", l.c.Where(), l.name, err)
		}
	}
	l.mu.Lock()
	mine := l.held && cur.Holder == l.holder && cur.Gen == l.gen
	if !mine {
		if l.held {
			l.held = false // another generation: lost
		}
		if ver != l.seenVer {
			l.seenVer, l.seenAt = ver, start
		}
		l.other = cur
	}
	expired := !exists || cur.Holder == "" || !mine && start.Sub(l.seenAt) >= l.ttl
	myGen := l.gen
	l.mu.Unlock()
	if !mine && !expired {
		return false, nil
	}
	want := cur
	var took LeaseRecord
	_, err = Update(ctx, l.c, l.name, UpdateOptions{Attempts: 3}, func(data []byte, ok bool) ([]byte, error) {
		took = LeaseRecord{} // only the attempt that writes counts
		var now LeaseRecord
		if ok {
			if err := json.Unmarshal(data, &now); err != nil {
				return nil, err
			}
		}
		if mine {
			if now.Holder != l.holder || now.Gen != myGen {
				return nil, ErrNoChange // taken over meanwhile
			}
			now.Renewals++
		} else {
			if ok != exists || now.Holder != want.Holder || now.Gen != want.Gen || now.Renewals != want.Renewals {
				return nil, ErrNoChange // renewed or taken by someone else meanwhile
			}
			now = LeaseRecord{Holder: l.holder, Gen: want.Gen + 1}
		}
		now.TTLSeconds, now.Renewed = l.ttl.Seconds(), time.Now().UTC()
		took = now
		return json.Marshal(now)
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil || took.Holder != l.holder {
		l.held = false
		return false, err
	}
	l.held, l.gen, l.validUntil = true, took.Gen, start.Add(l.ttl/2)
	return true, nil
}

func (l *Lease) lose() {
	l.mu.Lock()
	l.held = false
	l.mu.Unlock()
}

// Release gives the lease up (a clean stop), so another host takes it at its next Hold.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	held, gen := l.held, l.gen
	l.held = false
	l.mu.Unlock()
	if !held {
		return nil
	}
	_, err := Update(ctx, l.c, l.name, UpdateOptions{Attempts: 3}, func(data []byte, ok bool) ([]byte, error) {
		var now LeaseRecord
		if ok {
			if err := json.Unmarshal(data, &now); err != nil {
				return nil, err
			}
		}
		if !ok || now.Holder != l.holder || now.Gen != gen {
			return nil, ErrNoChange
		}
		now.Holder, now.Renewed = "", time.Now().UTC()
		return json.Marshal(now)
	})
	return err
}
