// Package s3hold is the S3 backend's primitive of the holds (fs/hold): a legal hold (S3 Object Lock)
// on the current version of an object, and the healing of a delete marker a client beside the mount put
// on a held object. The engine (ledger, passes, release rule) is fs/hold's.
//
// A held version cannot be deleted by its version id, by any client or lifecycle rule. A delete
// without a version id still adds a delete marker above it (readers such as Flink then see the object
// as gone): the loss check finds it and Heal removes the marker, so the held version is current again.
package s3hold

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/hold"
	"github.com/ckguard/ckguard/refindex/verdict"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// Server is what holds need of the bucket (*s3client.Client is one). Keys are store keys.
type Server interface {
	Head(ctx context.Context, rel string) (s3client.Object, error)
	SetLegalHold(ctx context.Context, rel, versionID string, on bool) error
	Versions(ctx context.Context, rel string) ([]s3client.Version, error)
	DeleteVersion(ctx context.Context, rel, versionID string) error
}

// legalHold is the hold.Primitive of a bucket: the current version's legal hold.
type legalHold struct{ s Server }

func (p legalHold) Stat(ctx context.Context, key string) (string, int64, error) {
	o, err := p.s.Head(ctx, key)
	if err == nil && o.VersionID == "" {
		err = fmt.Errorf("HEAD %s answered no version id: the bucket is not versioned, no hold is possible", key)
	}
	return o.VersionID, o.Size, err
}

func (p legalHold) Hold(ctx context.Context, key, version string) error {
	return p.s.SetLegalHold(ctx, key, version, true)
}

func (p legalHold) Release(ctx context.Context, key, version string) error {
	return p.s.SetLegalHold(ctx, key, version, false)
}

// Options configure a Holder: the bucket, the audit log of heals, and the engine's options (its
// Primitive and Name are set by New).
type Options struct {
	Server Server
	Audit  audit.Sink
	Hold   hold.Options
}

// Holder is the engine over legal holds, with the healing only S3 needs.
type Holder struct {
	*hold.Engine
	o Options
}

// New returns a Holder.
func New(o Options) *Holder {
	if o.Hold.Logger == nil {
		o.Hold.Logger = slog.Default()
	}
	if o.Hold.Now == nil {
		o.Hold.Now = time.Now
	}
	o.Hold.Primitive, o.Hold.Name = legalHold{o.Server}, "legal holds"
	return &Holder{Engine: hold.New(o.Hold), o: o}
}

// Audit vocabulary of a heal.
const (
	HealOp       = "hold-heal"
	HealDecision = "healed"
	HealReason   = "delete-marker-removed"
)

// Heal brings back a held object a delete marker hides: it removes the delete markers above the
// newest object version (by their version ids), so that version (the held one, which the server kept)
// is current again. It does nothing for a key the ledger does not hold. healed is whether a marker was
// removed; each heal is audited.
func (h *Holder) Heal(ctx context.Context, key, checkpoint string) (healed bool, err error) {
	return h.heal(ctx, key, func(marker, held string) string {
		return fmt.Sprintf("referenced object %s of live checkpoint %s was deleted beside the mount (delete marker %s); the held version %s is current again (the marker was removed)", key, checkpoint, marker, held)
	}, checkpoint)
}

// GuardRetire is the index's RetireGuard: a held `_metadata` a sync found gone is brought back (its
// delete markers removed, as Heal does) before it is retired, when the guard's own rules would have
// refused its deletion through the mount: pinned, a protected savepoint, a --protect glob, or the
// newest checkpoint of an active job while no newer checkpoint of that job arrives in the same sync
// (one that does is Flink subsuming it: retired as before, so Flink's retention is not undone). Its
// files' holds then stay, since the checkpoint stays live.
func (h *Holder) GuardRetire(ctx context.Context, gone, incoming []string) {
	if h.Inactive() {
		return
	}
	newer := map[string]bool{} // job folders with a checkpoint arriving in this sync
	for _, k := range incoming {
		newer[jobOf(k)] = true
	}
	for _, k := range gone {
		if e, ok := h.Ledger().Get(k); !ok || e.State != hold.Held {
			continue
		}
		d := h.o.Hold.Index.Decide(ctx, k, verdict.OpUnlink)
		switch d.Reason {
		case verdict.ReasonPinned, verdict.ReasonProtectedSavepoint, verdict.ReasonProtectGlob:
		case verdict.ReasonProtectedMetadata:
			if newer[jobOf(k)] {
				continue
			}
		default:
			continue // the rules would have let it go through the mount: retired as before
		}
		why := d.Message
		if _, err := h.heal(ctx, k, func(marker, held string) string {
			return fmt.Sprintf("live checkpoint %s: its _metadata was deleted beside the mount (delete marker %s), but the guard's rules protect it (%s); the held version %s is current again (the marker was removed), so the checkpoint stays live", k, marker, why, held)
		}, k); err != nil && ctx.Err() == nil {
			h.o.Hold.Logger.Warn("legal holds: could not bring back a protected _metadata deleted beside the mount; the sync retires it", "file", k, "err", err)
		}
	}
}

// jobOf is the job folder of a checkpoint's `_metadata` key (job/chk-N/_metadata → job).
func jobOf(meta string) string { return path.Dir(path.Dir(meta)) }

// heal removes the delete markers above key's held version; msg words the audit record and log line.
func (h *Holder) heal(ctx context.Context, key string, msgf func(marker, held string) string, checkpoint string) (healed bool, err error) {
	if h.Inactive() {
		return false, nil
	}
	var held string
	if e, ok := h.Ledger().Get(key); ok && e.State != hold.Releasing {
		held = e.Version
	}
	if held == "" {
		return false, nil
	}
	requests := 1
	vs, err := h.o.Server.Versions(ctx, key)
	if err != nil {
		h.CountRequests(requests)
		return false, fmt.Errorf("heal %s: %w", key, err)
	}
	// Newest first: the markers on top, down to the first object version.
	var markers []string
	found := false
	for _, v := range vs {
		if !v.DeleteMarker {
			found = v.VersionID == held
			break
		}
		markers = append(markers, v.VersionID)
	}
	if len(markers) == 0 {
		h.CountRequests(requests)
		return false, nil
	}
	if !found {
		// A newer version than the held one lies below the markers: removing them would make another
		// object current than the one the checkpoint referenced when the hold was set. Leave it to the
		// operator (the loss check keeps reporting the key).
		h.o.Hold.Logger.Warn("legal holds: a referenced object is hidden by a delete marker, but the newest version below it is not the held one; not healed", "file", key, "held_version", held)
		h.CountRequests(requests)
		return false, nil
	}
	for _, m := range markers {
		requests++
		if err := h.o.Server.DeleteVersion(ctx, key, m); err != nil {
			h.CountRequests(requests)
			return healed, fmt.Errorf("heal %s: remove delete marker %s: %w", key, m, err)
		}
		healed = true
		msg := msgf(m, held)
		h.o.Hold.Logger.Warn(msg, "file", key, "checkpoint", checkpoint, "delete_marker", m, "version", held)
		if h.o.Audit != nil {
			rec := audit.Record{Time: h.o.Hold.Now(), Op: HealOp, Decision: HealDecision, Reason: HealReason, Message: msg, Referencing: []string{checkpoint}, RefCount: 1}
			rec.SetNames(key, "")
			if err := h.o.Audit.Record(&rec); err != nil {
				h.o.Hold.Logger.Error("audit record of a heal not written", "file", key, "err", err)
			}
		}
	}
	h.NoteHealed(requests)
	return healed, nil
}
