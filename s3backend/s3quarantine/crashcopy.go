package s3quarantine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// A change in place (Keep) copies the version it replaces into the area with its record, then makes the
// conditional change, then marks the record Applied; a deletion (Stage) likewise copies, then deletes,
// and its record is marked Applied by the next Tidy (not on the deletion's path: one request fewer). A crash between the copy and the mark leaves a
// record that is not Applied. Whether the change happened is read from the key: if it still holds the
// kept version (same ETag) the change never happened and the copy is a crash copy, a duplicate of the
// live object and no entry; if it holds another version, or none, the change (or a later one) destroyed
// the kept version and the copy is a real entry.
//
// ListAll reports a crash copy as a problem; Tidy resolves both cases: it removes a crash copy once it
// is older than crashCopyAge, and marks a real entry Applied. A copy this process is still changing
// (holds, from Keep until Applied or Unstage) is never resolved: its change may still be under way. Any
// error keeps the copy as it is (fail closed).

// crashCopyAge is the least age of a crash copy Tidy removes. The mount's own changes in flight are
// known exactly (Area.holds); the age guards a change another process (a mount over the same bucket on
// another host) still has under way after its copy: far longer than a conditional PUT or a copy take,
// and than a multipart upload of a spool of tens of GiB on a slow link.
const crashCopyAge = 6 * time.Hour

// isKept reports whether e is a copy whose change is not yet known to have happened: a change in place
// (Keep), or a deletion (Stage: copy, record, then the conditional delete) whose delete may not have
// happened. A deletion stopped between its copy and its delete leaves the object at its key and its copy
// in the area; counted as an entry it would be in both places, and its restore refused as occupied.
func isKept(e quarantine.Entry) bool {
	c := e.Change()
	return (c == quarantine.OpReplace || c == quarantine.OpTruncate || c == quarantine.OpUnlink) && e.ETag != "" && !e.Applied
}

// hold marks id as being staged or changed by this process, after any removal of it Tidy is making has
// finished (a Keep or Stage of the same key and version writes the same names).
func (a *Area) hold(id string) {
	for {
		a.mu.Lock()
		if ch, ok := a.dropping[id]; ok {
			a.mu.Unlock()
			<-ch
			continue
		}
		if a.holds == nil {
			a.holds = map[string]int{}
		}
		a.holds[id]++
		a.mu.Unlock()
		return
	}
}

// settle ends one hold of id (its change is known: Applied, or Unstage after it did not happen).
func (a *Area) settle(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.holds[id] > 1 {
		a.holds[id]--
	} else {
		delete(a.holds, id)
	}
}

// settleIfHeld ends a hold of id if there is one (Unstage also drops copies nobody held: a deletion
// decided again as refused after a crash).
func (a *Area) settleIfHeld(id string) {
	if a.held(id) {
		a.settle(id)
	}
}

func (a *Area) held(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.holds[id] > 0
}

