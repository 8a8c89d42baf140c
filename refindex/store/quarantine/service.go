package quarantine

import (
	"context"
	"time"

	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/refindex/flinklayout"
)

// Service is what a running mount answers about its quarantine on its quarantine control socket
// (fs/control.ServeQuarantine), and what the CLI does itself on a store no mount holds. Restores and
// purges go through the mount while one runs: a restored `_metadata` is indexed before Restore returns,
// and a purge asks the mount's index whether a live checkpoint references an entry again.
type Service interface {
	List(ctx context.Context) (*ListResult, error)
	// Restore puts the entries ids back, the `_metadata` among them last (so the files a restored
	// checkpoint references are back before it is live again).
	Restore(ctx context.Context, ids []string) (*RestoreResult, error)
	// Purge destroys those of the entries ids (all entries when ids is empty) older than the TTL that no
	// live checkpoint references again.
	Purge(ctx context.Context, ids []string) (*PurgeResult, error)
	// PurgeWith is an operator's purge: Purge with the age of req (req.Age) instead of the TTL, each
	// purge audited with req.By as the requester.
	PurgeWith(ctx context.Context, req PurgeRequest) (*PurgeResult, error)
}

// ListResult is the quarantine's content.
type ListResult struct {
	Entries  []Entry   `json:"entries"`
	Problems []Problem `json:"problems,omitempty"`
	// TTL is the purge age of the mount that answered (0 when the CLI read the store itself).
	TTL duration.D `json:"ttl,omitempty"`
}

// RestoreResult says what a restore did, entry by entry.
type RestoreResult struct {
	Restored []Entry   `json:"restored"`
	Failed   []Failure `json:"failed,omitempty"`
}

// Failure is an entry a restore left in quarantine, and why.
type Failure struct {
	Entry Entry  `json:"entry"`
	Error string `json:"error"`
}

// RestoreOrder sorts es for a restore: every other file before any `_metadata`, each group oldest first.
func RestoreOrder(es []Entry) []Entry {
	out := make([]Entry, 0, len(es))
	for _, meta := range []bool{false, true} {
		for _, e := range es {
			if flinklayout.IsMetadata(e.Key()) == meta {
				out = append(out, e)
			}
		}
	}
	return out
}

// Direct is the Service of an area opened by this process: the CLI's on a store no mount holds, and the
// mount's own behind its socket (with RestoreOne indexing a restored `_metadata`).
type Direct struct {
	Area       FullArea
	TTL        time.Duration    // purge age; a purge with none is refused
	Now        func() time.Time // nil: time.Now
	Referenced Referenced       // nil: nothing is asked (no index)
	// RestoreOne restores one entry; nil: Area.Restore.
	RestoreOne func(ctx context.Context, id string) (Entry, error)
	// Purged, when set, is told of every entry a purge destroyed, why and at whose request (the mount
	// logs and audits it; the CLI on a store no mount holds audits it). It is called after the entry
	// went, so a failure to record it loses nothing of the store.
	Purged func(ctx context.Context, e Entry, cause PurgeCause, by Decision)
}

var _ Service = (*Direct)(nil)

// FullArea is an Area that also reports what is no complete entry and clears leftover records: the
// local folder (localbackend/localquarantine) and the S3 area (s3backend/s3quarantine).
type FullArea interface {
	Area
	ListAll(ctx context.Context) ([]Entry, []Problem, error)
	Tidy(ctx context.Context, age time.Duration) error
}

// Staging is the area of a running mount: besides serving list, restore and purge it answers the loss
// check (through Find) and takes back a restored `_metadata` the index could not record (Restage).
type Staging interface {
	FullArea
	// Restage stages the object at key again (its current version).
	Restage(ctx context.Context, key string, d Decision) (Entry, error)
}

func (d *Direct) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

func (d *Direct) List(ctx context.Context) (*ListResult, error) {
	es, probs, err := d.Area.ListAll(ctx)
	if err != nil {
		return nil, err
	}
	return &ListResult{Entries: es, Problems: probs, TTL: duration.D(d.TTL)}, nil
}

// pick returns the listed entries named by ids (all when ids is empty) and a failure for each id not
// among them.
func (d *Direct) pick(ctx context.Context, ids []string) ([]Entry, []Failure, error) {
	es, err := d.Area.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	if len(ids) == 0 {
		return es, nil, nil
	}
	byID := make(map[string]Entry, len(es))
	for _, e := range es {
		byID[e.ID] = e
	}
	var out []Entry
	var missing []Failure
	for _, id := range ids {
		if e, ok := byID[id]; ok {
			out = append(out, e)
		} else {
			missing = append(missing, Failure{Entry: Entry{ID: id}, Error: ErrNoEntry.Error() + ": " + id})
		}
	}
	return out, missing, nil
}

func (d *Direct) Restore(ctx context.Context, ids []string) (*RestoreResult, error) {
	if len(ids) == 0 {
		return &RestoreResult{}, nil
	}
	es, missing, err := d.pick(ctx, ids)
	if err != nil {
		return nil, err
	}
	r := &RestoreResult{Failed: missing}
	restore := d.RestoreOne
	if restore == nil {
		restore = d.Area.Restore
	}
	for _, e := range RestoreOrder(es) {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if got, err := restore(ctx, e.ID); err != nil {
			r.Failed = append(r.Failed, Failure{Entry: e, Error: err.Error()})
		} else {
			r.Restored = append(r.Restored, got)
		}
	}
	return r, nil
}

func (d *Direct) Purge(ctx context.Context, ids []string) (*PurgeResult, error) {
	return d.purge(ctx, PurgeRequest{IDs: ids}, CauseTTL)
}

func (d *Direct) PurgeWith(ctx context.Context, req PurgeRequest) (*PurgeResult, error) {
	cause := CauseTTL
	if req.All || req.OlderThan > 0 {
		cause = CauseOperator
	}
	return d.purge(ctx, req, cause)
}

func (d *Direct) purge(ctx context.Context, req PurgeRequest, cause PurgeCause) (*PurgeResult, error) {
	es, missing, err := d.pick(ctx, req.IDs)
	if err != nil {
		return nil, err
	}
	if es == nil {
		es = []Entry{}
	}
	age := req.Age(d.TTL)
	var r PurgeResult
	if age <= 0 && !req.All {
		r, err = PurgeExpired(ctx, d.Area, es, age, d.now(), d.Referenced) // the error names the missing TTL
	} else {
		r, err = PurgeAged(ctx, d.Area, es, age, d.now(), d.Referenced)
	}
	if d.Purged != nil {
		for _, e := range r.Purged {
			c := cause
			if c == CauseOperator && d.TTL > 0 && d.now().Sub(e.DeletedAt) >= d.TTL {
				c = CauseTTL // past the TTL anyway: nothing early about it
			}
			d.Purged(ctx, e, c, req.By)
		}
	}
	for _, m := range missing {
		r.Kept = append(r.Kept, Kept{Entry: m.Entry, Reason: "error", Detail: m.Error})
	}
	if err == nil {
		// Records whose object is back at its key or gone (a crash between the two steps): cleared once
		// no move can still be under way for them.
		err = d.Area.Tidy(ctx, tidyAge)
	}
	return &r, err
}

// tidyAge is how old a record without its object must be before Tidy removes it: far longer than a
// move takes, so a record written just before its rename is never taken away.
const tidyAge = 10 * time.Minute
