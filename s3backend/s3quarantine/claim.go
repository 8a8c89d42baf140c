package s3quarantine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// A restore first claims its entry: it rewrites the entry record with the time it starts ("restoring"),
// conditional on the record's ETag as it read it. S3 has no rename, so a restore is several requests
// (a copy back, then the removals); of two restores of one entry racing (two operators, the CLI beside
// a mount, on one host or two), the conditional write lets exactly one through, and the other is told
// the entry is taken (quarantine.AlreadyGone). A claim younger than claimAge also turns away a restore
// that read the record after it; an older one is a restore that stopped (a crash) and is taken over.
// The claim is a rewrite of the record, so a crash after it leaves the entry as it was, restorable.

// claimAge is how long a claimed entry is left to the restore that claimed it: far longer than a
// server-side copy of one object takes.
const claimAge = 10 * time.Minute

// claimField is the record field the claim sets (an RFC 3339 time).
const claimField = "restoring"

// recordClient is what a claim needs of the client (both areas' clients).
type recordClient interface {
	Head(ctx context.Context, key string) (s3client.Object, error)
	ReadAt(ctx context.Context, key string, p []byte, off int64, ifMatch string) (int, error)
	Put(ctx context.Context, key string, body io.ReadSeeker, size int64, o s3client.PutOptions) (string, error)
}

// claim takes the restore of entry id (staged from key) for this process at now. A restore that fails
// after it gives the entry back with release (the record as it was, unless it changed since).
func claim(ctx context.Context, c recordClient, id, key string, now time.Time) (*claimed, error) {
	b, prev, etag, err := claimRecord(ctx, c, id, key, now)
	if err != nil {
		return nil, err
	}
	return &claimed{c: c, id: id, old: b, prev: prev, etag: etag}, nil
}

// claimed is a restore's claim on an entry record.
type claimed struct {
	c    recordClient
	id   string
	old  []byte // the record before the claim
	prev string // its ETag
	etag string // the claim's
}

// release gives the entry back: the record as it was, unless it changed since the claim.
func (cl *claimed) release(ctx context.Context) {
	_, _ = cl.c.Put(context.WithoutCancel(ctx), recordKey(cl.id), bytes.NewReader(cl.old), int64(len(cl.old)), s3client.PutOptions{IfMatch: cl.etag})
}

// claimRecord writes the claim into id's record; it returns the record as it was, its ETag and the
// claim's.
func claimRecord(ctx context.Context, c recordClient, id, key string, now time.Time) ([]byte, string, string, error) {
	rk := recordKey(id)
	var b []byte
	var o s3client.Object
	var rec map[string]json.RawMessage
	for attempt := 0; ; attempt++ {
		var err error
		b, o, err = readWhole(ctx, c, rk)
		if lost(err) {
			return nil, "", "", quarantine.AlreadyGone(key, id) // removed, or rewritten while read: taken
		}
		if err != nil {
			return nil, "", "", fmt.Errorf("restore %s: claim its entry record %s: %w", key, rk, err)
		}
		err = json.Unmarshal(b, &rec)
		if err == nil {
			break
		}
		// No record: read while another restore rewrote or removed it (versitygw answers such a read
		// with no bytes); read again as it is now.
		if attempt > 0 {
			return nil, "", "", fmt.Errorf("restore %s: entry record %s: %w", key, rk, err)
		}
	}
	if raw, ok := rec[claimField]; ok {
		var at time.Time
		// A claim stamped a little after now is as fresh (another restore read the clock later, or on a
		// host whose clock is ahead): only one older, or newer, than claimAge is taken over.
		if json.Unmarshal(raw, &at) == nil && now.Sub(at) < claimAge && at.Sub(now) < claimAge {
			return nil, "", "", quarantine.AlreadyGone(key, id) // another restore of it under way
		}
	}
	stamp, err := json.Marshal(now.UTC())
	if err != nil {
		return nil, "", "", err
	}
	rec[claimField] = stamp
	nb, err := json.Marshal(rec)
	if err != nil {
		return nil, "", "", err
	}
	etag, err := c.Put(ctx, rk, bytes.NewReader(nb), int64(len(nb)), s3client.PutOptions{IfMatch: o.ETag})
	if lost(err) {
		return nil, "", "", quarantine.AlreadyGone(key, id)
	}
	if err != nil {
		return nil, "", "", fmt.Errorf("restore %s: claim its entry record %s: %w", key, rk, err)
	}
	return b, o.ETag, etag, nil
}

// readWhole reads the record at rk and the HEAD its bytes belong to (the read is conditional on the
// HEAD's ETag).
func readWhole(ctx context.Context, c recordClient, rk string) ([]byte, s3client.Object, error) {
	o, err := c.Head(ctx, rk)
	if err != nil {
		return nil, o, err
	}
	if o.Size > quarantine.MaxRecord {
		return nil, o, fmt.Errorf("entry record %s is %d bytes: not a record of ours", rk, o.Size)
	}
	b := make([]byte, o.Size)
	n, err := c.ReadAt(ctx, rk, b, 0, o.ETag)
	if err != nil && !(errors.Is(err, io.EOF) && n == len(b)) {
		return nil, o, err
	}
	return b[:n], o, nil
}

// lost reports whether a conditional request on a record failed because the record changed or went.
func lost(err error) bool {
	return errors.Is(err, s3client.ErrPrecondition) || errors.Is(err, fs.ErrNotExist)
}
