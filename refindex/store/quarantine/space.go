package quarantine

import (
	"context"
	"time"

	"github.com/ckguard/ckguard/internal/bytesize"
	"github.com/ckguard/ckguard/internal/duration"
)

// Space is the room of the filesystem that holds a store and its quarantine folder.
type Space struct {
	Size int64 // bytes the filesystem (or the store's quota) holds in all
	Free int64 // bytes still available to writes through the mount (statfs f_bavail; HDFS: remaining)
}

// Spacer is implemented by the areas whose store lives on a filesystem with a size (local, NFS, HDFS);
// an S3 bucket has none, and only the byte bound applies there.
type Spacer interface {
	Space(ctx context.Context) (Space, error)
}

// Bound is the quarantine's space bound: the safety net must never be what fills the store. Under
// pressure the mount purges its oldest entries first, before their TTL (PurgeOldest), until the area
// is back within MaxBytes and the filesystem has MinFree available again, or nothing it may purge is
// left.
type Bound struct {
	MaxBytes int64          // the quarantine's bytes at most; 0: no bound
	MinFree  bytesize.Bound // free space of the store's filesystem at least; zero: no bound
}

// IsZero reports whether b bounds nothing.
func (b Bound) IsZero() bool { return b.MaxBytes <= 0 && b.MinFree.IsZero() }

// Need is how many bytes of quarantine entries must go for the area (holding quarantined bytes) to be
// within b; sp is the filesystem's space, nil where there is none (S3) or it could not be read. It can
// be more than quarantined: the filesystem is fuller than the whole quarantine can make up for.
func (b Bound) Need(quarantined int64, sp *Space) int64 {
	var need int64
	if b.MaxBytes > 0 && quarantined > b.MaxBytes {
		need = quarantined - b.MaxBytes
	}
	if sp != nil && !b.MinFree.IsZero() {
		if short := b.MinFree.Of(sp.Size) - sp.Free; short > need {
			need = short
		}
	}
	return need
}

// PurgeOldest destroys entries of es, oldest first, until their sizes add up to need bytes: the early
// purge of a quarantine over its bound. It never purges an entry a live checkpoint references again
// (nor one the index cannot answer for: fail closed); those, and entries that fail to purge, are in
// Kept and do not stop the others. Entries it did not need to reach are neither purged nor kept.
func PurgeOldest(ctx context.Context, a Area, es []Entry, need int64, referenced Referenced) (PurgeResult, error) {
	sorted := append([]Entry(nil), es...)
	SortEntries(sorted)
	var r PurgeResult
	var freed int64
	for _, e := range sorted {
		if freed >= need {
			break
		}
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if r.purgeOne(ctx, a, e, referenced) {
			freed += e.Size
		}
	}
	return r, nil
}

// stillReferenced asks referenced whether e must stay (a live checkpoint references its key again, or
// the index cannot say), and returns the Kept that says why.
func stillReferenced(ctx context.Context, e Entry, referenced Referenced) (Kept, bool) {
	if referenced == nil {
		return Kept{}, false
	}
	ref, err := referenced(ctx, e.Key())
	if err != nil {
		return Kept{Entry: e, Reason: "error", Detail: "cannot ask the index whether a live checkpoint references it: " + err.Error()}, true
	}
	if ref {
		return Kept{Entry: e, Reason: "referenced", Detail: "a live checkpoint references " + e.Path + " again; restore it with ckguard quarantine restore " + e.Path}, true
	}
	return Kept{}, false
}

// PurgeRequest is what an operator's `ckguard quarantine purge` asks for.
type PurgeRequest struct {
	// IDs are the entries to consider; empty: every entry.
	IDs []string `json:"ids,omitempty"`
	// OlderThan, when positive, replaces the TTL: entries deleted at least this long ago go.
	OlderThan duration.D `json:"older_than,omitempty"`
	// All purges the entries whatever their age (entries a live checkpoint references again still stay).
	All bool `json:"all,omitempty"`
	// By is the requesting process, for the audit record of each purge (the CLI fills it in).
	By Decision `json:"by"`
}

// Age is the age at which r purges an entry under ttl: 0 for All, OlderThan when set, else ttl.
func (r PurgeRequest) Age(ttl time.Duration) time.Duration {
	switch {
	case r.All:
		return 0
	case r.OlderThan > 0:
		return time.Duration(r.OlderThan)
	}
	return ttl
}

// PurgeCause says why an entry was purged, for its log line and audit record.
type PurgeCause string

const (
	CauseTTL      PurgeCause = "ttl"      // older than the TTL (the background purge, or purge without flags)
	CauseSpace    PurgeCause = "space"    // early: the quarantine was over its bound (Bound)
	CauseOperator PurgeCause = "operator" // early: purge --older-than or --all
)
