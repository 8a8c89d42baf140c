package shared

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Mount is a live mount's heartbeat record, mounts/<id>: each mount writes only its own, after every
// sync (so the record's Heartbeat is at most a sync interval old while the mount runs).
type Mount struct {
	ID      string `json:"id"`
	Host    string `json:"host"`
	Version string `json:"version"`
	Layout  string `json:"layout"` // the shared layout the mount writes (Version)
	// Protocol is what the mount does within Layout (the constant Protocol of its version; 0 in the
	// records of the versions before the field: protocol 1).
	Protocol     int       `json:"protocol,omitempty"`
	Store        string    `json:"store"`
	Mountpoint   string    `json:"mountpoint"`
	Index        string    `json:"index"`
	ReadOnly     bool      `json:"read_only,omitempty"`
	Started      time.Time `json:"started"`
	Heartbeat    time.Time `json:"heartbeat"` // by the mount's clock
	SyncInterval float64   `json:"sync_interval_seconds"`
	LastSync     time.Time `json:"last_sync,omitzero"` // start of the last successful sync
	SyncError    string    `json:"sync_error,omitempty"`
	PinsLoaded   time.Time `json:"pins_loaded,omitzero"` // start of the last successful load of the shared pins
	PinsError    string    `json:"pins_error,omitempty"`
	Refusals1h   int64     `json:"refusals_last_hour"`
	Stopped      bool      `json:"stopped,omitempty"` // unmounted cleanly
}

// Protocol is what this version's mounts do in the layout: 1 pins, the registry and the sweeper
// lease; 2 also claims every quarantine restore (restores/) and records which mount needs each hold
// (holds/). A mount of a lower protocol sharing the store restores without telling the others and
// releases holds the others need: newer mounts name it (Outdated).
const Protocol = 2

// ProtocolOf is m's protocol (1 for a record written before the field).
func ProtocolOf(m Mount) int { return max(m.Protocol, 1) }

// Live reports whether m's mount runs as far as its record says: not stopped, and its heartbeat at
// most two of its sync intervals (plus 10 s) from now, either way: a heartbeat dated further ahead
// comes from a clock that runs ahead, and once that mount dies it would otherwise count as live until
// its clock's date came round (claimAge's rule).
func Live(m Mount, now time.Time) bool {
	interval := time.Duration(m.SyncInterval * float64(time.Second))
	if interval <= 0 {
		interval = 30 * time.Second
	}
	return !m.Stopped && claimAge(m.Heartbeat, now) <= 2*interval+10*time.Second
}

// Outdated says what m, a mount of the registry, does not do that this version's mounts rely on
// ("" when nothing).
func Outdated(m Mount) string {
	switch {
	case m.Layout != Version:
		return fmt.Sprintf("it writes the shared layout %q, this version reads %q only: the two do not see each other's pins, holds or restores", m.Layout, Version)
	case ProtocolOf(m) < Protocol:
		return fmt.Sprintf("it speaks shared protocol %d (this version %d): it does not claim quarantine restores (its restores are not named to other mounts) nor record which holds it needs (with --hold it may release holds other mounts need, and its own can be released under it); upgrade it", ProtocolOf(m), Protocol)
	}
	return ""
}

var badIDChars = regexp.MustCompile(`[^a-z0-9._-]+`)

// MountID is the record id of the mount of host whose index folder is index: a host may run several
// mounts (one per store), each with its own index.
func MountID(host, index string) string {
	h := strings.Trim(badIDChars.ReplaceAllString(strings.ToLower(host), "-"), "-.")
	if h == "" {
		h = "host"
	}
	return h + "-" + strings.TrimPrefix(PinName(index), "pins/")[:12]
}

// Heartbeat writes m as its mount's record.
func Heartbeat(ctx context.Context, c CAS, m Mount) (Result, error) {
	return Update(ctx, c, "mounts/"+m.ID, UpdateOptions{}, func([]byte, bool) ([]byte, error) { return json.Marshal(m) })
}

// Heartbeater writes one mount's record, sparing the read of Update while it knows the record's
// version: only this mount writes its record, so the version it wrote last is the current one unless
// someone moved the record (then the conditional write fails and it falls back to Update). One PUT
// per heartbeat at rest.
type Heartbeater struct {
	c    CAS
	last string // the version this side wrote last ("" unknown)
}

// NewHeartbeater returns a Heartbeater over c.
func NewHeartbeater(c CAS) *Heartbeater { return &Heartbeater{c: c} }

// MountIDTakenError is Beat's answer when another live mount writes the same record: two mounts with
// one id (one host name, one index path), which the fleet's hold records and restore claims cannot
// tell apart. The beat itself was written.
type MountIDTakenError struct {
	ID    string
	Other Mount // the record the other mount wrote
}

func (e *MountIDTakenError) Error() string {
	o := e.Other
	return fmt.Sprintf("another ckguard mount writes this mount's record mounts/%s too (host %s, index %s, started %s): two mounts share one mount id (the same host name and index folder), so the store's hold records cannot tell them apart (a hold one of them needs is released when the other lets it go) nor its restore claims; give the hosts distinct host names or --index folders and restart them",
		e.ID, o.Host, o.Index, o.Started.UTC().Format(time.RFC3339))
}

// Beat writes m. After a conflict on the version this side wrote (someone else wrote the record), a
// record of another live run (another start time) is reported as *MountIDTakenError once m is written.
// The first beat of a run takes its record over silently: it cannot tell another mount from its own
// previous run, killed.
func (h *Heartbeater) Beat(ctx context.Context, m Mount) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	name := "mounts/" + m.ID
	conflict := false
	if h.last != "" {
		env, _ := json.Marshal(Envelope{Format: 1, Writes: []string{newID()}, Data: data})
		v, err := h.c.Put(ctx, name, env, h.last)
		if err == nil {
			h.last = v
			return nil
		}
		h.last = ""
		conflict = errors.Is(err, ErrConflict)
		// Conflict or unknown outcome: Update reads and writes again (a heartbeat twice is harmless).
	}
	var other *Mount
	r, err := Update(ctx, h.c, name, UpdateOptions{}, func(cur []byte, exists bool) ([]byte, error) {
		other = nil
		var o Mount
		if conflict && exists && json.Unmarshal(cur, &o) == nil && !o.Stopped && !o.Started.Equal(m.Started) {
			other = &o
		}
		return data, nil
	})
	if err != nil {
		return err
	}
	h.last = r.Version
	if other != nil {
		return &MountIDTakenError{ID: m.ID, Other: *other}
	}
	return nil
}

// Mounts lists the registry (every record, stopped and stale ones too).
func Mounts(ctx context.Context, c CAS) ([]Mount, error) {
	return readRecords[Mount](ctx, c, "mounts/")
}