// startDrop marks id as being removed, unless this process holds it; done ends the mark.
func (a *Area) startDrop(id string) (done func(), ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.holds[id] > 0 {
		return nil, false
	}
	if a.dropping == nil {
		a.dropping = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	a.dropping[id] = ch
	return func() {
		a.mu.Lock()
		delete(a.dropping, id)
		a.mu.Unlock()
		close(ch)
	}, true
}

// crashCopy is ListAll's problem for the crash copy e (its key still holds e.ETag).
func crashCopy(e quarantine.Entry, size int64) quarantine.Problem {
	return quarantine.Problem{ID: e.ID, Size: size, Detail: fmt.Sprintf(
		"crash copy: kept for a %s of %s that has not happened (a change in progress elsewhere, or a crash between the copy and the change); "+
			"it duplicates the object still at %s (ETag %s) and is no entry; a purge removes it once it is %v old (staged %s)",
		e.Change(), e.Key(), e.Key(), e.ETag, crashCopyAge, e.DeletedAt.Format(time.RFC3339))}
}

// unresolvedFresh is how old the unresolved records ListAll last found may be for Tidy to take them
// instead of reading the whole area again: the mount's purge lists the area right before its Tidy, and
// so does `ckguard quarantine purge`.
const unresolvedFresh = time.Minute

// Tidy resolves the records of changes in place not known to have happened (see crashCopyAge): a
// crash copy older than max(age, crashCopyAge) is removed, a copy whose key holds another version or
// none is marked Applied. A record without its object is left (List skips it; the next Unstage or
// restore of the same deletion removes it). Every copy it could not resolve stays, and the error says
// which. It looks only at the records the last ListAll found unresolved when that was just now (else
// it lists the area itself), so a purge after its listing reads no record twice.
func (a *Area) Tidy(ctx context.Context, age time.Duration) error {
	minAge := max(age, crashCopyAge)
	a.mu.Lock()
	cands, at := a.unresolved, a.unresolvedAt
	a.mu.Unlock()
	if now := a.now(); cands == nil || now.Sub(at) > unresolvedFresh || now.Before(at) {
		if _, _, err := a.ListAll(ctx); err != nil {
			return fmt.Errorf("tidy the quarantine area: %w", err)
		}
		a.mu.Lock()
		cands = a.unresolved
		a.mu.Unlock()
	}
	var errs []error
	for _, e := range cands {
		if err := ctx.Err(); err != nil {
			return err
		}
		if a.held(e.ID) {
			continue
		}
		if err := a.resolve(ctx, e, minAge); err != nil {
			errs = append(errs, err)
		}
	}
	// What was resolved is not looked at again until the next listing.
	a.mu.Lock()
	a.unresolved = nil
	a.mu.Unlock()
	return errors.Join(errs...)
}

// resolve settles the record e of a change in place not marked Applied.
func (a *Area) resolve(ctx context.Context, e quarantine.Entry, minAge time.Duration) error {
	key := e.Key()
	o, err := a.c.Head(ctx, key)
	switch {
	case errors.Is(err, fs.ErrNotExist) || err == nil && o.ETag != e.ETag:
		// The kept version is no longer at its key: the copy is its only one, a real entry. (The record
		// read again first: a staging that reused the names since wrote its own.)
		now, err := a.entryRecord(ctx, e.ID)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // restored, purged or removed since
		}
		if err != nil {
			return fmt.Errorf("quarantine entry %s (%s): its change happened but it cannot be marked applied: %w", e.ID, key, err)
		}
		if !sameKept(now, e) {
			return nil
		}
		if err := a.putRecord(ctx, appliedCopy(e)); err != nil {
			return fmt.Errorf("quarantine entry %s (%s): its change happened but it cannot be marked applied: %w", e.ID, key, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("quarantine copy %s of %s kept: cannot tell whether its change happened: %w", e.ID, key, err)
	}
	if a.now().Sub(e.DeletedAt) < minAge {
		return nil // young: a change may still be under way
	}
	done, ok := a.startDrop(e.ID)
	if !ok {
		return nil
	}
	defer done()
	// Read both again right before the removal: a staging that reused the names since (the same key and
	// version deleted through a mount) rewrote the record, and a change that happened since moved the key.
	now, err := a.entryRecord(ctx, e.ID)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("quarantine copy %s of %s kept: %w", e.ID, key, err)
	}
	if !sameKept(now, e) {
		return nil
	}
	if o, err := a.c.Head(ctx, key); err != nil || o.ETag != e.ETag {
		return nil // the next Tidy looks again
	}
	if err := a.drop(ctx, e.ID); err != nil {
		return fmt.Errorf("quarantine crash copy %s of %s (a duplicate of the object at its key) could not be removed: %w", e.ID, key, err)
	}
	return nil
}

// entryRecord reads id's record as it is now.
func (a *Area) entryRecord(ctx context.Context, id string) (quarantine.Entry, error) {
	r, err := a.c.Head(ctx, recordKey(id))
	if err != nil {
		return quarantine.Entry{}, err
	}
	r.Key = recordKey(id)
	return a.readRecord(ctx, r)
}

// sameKept reports whether the record now is still the unresolved record e.
func sameKept(now, e quarantine.Entry) bool {
	return isKept(now) && now.ETag == e.ETag && now.DeletedAt.Equal(e.DeletedAt) && now.Decision == e.Decision
}

func appliedCopy(e quarantine.Entry) quarantine.Entry {
	e.Applied = true
	return e
}
