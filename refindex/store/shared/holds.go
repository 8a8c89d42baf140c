package shared

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"
)

// Held is the fleet's record of one held object, holds/<sha256 of the key, 32 hex digits>: which
// mounts need the hold (each adds itself before it sets the hold and removes itself once its own
// rules let the object go) and where the hold stands. A hold is released only by the holder of the
// sweeper lease, only once no mount needs it, and only through State Releasing, so that a mount
// needing it again in the meantime is seen (see Holds).
type Held struct {
	Key     string               `json:"key"`
	Version string               `json:"version,omitempty"` // the version held (S3); "" where the key is held
	Needers map[string]time.Time `json:"needers,omitempty"` // mount id → since
	State   HeldState            `json:"state"`
	By      string               `json:"by"` // the mount of the last change
	Changed time.Time            `json:"changed"`
}

// HeldState is where a fleet hold stands.
type HeldState string

const (
	// HeldOn: held (or about to be, by a needer).
	HeldOn HeldState = "held"
	// HeldReleasing: the lease holder found no needer and is releasing it; a mount that needs it now
	// puts it back to HeldOn, and the releaser then holds it again.
	HeldReleasing HeldState = "releasing"
	// HeldOff: released; nothing of it is held.
	HeldOff HeldState = "released"
)

// HeldName is the record name of key's fleet hold.
func HeldName(key string) string {
	h := sha256.Sum256([]byte(key))
	return "holds/" + hex.EncodeToString(h[:16])
}

// Holds is one mount's side of the fleet's held objects. Every change is one Update of one record
// (exactly once); Orphans lists the records no mount needs, reading only those whose version moved
// since its last call. Safe for concurrent use.
type Holds struct {
	c     CAS
	mount string
	now   func() time.Time

	cache recordCache[Held]
}

// NewHolds returns mount's side of the fleet holds in area c.
func NewHolds(c CAS, mount string) *Holds {
	return &Holds{c: c, mount: mount, now: time.Now}
}

// Where names the area.
func (h *Holds) Where() string { return h.c.Where() }

func (h *Holds) update(ctx context.Context, key string, fn func(r *Held, exists bool) error) (Held, error) {
	var got Held
	_, err := Update(ctx, h.c, HeldName(key), UpdateOptions{}, func(cur []byte, exists bool) ([]byte, error) {
		var r Held
		if exists {
			if err := decodeRecord(cur, &r); err != nil {
				return nil, fmt.Errorf("fleet hold record of %s is damaged: %w", key, err)
			}
		}
		if r.Needers == nil {
			r.Needers = map[string]time.Time{}
		}
		r.Key = key
		if err := fn(&r, exists); err != nil {
			got = r
			return nil, err
		}
		r.By, r.Changed = h.mount, h.now().UTC()
		got = r
		return encodeRecord(r)
	})
	if err != nil && !errors.Is(err, ErrNoChange) {
		return got, fmt.Errorf("fleet hold of %s in %s: %w", key, h.c.Where(), err)
	}
	return got, nil
}

// Need records that this mount needs key (at version) held. It is called before the hold is set: a
// releaser that reads the record afterwards sees the need.
func (h *Holds) Need(ctx context.Context, key, version string) error {
	_, err := h.update(ctx, key, func(r *Held, exists bool) error {
		if _, ok := r.Needers[h.mount]; ok && r.State == HeldOn {
			return ErrNoChange
		}
		r.Needers[h.mount] = h.now().UTC()
		if r.State != HeldOn || r.Version == "" {
			r.Version = version
		}
		r.State = HeldOn
		return nil
	})
	return err
}

// Drop records that this mount no longer needs key. release is true when no mount needs it any more
// and mayRelease (this mount holds the sweeper lease): the record is then HeldReleasing, rec.Version
// is what to release, and the caller releases it and calls Released. Otherwise the hold stays for the
// mounts that need it, or for the lease holder (Orphans); rec.State HeldOff: it was released already.
func (h *Holds) Drop(ctx context.Context, key string, mayRelease bool) (release bool, rec Held, err error) {
	got, err := h.update(ctx, key, func(r *Held, exists bool) error {
		_, mine := r.Needers[h.mount]
		delete(r.Needers, h.mount)
		if len(r.Needers) == 0 && mayRelease && r.State == HeldOn {
			r.State = HeldReleasing
			return nil
		}
		if !mine {
			return ErrNoChange
		}
		return nil
	})
	if err != nil {
		return false, got, err
	}
	return got.State == HeldReleasing && len(got.Needers) == 0 && got.By == h.mount && mayRelease, got, nil
}

// Claim moves a record no mount needs to HeldReleasing for the lease holder (Orphans' records):
// release is false when a mount needs it again (or it is released already).
func (h *Holds) Claim(ctx context.Context, key string) (release bool, version string, err error) {
	claimed := false
	got, err := h.update(ctx, key, func(r *Held, exists bool) error {
		claimed = false
		if !exists || len(r.Needers) > 0 || r.State == HeldOff {
			return ErrNoChange
		}
		r.State = HeldReleasing
		claimed = true
		return nil
	})
	if err != nil {
		return false, "", err
	}
	return claimed, got.Version, nil
}

// Released records that the caller released key's hold. rehold is true when a mount needed it again
// while it was being released: the caller must set the hold again (it stays HeldOn).
func (h *Holds) Released(ctx context.Context, key string) (rehold bool, err error) {
	got, err := h.update(ctx, key, func(r *Held, exists bool) error {
		if r.State != HeldReleasing || len(r.Needers) > 0 {
			return ErrNoChange
		}
		r.State = HeldOff
		return nil
	})
	if err != nil {
		return false, err
	}
	return got.State == HeldOn && len(got.Needers) > 0, nil
}

// Orphans returns the records held (or left releasing by a crash) that no mount needs: what the
// lease holder releases. It costs one listing (one request per 1,000 records on S3) plus one read
// per record whose version changed since the last call.
//
// A damaged record (one that does not decode, or whose key is not the one it is named by) refuses
// only its own release: it is left out, its object stays held, and the error returned beside the
// other orphans names it (wrapping *DamagedError). The listing's own failure returns no orphans.
func (h *Holds) Orphans(ctx context.Context) ([]Held, error) {
	recs, err := h.cache.load(ctx, h.c, "holds/", func(name string, r Held) bool { return r.Key != "" && HeldName(r.Key) == name },
		func(name string, err error) error {
			if err == nil {
				err = errors.New("its key is not the one it is named by")
			}
			return &DamagedError{Record: h.c.Where() + "/" + name, Err: fmt.Errorf("fleet hold record: %w; its object stays held: the next pass of a mount that needs it writes it again", err)}
		}, true)
	if recs == nil && err != nil {
		return nil, err
	}
	var out []Held
	for _, r := range recs {
		if len(r.Needers) == 0 && r.State != HeldOff {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, err
}

// Get returns key's fleet hold record (false: none).
func (h *Holds) Get(ctx context.Context, key string) (Held, bool, error) {
	return readRecord[Held](ctx, h.c, HeldName(key))
}
