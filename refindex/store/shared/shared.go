// Package shared is the state several ckguard mounts of one store share through the store itself:
// the decisions people make (pins), the registry of live mounts and the leases of store-wide
// maintenance. It lives in the folder Dir (".ckguard") at the store root, versioned below it
// (Dir+"/v1/..."), hidden by every mount and skipped by every walk like the quarantine folder
// (store.InQuarantine covers both).
//
// Every change is a compare-and-swap of one named record through the CAS interface: a conditional
// PutObject on S3 (If-None-Match: * to create, If-Match: <etag> to replace), an exclusive link(2) of
// the next generation's file on a local or NFS store (local.go). Update wraps one change in the
// protocol that makes it exactly-once over a CAS whose answers can be lost:
//
//   - read the record (its data and version), compute the new data, write it conditionally on the
//     version read;
//   - the record's envelope carries the ids of its last writes (Envelope.Writes); every attempt of one
//     Update gets a fresh id, and all of them are remembered;
//   - a conflict or an error whose outcome is unknown (a timeout, a 503 after the server committed, a
//     retried PUT answered 412 because its first send was applied) is followed by a read: if the
//     record carries one of this Update's ids the change was applied (exactly once: every later attempt
//     was conditional on a version that already held it, or on one before it, and failed); otherwise
//     the change is computed again from what is there now and written again.
//
// Invariant: a change is either applied once or reported as not applied (Update's error names the
// record, and when an attempt's outcome stayed unknown says so), never applied twice, and no other
// writer's change is lost: each write is conditional on the version it was computed from.
package shared

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"slices"
	"strings"
	"time"
)

// Dir is the shared state folder at the store root; Version the layout below it (Dir/Version/...).
const (
	Dir     = ".ckguard"
	Version = "v1"
	// Prefix is the key prefix of every record of this layout, relative to the store root.
	Prefix = Dir + "/" + Version + "/"
)

// ErrConflict is a conditional write refused because the record is not at the version it was
// conditional on (S3's 412, an existing generation file). Nothing was written by that attempt.
var ErrConflict = errors.New("the shared record changed since it was read")

// Entry is one record of a listing: its name and current version.
type Entry struct {
	Name    string
	Version string
}

// CAS is the compare-and-swap store of named records. Names are relative to Prefix, made of
// [a-z0-9._-] segments joined by '/'. Versions are opaque to callers.
type CAS interface {
	// Get returns the record's data and version, or an error wrapping fs.ErrNotExist.
	Get(ctx context.Context, name string) ([]byte, string, error)
	// Put writes data as the record's next version if its current version is prev ("" = it must not
	// exist). It returns the new version, ErrConflict when the record is elsewhere, or another error
	// when the outcome is unknown (the write may or may not have been applied).
	Put(ctx context.Context, name string, data []byte, prev string) (string, error)
	// List returns the records whose names start with prefix, with their current versions.
	List(ctx context.Context, prefix string) ([]Entry, error)
	// Where names the area in messages (a path or an s3:// URL).
	Where() string
}

// ValidName checks a record name.
func ValidName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") {
		return fmt.Errorf("shared record name %q: want segments of [a-z0-9._-] joined by /", name)
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.HasSuffix(seg, recSuffix) || strings.HasPrefix(seg, ".") {
			return fmt.Errorf("shared record name %q: bad segment %q", name, seg)
		}
		for _, r := range seg {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
				return fmt.Errorf("shared record name %q: want segments of [a-z0-9._-] joined by /", name)
			}
		}
	}
	return nil
}

// Envelope is what a record holds: the caller's data and the ids of the record's last writes.
type Envelope struct {
	Format int      `json:"format"`
	Writes []string `json:"writes"` // newest last, at most keepWrites
	// Seq counts the record's writes through Update (the newest write id's number): it tells an Update
	// whether one of its own writes could be among the ids no longer kept.
	Seq  uint64          `json:"seq,omitempty"`
	Data json.RawMessage `json:"data"`
}

// keepWrites bounds the write ids an envelope keeps. An Update recognises its own write while fewer
// than this many other writes followed it before its check read: with retries read back at once that
// is never reached by the few writers of one record (a fleet's mounts), and when it is the Update
// reports its outcome unknown rather than write again.
const keepWrites = 32

// MaxRecordBytes bounds a record's bytes as read: every area reads at most this much of a record, and
// a longer one is damaged (what ckguard writes is a few hundred bytes; a hold record with its needers a
// few kilobytes).
const MaxRecordBytes = 4 << 20

// DamagedError is a record whose bytes do not decode (its envelope or its data). Moving the record
// away is the fix: the next change writes it afresh.
type DamagedError struct {
	Record string // the area and the record's name
	Err    error
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("shared record %s is damaged (%v): move it away, the next change writes it afresh", e.Record, e.Err)
}

func (e *DamagedError) Unwrap() error { return e.Err }

// ErrNoChange, returned by an Update's function, leaves the record as it is.
var ErrNoChange = errors.New("no change")

