package shared

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
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
//
// The age is measured between the claimer's clock (the claim's time) and the reader's: a claim dated
// ahead of the reader counts as old as it is ahead (claimAge), so that a claimer whose clock runs
// ahead and which then died keeps the entry for at most twice the TTL of the reader's time, never
// until its own clock's date comes round.
const RestoreClaimTTL = 10 * time.Minute

// claimAge is how old a claim made at at is at now, by the distance between the two clocks' readings.
func claimAge(at, now time.Time) time.Duration {
	if d := now.Sub(at); d >= 0 {
		return d
	}
	return at.Sub(now)
}

// RestoreName is the record name of entry id's restore.
func RestoreName(id string) string {
	h := sha256.Sum256([]byte(id))
	return "restores/" + hex.EncodeToString(h[:16])
}

// AlreadyRestoredError is ClaimRestore's answer when another mount restored the entry, or is restoring
// it now.
type AlreadyRestoredError struct {
	Rec Restore
	// Seen is the reader's clock when it found the claim (zero: unknown); it lets the message say a
	// claim is dated ahead of it.
	Seen time.Time
}

// ErrAlreadyRestored is wrapped by AlreadyRestoredError.
var ErrAlreadyRestored = errors.New("already restored")

func (e *AlreadyRestoredError) Error() string {
	r := e.Rec
	who := fmt.Sprintf("the mount on %s (%s)", r.Host, r.Mount)
	if by, ok := strings.CutPrefix(r.Mount, CLIClaimer); ok {
		who = fmt.Sprintf("`ckguard quarantine restore` of %s on %s (no mount held the store)", by, r.Host)
	}
	if r.State == Restoring {
		ahead := ""
		if !e.Seen.IsZero() && r.At.After(e.Seen) {
			ahead = fmt.Sprintf(", ahead of this host's clock (%s): one of the two clocks is off", e.Seen.UTC().Format(time.RFC3339))
		}
		return fmt.Sprintf("restore /%s: being restored by %s since %s%s: not restored twice (entry %s); the entry stays in quarantine, and if that mount stopped before it finished, its claim lapses at %s: retry then", r.Key, who, r.At.UTC().Format(time.RFC3339), ahead, r.Entry, r.At.Add(RestoreClaimTTL).UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("restore /%s: already restored by %s at %s: nothing to do (entry %s)", r.Key, who, r.Done.UTC().Format(time.RFC3339), r.Entry)
}

// CLIClaimer starts the Mount of a claim by the CLI on a store no mount holds ("cli:" and the person).
const CLIClaimer = "cli:"

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
			if err := decodeRecord(cur, &old); err != nil {
				return nil, &DamagedError{Record: c.Where() + "/" + RestoreName(want.Entry), Err: fmt.Errorf("restore record of entry %s: %w", want.Entry, err)}
			}
			switch {
			case old.State == Restored:
				taken = &AlreadyRestoredError{Rec: old}
				return nil, ErrNoChange
			case old.State == Restoring && old.Mount != want.Mount && claimAge(old.At, now) < RestoreClaimTTL:
				taken = &AlreadyRestoredError{Rec: old, Seen: now}
				return nil, ErrNoChange
			}
		}
		next := want
		next.State, next.At, next.Done, next.Error = Restoring, now.UTC(), time.Time{}, ""
		return encodeRecord(next)
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
		if err := decodeRecord(cur, &r); err != nil {
			return nil, &DamagedError{Record: c.Where() + "/" + RestoreName(id), Err: fmt.Errorf("restore record of entry %s: %w", id, err)}
		}
		if r.Mount != mount || r.State != Restoring {
			return nil, ErrNoChange // taken over after RestoreClaimTTL: the later claim's outcome counts
		}
		r.State, r.Done = Restored, now.UTC()
		if restoreErr != nil {
			r.State, r.Error = RestoreFailed, restoreErr.Error()
		}
		return encodeRecord(r)
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

// RestoreClaims is one claimer's side of the restore records: a --shared mount's (Mount its
// registry id), or the CLI's on a store no mount holds (Mount "cli:" and the person).
type RestoreClaims struct {
	C           CAS
	Mount, Host string
	// Warn reports an outcome that could not be recorded (the claim then expires after
	// RestoreClaimTTL).
	Warn func(msg string, args ...any)
}

// awaitClaim bounds how long a restore waits for another claimer's restore of the same entry.
const awaitClaim = 5 * time.Second

// Claim claims entry id (at key) and returns the function that records the restore's outcome. A
// claim another claimer holds is waited for (at most awaitClaim): restored, the answer is an
// *AlreadyRestoredError naming it; failed, this claim is taken. A claim that cannot be written
// refuses the restore: nothing may move while the area cannot say whether another claimer moves it.
func (rc *RestoreClaims) Claim(ctx context.Context, id, key string) (func(error), error) {
	want := Restore{Entry: id, Key: key, Mount: rc.Mount, Host: rc.Host}
	err := ClaimRestore(ctx, rc.C, want, time.Now())
	var already *AlreadyRestoredError
	if errors.As(err, &already) && already.Rec.State == Restoring {
		if r := rc.Await(ctx, id); r.State == RestoreFailed {
			err = ClaimRestore(ctx, rc.C, want, time.Now())
		} else if r.State == Restored {
			err = &AlreadyRestoredError{Rec: r}
		}
	}
	if err != nil {
		if errors.As(err, &already) {
			return nil, err
		}
		if damaged := (*DamagedError)(nil); errors.As(err, &damaged) {
			return nil, fmt.Errorf("restore /%s: nothing was moved: %w", key, err)
		}
		return nil, fmt.Errorf("restore /%s: %w: the store's shared state cannot say whether another mount restores it too, so nothing was moved; retry once `ckguard fleet` answers", key, err)
	}
	return func(rerr error) {
		// The outcome's own context: the caller's may have ended with the move done.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := FinishRestore(ctx, rc.C, id, rc.Mount, rerr, time.Now()); err != nil && rc.Warn != nil {
			rc.Warn("quarantine: the outcome of a restore could not be recorded in the shared state; other mounts see it as being restored until the claim expires", "entry", id, "path", key, "err", err, "claim_ttl", RestoreClaimTTL)
		}
	}, nil
}

// Await reads entry id's restore record until its claim is no longer Restoring, for at most
// awaitClaim, and returns the last record read.
func (rc *RestoreClaims) Await(ctx context.Context, id string) Restore {
	ctx, cancel := context.WithTimeout(ctx, awaitClaim)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var last Restore
	for {
		if r, ok, err := RestoreOf(ctx, rc.C, id); err == nil && ok {
			last = r
			if r.State != Restoring {
				return r
			}
		}
		select {
		case <-ctx.Done():
			return last
		case <-t.C:
		}
	}
}

// Explain replaces err, the failure of a restore of entry id that the quarantine no longer holds,
// with who restored it and when, when there is a record.
func (rc *RestoreClaims) Explain(ctx context.Context, id string, err error) error {
	if err == nil {
		return nil
	}
	r, ok, rerr := RestoreOf(ctx, rc.C, id)
	if rerr != nil || !ok || r.State == RestoreFailed {
		return err
	}
	if r.State == Restoring {
		r = rc.Await(ctx, id)
	}
	return &AlreadyRestoredError{Rec: r, Seen: time.Now()}
}
