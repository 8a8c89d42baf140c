// Package quarantine stages the deletions a guard mount allows: with --quarantine, an object the guard
// lets go is moved into the store's own quarantine folder (store.QuarantineDir) instead of being
// destroyed, with an entry record naming its original key, size, times and the decision that let it go.
// `ckguard quarantine restore` puts it back, `purge` (and the mount's background purge) destroys it once
// the entry is older than the TTL.
//
// Storage is the truth: the folder and its records are in the store, so the index can be rebuilt from
// the store without losing an entry, and discovery skips the folder (a `_metadata` staged there is no
// live checkpoint; an object staged there is missing from its original key).
//
// Every engine (localbackend/localquarantine, s3backend/s3quarantine, hdfsbackend/hdfsquarantine) keeps
// one invariant across a crash at any point: an object is at its original key or in the folder, never
// lost and never in both. This package is what they share: the entry and its decision, the names that
// carry a record, the pairing of what is staged with its records into a listing (Pair), the Area a
// service lists, restores and purges, the purge rules and the space bound.
package quarantine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/refindex/store"
)

// Entry is one staged deletion.
type Entry struct {
	ID   string `json:"id"`
	Path string `json:"path"` // the object's original store key
	// PathBytes holds the exact bytes of a key that is not valid UTF-8 (JSON would replace them).
	PathBytes []byte    `json:"path_bytes,omitempty"`
	Size      int64     `json:"size"`
	ModTime   time.Time `json:"mtime"`
	Mode      uint32    `json:"mode,omitempty"` // file type and permissions (local stores)
	ETag      string    `json:"etag,omitempty"` // S3
	// VersionID is the object's version on a versioned S3 bucket, where the entry is that version
	// hidden by a delete marker (nothing was copied).
	VersionID string    `json:"version_id,omitempty"`
	DeletedAt time.Time `json:"deleted_at"`
	// Decision is a copy of the audit record of the deletion (the audit log holds the same record at
	// DeletedAt for Path). Its Op is the kind of change that staged the entry (Change).
	Decision Decision `json:"decision"`
	// Source identifies the file a staged truncation copied (local stores; see localquarantine.Local.Prepare).
	Source *Source `json:"source,omitempty"`
	// Applied: the change in place that staged the entry is known to have happened (S3; see
	// s3quarantine.Area.Keep).
	Applied bool `json:"applied,omitempty"`
}