// UpdateOptions tunes Update's retries (zero values: defaults).
type UpdateOptions struct {
	Attempts int           // writes tried before giving up (default 10)
	Backoff  time.Duration // first pause after a failure, doubled up to 1 s, with jitter (default 20 ms)
}

// Result says what an Update did.
type Result struct {
	Version string // the record's version holding the change (or the current one when unchanged)
	Changed bool   // false: fn returned ErrNoChange
	Writes  int    // conditional writes sent (for the cost figures)
}

// Update applies fn to the record name exactly once (see the package doc). fn gets the current
// data (nil, false when the record does not exist) and returns the new data or ErrNoChange; it may be
// called several times, each time with the then current data, and must not have side effects.
func Update(ctx context.Context, c CAS, name string, o UpdateOptions, fn func(cur []byte, exists bool) ([]byte, error)) (Result, error) {
	if err := ValidName(name); err != nil {
		return Result{}, err
	}
	if o.Attempts <= 0 {
		o.Attempts = 10
	}
	if o.Backoff <= 0 {
		o.Backoff = 20 * time.Millisecond
	}
	var (
		mine    []string // ids of this Update's attempts
		seqs    []uint64 // the Seq each attempt's write would have had
		unknown error    // the last attempt whose outcome was not known
		res     Result
	)
	pause := o.Backoff
	for attempt := 0; attempt < o.Attempts; attempt++ {
		if err := ctx.Err(); err != nil {
			break
		}
		raw, ver, err := c.Get(ctx, name)
		exists := err == nil
		if damaged := (*DamagedError)(nil); errors.As(err, &damaged) {
			return res, err // reading it again reads the same bytes
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			unknown = err
			sleep(ctx, &pause)
			continue
		}
		var env Envelope
		if exists {
			if err := json.Unmarshal(raw, &env); err != nil {
				return res, &DamagedError{Record: c.Where() + "/" + name, Err: err}
			}
			if slices.ContainsFunc(env.Writes, func(w string) bool { return slices.Contains(mine, w) }) {
				res.Version, res.Changed = ver, true
				return res, nil // an earlier attempt was applied
			}
			// Not found: but an attempt of ours may have been applied and its id pushed out of the
			// last keepWrites by the writes that followed. Then writing again could apply the change
			// twice: the outcome is reported unknown instead.
			if kept := uint64(len(env.Writes)); env.Seq >= kept {
				for _, q := range seqs {
					if q <= env.Seq-kept {
						return res, fmt.Errorf("shared record %s/%s: not written again: an earlier attempt's outcome is unknown and more than %d writes by other mounts followed it, so the record cannot say whether it was applied: check with `ckguard fleet` and retry", c.Where(), name, keepWrites)
					}
				}
			}
		}
		var cur []byte
		if exists {
			cur = env.Data
		}
		next, err := fn(cur, exists)
		if errors.Is(err, ErrNoChange) {
			// The state asked for holds (whether or not an earlier attempt of ours made it so).
			res.Version = ver
			return res, nil
		}
		if err != nil {
			return res, err
		}
		id := newID()
		mine = append(mine, id)
		env.Format = 1
		env.Seq++
		seqs = append(seqs, env.Seq)
		env.Writes = append(env.Writes, id)
		if len(env.Writes) > keepWrites {
			env.Writes = env.Writes[len(env.Writes)-keepWrites:]
		}
		env.Data = next
		b, err := json.Marshal(env)
		if err != nil {
			return res, fmt.Errorf("shared record %s: %w", name, err)
		}
		res.Writes++
		nv, err := c.Put(ctx, name, b, ver)
		if err == nil {
			res.Version, res.Changed = nv, true
			return res, nil
		}
		if !errors.Is(err, ErrConflict) {
			unknown = err
			sleep(ctx, &pause)
		}
		// A conflict: someone else wrote (or our own earlier attempt landed); read again at once.
	}
	if unknown != nil {
		return res, fmt.Errorf("shared record %s/%s: not changed after %d attempts; the last attempt's outcome is unknown (%w): check with `ckguard fleet` and retry", c.Where(), name, len(mine), unknown)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("shared record %s/%s: %w", c.Where(), name, err)
	}
	return res, fmt.Errorf("shared record %s/%s: not changed: %d conflicting writes by other mounts in a row: retry", c.Where(), name, len(mine))
}

// Read returns the data of a record's envelope and its version.
func Read(ctx context.Context, c CAS, name string) ([]byte, string, error) {
	raw, ver, err := c.Get(ctx, name)
	if err != nil {
		return nil, "", err
	}
	var env Envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, "", &DamagedError{Record: c.Where() + "/" + name, Err: err}
	}
	return env.Data, ver, nil
}

func sleep(ctx context.Context, pause *time.Duration) {
	n, _ := rand.Int(rand.Reader, big.NewInt(int64(*pause)+1))
	d := *pause/2 + time.Duration(n.Int64())/2
	*pause = min(2**pause, time.Second)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
