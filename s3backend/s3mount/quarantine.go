package s3mount

import (
	"context"
	"syscall"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/s3backend/deleteq"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// stagingDeleter is the deleter of the mount with --quarantine: every allowed deletion (queued or
// synchronous) is staged in the area (copy, record, conditional delete) instead of being destroyed.
type stagingDeleter struct {
	c    *s3client.Client
	area Stager
}

// Stager is the S3 quarantine area as the mount uses it (s3quarantine.Area).
type Stager interface {
	Stage(ctx context.Context, key, etag string, d quarantine.Decision) (quarantine.Entry, error)
	// Unstage removes the staged copy of key at etag while the original is still there.
	Unstage(ctx context.Context, key, etag string) error
}

// Area is a quarantine area the mount stages in and serves (s3quarantine.Area, or
// s3quarantine.VersionedArea on a versioned bucket).
type Area interface {
	quarantine.Staging
	Stager
	// Keep stages the version o of key before a change in place replaces it (a zero Entry: the store
	// keeps that version by itself); Applied marks a kept entry once the change happened.
	Keep(ctx context.Context, key string, o s3client.Object, d quarantine.Decision) (quarantine.Entry, error)
	Applied(ctx context.Context, e quarantine.Entry) error
}

var _ deleteq.Deleter = stagingDeleter{}

func (s stagingDeleter) Head(ctx context.Context, key string) (s3client.Object, error) {
	return s.c.Head(ctx, key)
}

func (s stagingDeleter) Delete(ctx context.Context, key, ifMatch string) error {
	_, err := s.area.Stage(ctx, key, ifMatch, quarantine.DecisionFrom(ctx, quarantine.OpUnlink))
	return err
}

// DeleteBatch stages each item in turn (the queue sends single deletes, in parallel, when the mount
// stages: see openQueue).
func (s stagingDeleter) DeleteBatch(ctx context.Context, items []s3client.DeleteItem) ([]error, error) {
	errs := make([]error, len(items))
	for i, it := range items {
		errs[i] = s.Delete(ctx, it.Key, it.IfMatch)
	}
	return errs, nil
}

// deleter is what applies an allowed deletion: the area's staging with --quarantine, else the client.
func (f *filesystem) deleter() deleteq.Deleter {
	if f.opts.Quarantine != nil {
		return stagingDeleter{c: f.c, area: f.opts.Quarantine}
	}
	return f.c
}

// unstage removes the copy a staging interrupted between copy and delete left, once the deletion was
// decided again as refused: the object stays at its key only.
func (f *filesystem) unstage(e deleteq.Entry) {
	if f.opts.Quarantine == nil {
		return
	}
	if err := f.opts.Quarantine.Unstage(context.Background(), e.Key, e.ETag); err != nil {
		f.log.Warn("quarantine: cannot remove the staged copy of an object whose deletion was refused on a second decision; it is kept at its key and in quarantine (purge it with ckguard quarantine purge)", "key", e.Key, "err", err)
	}
}

// keep stages the version o of key before a change in place replaces it (op: quarantine.OpReplace for a
// rename onto key, quarantine.OpTruncate for truncated content put over it): a server-side copy, made
// before the enforcer's lock (and before the decision, so a refused change drops it again with unkeep).
// The change is conditional on o's ETag, so it replaces exactly the version kept. Without a quarantine
// it does nothing (kept false). A copy that fails refuses the change (nothing is replaced unstaged).
func (f *filesystem) keep(ctx context.Context, op, key string, o s3client.Object) (kept *quarantine.Entry, errno syscall.Errno) {
	area := f.opts.Quarantine
	if area == nil || o.Size == 0 {
		return nil, 0 // an empty object holds nothing to lose
	}
	d := f.g.Staged(ctx, op, quarantine.ReasonAllowed, "")
	e, err := area.Keep(ctx, key, o, d)
	if err != nil {
		f.log.Error("quarantine: the object a change would replace could not be staged, so nothing was changed", "key", key, "change", op, "err", err)
		if errno := s3client.Errno(err); errno != 0 {
			return nil, errno
		}
		return nil, syscall.EIO
	}
	if e.ID == "" {
		return nil, 0 // the store keeps the version replaced by itself (a versioned bucket)
	}
	return &e, 0
}

// kept finishes what keep staged once the change is known: dropped again (unkeep) when it failed, marked
// applied when it happened (so listing the area need not look at the key again).
func (f *filesystem) kept(e *quarantine.Entry, errno syscall.Errno) {
	switch {
	case e == nil:
	case errno != 0:
		f.unkeep(e.Key(), e.ETag)
	default:
		if err := f.opts.Quarantine.Applied(context.Background(), *e); err != nil {
			f.log.Warn("quarantine: cannot mark a staged entry as applied; listing the area looks at its key each time", "key", e.Key(), "err", err)
		}
	}
}

// unkeep drops what keep staged for a change that did not happen: only while key still holds the version
// kept (a change whose answer was lost may have happened: then the copy is the only one and stays).
func (f *filesystem) unkeep(key, etag string) {
	if err := f.opts.Quarantine.Unstage(context.Background(), key, etag); err != nil {
		f.log.Warn("quarantine: cannot drop the staged copy of an object a refused or failed change left in place; it is at its key and in quarantine (purge it with ckguard quarantine purge)", "key", key, "err", err)
	}
}
