package shared

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Restore is the record of one quarantine entry's restore, restores/<sha256 of the entry id, 32 hex
// digits>: claimed by one mount before it moves the object back, so that every other mount of the
// store, racing or later, can say who restored the entry and when instead of only that it is gone.
// A claim is never deleted: the record is the entry's history.
type Restore struct {
	Entry string       `json:"entry"` // the quarantine entry id
	Key   string       `json:"key"`   // the entry's original key
	State RestoreState `json:"state"`
	Mount string       `json:"mount"` // the mount (registry id) that claimed it
	Host  string       `json:"host"`
	At    time.Time    `json:"at"`              // the claim, by the claimer's clock
	Done  time.Time    `json:"done,omitzero"`   // restored or failed
	Error string       `json:"error,omitempty"` // why it failed (State RestoreFailed)
}

// RestoreState is where a restore stands.
type RestoreState string

const (
	// Restoring: claimed, the move under way (or its mount crashed meanwhile: see RestoreClaimTTL).
	Restoring RestoreState = "restoring"
	// Restored: the object is back at its key.
	Restored RestoreState = "restored"
	// RestoreFailed: the claimer gave up (the key was occupied, a store error); anyone may claim again.
	RestoreFailed RestoreState = "failed"
)

// RestoreClaimTTL is how long a claim in Restoring keeps other mounts off: a restore takes seconds (an
// S3 copy of a large object minutes); a claim older than this is taken for a crashed claimer's, and
// the entry, still staged, may be claimed again. The move itself never replaces anything, so a second
// claim after a slow first one cannot lose data: one of the moves fails.
const RestoreClaimTTL = 10 * time.Minute

// RestoreName is the record name of entry id's restore.
func RestoreName(id string) string {
	h := sha256.Sum256([]byte(id))
	return "restores/" + hex.EncodeToString(h[:16])
}

// AlreadyRestoredError is ClaimRestore's answer when another mount restored the entry, or is restoring
// it now.
type AlreadyRestoredError struct{ Rec Restore }

// ErrAlreadyRestored is wrapped by AlreadyRestoredError.
var ErrAlreadyRestored = errors.New("already restored")

func (e *AlreadyRestoredError) Error() string {
	r := e.Rec
	if r.State == Restoring {
		return fmt.Sprintf("restore /%s: being restored by the mount on %s (%s) since %s: not restored twice (entry %s)", r.Key, r.Host, r.Mount, r.At.UTC().Format(time.RFC3339), r.Entry)
	}
	return fmt.Sprintf("restore /%s: already restored by the mount on %s (%s) at %s: nothing to do (entry %s)", r.Key, r.Host, r.Mount, r.Done.UTC().Format(time.RFC3339), r.Entry)
}

func (e *AlreadyRestoredError) Unwrap() error { return ErrAlreadyRestored }

// ClaimRestore claims the restore of want.Entry for want.Mount (State, At and Done are set here). It
// fails with an *AlreadyRestoredError when the entry was restored, or is being restored by another
// mount within RestoreClaimTTL; a claim by the same mount (a retry) or after a failure is taken.
func ClaimRestore(ctx context.Context, c CAS, want Restore, now time.Time) error {
	var taken *AlreadyRestoredError
	_, err := Update(ctx, c, RestoreName(want.Entry), UpdateOptions{}, func(cur []byte, exists bool) ([]byte, error) {
		taken = nil
		if exists {
			var old Restore
			if err := json.Unmarshal(cur, &old); err != nil {
				return nil, fmt.Errorf("restore record of entry %s is damaged: %w", want.Entry, err)
			}
			switch {
			case old.State == Restored:
				taken = &AlreadyRestoredError{old}
				return nil, ErrNoChange
			case old.State == Restoring && old.Mount != want.Mount && now.Sub(old.At) < RestoreClaimTTL:
				taken = &AlreadyRestoredError{old}
				return nil, ErrNoChange
			}
		}
		next := want
		next.State, next.At, next.Done, next.Error = Restoring, now.UTC(), time.Time{}, ""
		return json.Marshal(next)
	})
	if err != nil {
		return fmt.Errorf("claim the restore of /%s in %s: %w", want.Key, c.Where(), err)
	}
	if taken != nil {
		return taken
	}
	return nil
}

// FinishRestore records the outcome of mount's claimed restore of entry id (restoreErr nil: restored).
func FinishRestore(ctx context.Context, c CAS, id, mount string, restoreErr error, now time.Time) error {
	_, err := Update(ctx, c, RestoreName(id), UpdateOptions{}, func(cur []byte, exists bool) ([]byte, error) {
		var r Restore
		if !exists {
			return nil, fmt.Errorf("restore record of entry %s: gone", id)
		}
		if err := json.Unmarshal(cur, &r); err != nil {
			return nil, fmt.Errorf("restore record of entry %s is damaged: %w", id, err)
		}
		if r.Mount != mount || r.State != Restoring {
			return nil, ErrNoChange // taken over after RestoreClaimTTL: the later claim's outcome counts
		}
		r.State, r.Done = Restored, now.UTC()
		if restoreErr != nil {
			r.State, r.Error = RestoreFailed, restoreErr.Error()
		}
		return json.Marshal(r)
	})
	if err != nil {
		return fmt.Errorf("record the restore of entry %s in %s: %w", id, c.Where(), err)
	}
	return nil
}

// RestoreOf returns the restore record of entry id (false: none).
func RestoreOf(ctx context.Context, c CAS, id string) (Restore, bool, error) {
	return readRecord[Restore](ctx, c, RestoreName(id))
}

// Restores lists every restore record (one listing and a read per record: for a command, not a sync).
func Restores(ctx context.Context, c CAS) ([]Restore, error) {
	return readRecords[Restore](ctx, c, "restores/")
}
