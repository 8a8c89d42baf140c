package s3quarantine

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// Keep stages a copy of the version o (its ETag) of key before a change replaces that version in place:
// a rename onto key (quarantine.OpReplace) or an upload of truncated content over it
// (quarantine.OpTruncate). The record first, then a server-side copy conditional on the ETag; the
// original stays at key. The change itself is conditional on the same ETag (If-Match), so what it
// replaces is exactly what was kept; a change that does not happen is undone with Unstage (the copy goes
// while key still holds that version). Keep is a copy: the mount calls it before the decision's lock.
//
// Across a crash between Keep and the change the copy duplicates the object still at key: ListAll does
// not count such an entry (its key still holds its ETag: the change never happened) but reports it as a
// crash copy, and Tidy removes it (see crashcopy.go). From Keep until Applied or Unstage the entry is
// held: Tidy leaves it alone while its change is under way.
func (a *Area) Keep(ctx context.Context, key string, o s3client.Object, d quarantine.Decision) (quarantine.Entry, error) {
	if store.InQuarantine(key) {
		return quarantine.Entry{}, fmt.Errorf("quarantine s3 %s: the key is in the quarantine area itself", key)
	}
	if o.ETag == "" {
		return quarantine.Entry{}, fmt.Errorf("quarantine s3 %s: the server gave no ETag for it, so the version a change would replace cannot be pinned; nothing was changed", key)
	}
	id := ID(key, o.ETag)
	a.hold(id)
	e := quarantine.Entry{ID: id, Path: key, Size: o.Size, ModTime: o.ModTime, ETag: o.ETag, DeletedAt: a.now().UTC(), Decision: d}
	if !utf8.ValidString(key) {
		e.PathBytes = []byte(key)
	}
	if err := a.putRecord(ctx, e); err != nil {
		a.settle(id)
		return quarantine.Entry{}, fmt.Errorf("quarantine %s: %w (nothing was changed)", key, err)
	}
	if _, err := a.c.Copy(ctx, key, objectKey(id), o.ETag, s3client.PutOptions{}); err != nil {
		_ = a.drop(context.WithoutCancel(ctx), id)
		a.settle(id)
		return quarantine.Entry{}, fmt.Errorf("quarantine %s: copy to %s: %w (nothing was changed)", key, objectKey(id), err)
	}
	return e, nil
}

// Applied marks e, staged by Keep, as an entry whose change happened (a record rewrite), so that ListAll
// need not look at its key again. A crash before it leaves the entry unmarked: ListAll then looks.
func (a *Area) Applied(ctx context.Context, e quarantine.Entry) error {
	defer a.settleIfHeld(e.ID)
	return a.putRecord(ctx, appliedCopy(e))
}

// inPlace reports whether e was kept for a change in place (Keep) whose key still holds the version
// kept: the change never happened, and the object is not staged but still at its key. A HEAD that fails
// otherwise than not-found leaves the entry counted (it is listed rather than hidden).
func (a *Area) inPlace(ctx context.Context, e quarantine.Entry) bool {
	if !isKept(e) {
		return false
	}
	o, err := a.c.Head(ctx, e.Key())
	return err == nil && o.ETag == e.ETag
}