// Decision is what the audit log recorded for the deletion that staged the entry.
type Decision struct {
	Op      string `json:"op"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
	PID     uint32 `json:"pid,omitempty"`
	UID     uint32 `json:"uid"`
	GID     uint32 `json:"gid"`
	Comm    string `json:"comm,omitempty"`
}

// Key is the entry's original key with its exact bytes.
func (e Entry) Key() string {
	if len(e.PathBytes) > 0 {
		return string(e.PathBytes)
	}
	return e.Path
}

// Area is a store's quarantine folder.
type Area interface {
	// List returns every entry, oldest first.
	List(ctx context.Context) ([]Entry, error)
	// Restore moves the entry's object back to its original key, never replacing anything there
	// (ErrOccupied), and drops the entry.
	Restore(ctx context.Context, id string) (Entry, error)
	// Purge destroys the entry's object and drops the entry. It does not check the TTL: PurgeExpired does.
	Purge(ctx context.Context, id string) error
}

// ErrOccupied is wrapped by Restore's error when something is at the entry's original key.
var ErrOccupied = errors.New("the original path is occupied")

// ErrNoEntry is wrapped by Restore's and Purge's errors for an id the area does not hold.
var ErrNoEntry = errors.New("no such quarantine entry")

// AlreadyGone is the error of a restore of entry id (staged from key) that another restore or purge
// took first (two operators, or the CLI beside a mount): of two racing, exactly one restores the entry,
// and the other is told so, wrapping ErrNoEntry.
func AlreadyGone(key, id string) error {
	what := "restore"
	if key != "" {
		what += " /" + strings.TrimPrefix(key, "/")
	}
	return fmt.Errorf("%s: %w: entry %s was already restored (or purged) by another request meanwhile", what, ErrNoEntry, id)
}

// Occupied is the error of a restore of entry id that finds something at its original key: a restore
// never replaces it, and the entry stays (wrapping ErrOccupied).
func Occupied(key, id string) error {
	return fmt.Errorf("restore /%s: %w: something is there now, and a restore never replaces it; move it away first (entry %s stays in quarantine)", key, ErrOccupied, id)
}

// RestoreKey is the key a restore of e puts its object back at: e's original key, which must be a clean
// store key outside the quarantine folder (a record naming any other place is refused, never followed).
func RestoreKey(e Entry) (string, error) {
	key := e.Key()
	k, err := store.CleanKey(key)
	if err != nil || k == "" || k != key || store.InQuarantine(k) {
		return "", fmt.Errorf("restore %s: the entry's original path %q is not a store key outside the quarantine folder", e.ID, key)
	}
	return k, nil
}

// Find returns the newest entry staged from the original key (lossnet names it when a referenced object
// is missing: "in quarantine, restore with ckguard quarantine restore KEY").
func Find(ctx context.Context, a Area, key string) (Entry, bool, error) {
	if f, ok := a.(interface {
		Find(context.Context, string) (Entry, bool, error)
	}); ok {
		return f.Find(ctx, key)
	}
	return FindIn(a.List(ctx))(key)
}

// FindIn returns a finder of the newest entry of es (a listing, oldest first) staged from a key; err is
// the listing's, returned by every call.
func FindIn(es []Entry, err error) func(key string) (Entry, bool, error) {
	return func(key string) (Entry, bool, error) {
		if err != nil {
			return Entry{}, false, err
		}
		for i := len(es) - 1; i >= 0; i-- {
			if es[i].Key() == key {
				return es[i], true, nil
			}
		}
		return Entry{}, false, nil
	}
}

// Stats summarises an area for the ckguard_quarantine_* gauges.
type Stats struct {
	Objects int
	Bytes   int64
	Oldest  time.Time // zero when empty
}

// Summarise counts es.
func Summarise(es []Entry) Stats {
	var s Stats
	for _, e := range es {
		s.Objects++
		s.Bytes += e.Size
		if s.Oldest.IsZero() || e.DeletedAt.Before(s.Oldest) {
			s.Oldest = e.DeletedAt
		}
	}
	return s
}

// Referenced answers whether a live checkpoint references key (again): such an entry is never purged.
// An error keeps the entry (fail closed).
type Referenced func(ctx context.Context, key string) (bool, error)

// Kept is an entry a purge left in place, and why.
type Kept struct {
	Entry  Entry      `json:"entry"`
	Reason string     `json:"reason"`         // "young", "referenced", "error"
	Left   duration.D `json:"left,omitempty"` // time left until the TTL, for "young"
	Detail string     `json:"detail,omitempty"`
}

// PurgeResult is what PurgeExpired did.
type PurgeResult struct {
	Purged []Entry `json:"purged"`
	Kept   []Kept  `json:"kept"`
}

// PurgeExpired destroys the entries of es (all of a's when es is nil) whose deletion is at least ttl
// before now and that no live checkpoint references again. A failure to purge one entry is reported in
// Kept and does not stop the others.
func PurgeExpired(ctx context.Context, a Area, es []Entry, ttl time.Duration, now time.Time, referenced Referenced) (PurgeResult, error) {
	if ttl <= 0 {
		return PurgeResult{}, fmt.Errorf("quarantine purge: TTL %v: a purge needs a positive TTL (entries younger than it are kept)", ttl)
	}
	return PurgeAged(ctx, a, es, ttl, now, referenced)
}

// PurgeAged is PurgeExpired for entries at least age old, any age when age is 0 (purge --all). The
// entries a live checkpoint references again stay whatever their age.
func PurgeAged(ctx context.Context, a Area, es []Entry, age time.Duration, now time.Time, referenced Referenced) (PurgeResult, error) {
	if age < 0 {
		return PurgeResult{}, fmt.Errorf("quarantine purge: age %v is negative", age)
	}
	if es == nil {
		var err error
		if es, err = a.List(ctx); err != nil {
			return PurgeResult{}, err
		}
	}
	var r PurgeResult
	for _, e := range es {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if got := now.Sub(e.DeletedAt); age > 0 && got < age {
			r.Kept = append(r.Kept, Kept{Entry: e, Reason: "young", Left: duration.D(age - got)})
			continue
		}
		r.purgeOne(ctx, a, e, referenced)
	}
	return r, nil
}

// purgeOne destroys e unless a live checkpoint references it again (or the index cannot say), and
// records the outcome in r: Purged, or Kept with the reason. It reports whether e was purged.
func (r *PurgeResult) purgeOne(ctx context.Context, a Area, e Entry, referenced Referenced) bool {
	if k, keep := stillReferenced(ctx, e, referenced); keep {
		r.Kept = append(r.Kept, k)
		return false
	}
	if err := a.Purge(ctx, e.ID); err != nil {
		r.Kept = append(r.Kept, Kept{Entry: e, Reason: "error", Detail: err.Error()})
		return false
	}
	r.Purged = append(r.Purged, e)
	return true
}

// SortEntries orders es oldest first (ties by id).
func SortEntries(es []Entry) {
	sort.Slice(es, func(i, j int) bool {
		if !es[i].DeletedAt.Equal(es[j].DeletedAt) {
			return es[i].DeletedAt.Before(es[j].DeletedAt)
		}
		return es[i].ID < es[j].ID
	})
}

// IDTime is the deletion time encoded in id (zero when id is not one of NewID's).
func IDTime(id string) time.Time {
	i := strings.IndexByte(id, '-')
	if i <= 0 {
		return time.Time{}
	}
	n, err := strconv.ParseInt(id[:i], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// ReasonAllowed is the reason of a staging recorded before its decision was known to the record (the
// change is made only when the guard allows it, so a staged entry always was allowed).
const ReasonAllowed = "allowed"

type decisionKey struct{}

// WithDecision returns ctx carrying d, the record of the change a staging below it makes: a deletion
// applied later (the S3 delete queue) keeps who asked for it.
func WithDecision(ctx context.Context, d Decision) context.Context {
	return context.WithValue(ctx, decisionKey{}, d)
}

// DecisionFrom returns the record WithDecision put in ctx, or one of op with no caller.
func DecisionFrom(ctx context.Context, op string) Decision {
	if d, ok := ctx.Value(decisionKey{}).(Decision); ok {
		return d
	}
	return Decision{Op: op, Reason: ReasonAllowed}
}

// Source identifies the content a staged truncation copied: the file at the entry's key is still that
// content (the truncation did not happen) exactly when all of these still hold for it.
type Source struct {
	Dev       uint64 `json:"dev"`
	Ino       uint64 `json:"ino"`
	Size      int64  `json:"size"`
	MtimeNsec int64  `json:"mtime_ns"`
	CtimeNsec int64  `json:"ctime_ns"`
}

// Op values of Decision.Op for the changes that stage an entry: an unlink (and a deletion on S3), a
// rename that replaced the entry's object at its key, a truncation that cut it, a fallocate(2) that
// punched a hole in it, zeroed, collapsed or shifted a range of it (local stores; the guard decides it
// like a truncation, and the audit log records it as one).
const (
	OpUnlink   = "unlink"
	OpReplace  = "replace"
	OpTruncate = "truncate"
	OpAllocate = "fallocate"
)

// Change is the kind of change that staged e (Decision.Op; an entry from before the field: "unlink").
func (e Entry) Change() string {
	if e.Decision.Op == "" {
		return OpUnlink
	}
	return e.Decision.Op
}

// Problem is an object in the folder that is no complete entry: a record that cannot be read, or an
// object without a record (after a power failure). List reports them rather than hiding them; purge
// never destroys them.
type Problem struct {
	ID     string `json:"id"`
	Size   int64  `json:"size"`
	Detail string `json:"detail"`
}

// MaxRecord bounds one entry record read back, on every store (a record is a few hundred bytes; a
// hostile journal, object or file in the quarantine must not make the reader allocate gigabytes).
const MaxRecord = 1 << 20
