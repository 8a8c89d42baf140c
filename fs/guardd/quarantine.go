package guardd

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// stagingMount is implemented by the mounts that stage deletions (local, S3, HDFS): StagingArea is nil
// when they do not.
type stagingMount interface{ StagingArea() quarantine.Staging }

// stagingOf is m's quarantine area, nil when m stages no deletions.
func stagingOf(m any) quarantine.Staging {
	if sm, ok := m.(stagingMount); ok {
		return sm.StagingArea()
	}
	return nil
}

// QuarantineSocket is the quarantine control socket beside the query socket controlSocket.
func QuarantineSocket(controlSocket string) string {
	return filepath.Join(filepath.Dir(controlSocket), control.QuarantineSocketName)
}

// stager runs a mount's quarantine: its socket, its background purge and its gauges.
type stager struct {
	svc *quarantine.Direct
	met *metrics.Metrics
	log *slog.Logger
	// warned are the entries past the TTL already logged as kept (once each, not after every sync).
	warned map[string]bool
	// bound is the quarantine's space bound (enforceBound); overBound: the last sweep could not get
	// within it (said once until it is within again).
	bound     quarantine.Bound
	overBound bool
	// spaceFailed: the last read of the store's free space failed (said once until it succeeds).
	spaceFailed bool
	// sweep, with --shared, is the lease that lets one mount of the store purge at a time (fleet.go).
	sweep *sweepLease
}

// newStager serves the quarantine of area on its socket. A restore through it runs under the enforcer's
// exclusive lock and indexes a restored `_metadata` before it returns (guard.Enforcer.Linked: every change
// the index would allow is refused until then); if it cannot be indexed the object goes back into
// quarantine, so nothing live is left unknown to the index. A purge asks the index whether a live
// checkpoint references an entry again (any answer but "deletable" keeps it).
//
// With --shared (rc not nil) a restore is claimed in the store's shared area before its object moves
// (restoreClaims), so two mounts never restore one entry and the second names the first.
func newStager(c Config, area quarantine.Staging, enf *guard.Enforcer, sink audit.Sink, met *metrics.Metrics, log *slog.Logger, rc *restoreClaims) *stager {
	svc := &quarantine.Direct{Area: area, TTL: c.Quarantine, Now: c.QuarantineNow,
		Referenced: func(ctx context.Context, key string) (bool, error) {
			state, refs, err := enf.Explain(ctx, key)
			if err != nil {
				return false, err
			}
			if len(refs) > 0 {
				return true, nil
			}
			if state != verdict.StateDeletable {
				return false, fmt.Errorf("the index says %s is %s", key, state)
			}
			return false, nil
		},
		RestoreOne: func(ctx context.Context, id string) (quarantine.Entry, error) {
			// Only a _metadata's return changes decisions; its put runs with the index update pending
			// (RestoreMetadata), never under the enforcer's lock (an S3 copy can take seconds).
			key, err := entryKey(ctx, area, id)
			if err != nil {
				return quarantine.Entry{}, rc.explain(ctx, id, err)
			}
			finish, err := rc.claim(ctx, id, key)
			if err != nil {
				return quarantine.Entry{}, err
			}
			got, err := restoreOne(ctx, area, enf, id, key, log)
			finish(err)
			return got, err
		}}
	svc.Purged = PurgeRecorder(log, sink)
	return &stager{svc: svc, met: met, log: log, warned: map[string]bool{}, bound: c.QuarantineBound}
}

// restoreOne restores entry id (at key): a file at once, a `_metadata` with its index update pending.
func restoreOne(ctx context.Context, area quarantine.Staging, enf *guard.Enforcer, id, key string, log *slog.Logger) (quarantine.Entry, error) {
	var got quarantine.Entry
	var rerr error
	if !flinklayout.IsMetadata(key) {
		got, rerr = area.Restore(ctx, id)
		if rerr != nil {
			return quarantine.Entry{}, rerr
		}
		log.Info("restored from quarantine", "path", got.Key(), "entry", got.ID, "deleted_at", got.DeletedAt)
		return got, nil
	}
	err := enf.RestoreMetadata(ctx, key, func() error {
		got, rerr = area.Restore(ctx, id)
		return rerr
	}, func() {
		if _, err := area.Restage(ctx, got.Key(), got.Decision); err != nil {
			log.Error("quarantine: a restored _metadata the index could not record could not be moved back either; the next sync indexes it", "path", got.Key(), "err", err)
		}
	})
	if rerr != nil {
		return quarantine.Entry{}, rerr
	}
	if err != nil {
		return quarantine.Entry{}, fmt.Errorf("restore /%s: the index could not record the restored checkpoint (%v), so it went back into quarantine; retry once `ckguard stats` shows a recent sync", got.Key(), err)
	}
	log.Info("restored from quarantine", "path", got.Key(), "entry", got.ID, "deleted_at", got.DeletedAt)
	return got, nil
}

// PurgeRecorder is the quarantine.Direct.Purged of a mount and of `ckguard quarantine purge` on a store
// no mount holds: every purge destroys data for good, so each is logged and audited the same way
// wherever it ran, with its cause (ttl, space, or operator for purge --older-than/--all) and the
// process that asked (as its client reported it over the root-only quarantine socket, or the CLI
// itself). sink nil: logged only.
func PurgeRecorder(log *slog.Logger, sink audit.Sink) func(context.Context, quarantine.Entry, quarantine.PurgeCause, quarantine.Decision) {
	return func(_ context.Context, e quarantine.Entry, cause quarantine.PurgeCause, by quarantine.Decision) {
		log.Info("purged from quarantine", "path", e.Key(), "entry", e.ID, "deleted_at", e.DeletedAt, "bytes", e.Size, "cause", string(cause), "by_uid", by.UID, "by_comm", by.Comm)
		if sink == nil {
			return
		}
		rec := &audit.Record{Time: time.Now(), Op: "quarantine-purge", Decision: "allow", Reason: "quarantine-purge-" + string(cause),
			Message: fmt.Sprintf("entry %s (%d bytes, deleted %s) purged for good", e.ID, e.Size, e.DeletedAt.UTC().Format(time.RFC3339)),
			PID:     by.PID, UID: by.UID, GID: by.GID, Comm: by.Comm}
		rec.SetNames(e.Key(), "")
		if err := sink.Record(rec); err != nil {
			log.Error("audit log write failed", "op", rec.Op, "path", e.Key(), "err", err)
		}
	}
}

// tick purges what is past the TTL and refreshes the gauges; the mount runs it after every sync (it
// reads every entry record: a few milliseconds per thousand entries).
func (s *stager) tick(ctx context.Context) {
	svc := s.svc
	if s.sweep != nil {
		// --shared: only the holder of the sweeper lease purges, and each entry's purge is fenced by it.
		var ok bool
		if svc, ok = s.sweep.fenced(ctx, s.svc); !ok {
			s.refresh(ctx)
			return
		}
	}
	r, err := svc.Purge(ctx, nil)
	if err != nil {
		s.log.Error("quarantine purge failed", "err", err)
	}
	if r != nil {
		// Each purge is logged and audited by svc.Purged.
		for _, k := range r.Kept {
			if k.Reason != "young" && !s.warned[k.Entry.ID] {
				s.warned[k.Entry.ID] = true
				s.log.Warn("quarantine entry past its TTL kept", "path", k.Entry.Path, "entry", k.Entry.ID, "reason", k.Reason, "detail", k.Detail)
			}
		}
	}
	if !s.bound.IsZero() {
		s.enforceBound(ctx, svc)
	}
	s.refresh(ctx)
}

// enforceBound purges the oldest entries, before their TTL, while the quarantine is over its bound
// (--quarantine-max-bytes, or the store's filesystem under --quarantine-min-free): the safety net must
// not be what fills the store. Entries a live checkpoint references again are never purged.
func (s *stager) enforceBound(ctx context.Context, svc *quarantine.Direct) {
	es, err := s.svc.Area.List(ctx)
	if err != nil {
		s.log.Error("quarantine: cannot list the quarantine folder to check its space bound", "err", err)
		return
	}
	var sp *quarantine.Space
	if a, ok := s.svc.Area.(quarantine.Spacer); ok {
		if got, err := a.Space(ctx); err == nil {
			sp = &got
			s.spaceFailed = false
		} else if !s.spaceFailed {
			// Once until it can be read again, not after every sync (an HDFS store with a folder the
			// daemon may not read fails its getContentSummary until the folder goes).
			s.spaceFailed = true
			s.log.Warn("quarantine: cannot read the store filesystem's free space; until it can be read only --quarantine-max-bytes applies", "err", err)
		}
	}
	need := s.bound.Need(quarantine.Summarise(es).Bytes, sp)
	if need <= 0 {
		if s.overBound {
			s.log.Info("quarantine within its space bound again")
		}
		s.overBound = false
		return
	}
	r, err := quarantine.PurgeOldest(ctx, s.svc.Area, es, need, svc.Referenced)
	var freed int64
	for _, e := range r.Purged {
		freed += e.Size
		if s.svc.Purged != nil {
			s.svc.Purged(ctx, e, quarantine.CauseSpace, quarantine.Decision{Op: "purge", Reason: "space", Comm: "ckguard-mount"})
		}
	}
	if len(r.Purged) > 0 {
		s.log.Warn("quarantine over its space bound: purged the oldest entries before their TTL", "entries", len(r.Purged), "freed_bytes", freed, "needed_bytes", need,
			"max_bytes", s.bound.MaxBytes, "min_free", s.bound.MinFree.String())
	}
	if err != nil {
		s.log.Error("quarantine: early purge stopped", "err", err)
	}
	if freed < need && !s.overBound {
		s.overBound = true
		s.log.Error("quarantine cannot get within its space bound: what is left in it is referenced again or cannot be purged, or the store is full for other reasons; free space through the mount",
			"short_bytes", need-freed, "kept", len(r.Kept))
	} else if freed >= need {
		s.overBound = false
	}
}

func (s *stager) refresh(ctx context.Context) {
	es, err := s.svc.Area.List(ctx)
	if err != nil {
		s.log.Error("quarantine: cannot list the quarantine folder", "err", err)
		return
	}
	st := quarantine.Summarise(es)
	s.met.SetQuarantine(st.Objects, st.Bytes, st.Oldest)
}

// finder answers the loss check's question "is this missing object in quarantine?" from the mount's
// area, once the mount has opened it (the loss checker is made before the mount).
type finder struct {
	area    atomic.Pointer[stagingBox]
	restore string // the command line before the key: ckguard quarantine restore --store S --index I
}

func (f *finder) FindQuarantined(ctx context.Context, key string) (refindex.QuarantinedObject, bool, error) {
	b := f.area.Load()
	if b == nil {
		return refindex.QuarantinedObject{}, false, nil
	}
	e, ok, err := quarantine.Find(ctx, b.a, key)
	if err != nil || !ok {
		return refindex.QuarantinedObject{}, false, err
	}
	return refindex.QuarantinedObject{Since: e.DeletedAt, Restore: f.restore + " " + key}, true, nil
}

// chainFinder asks each finder in turn; the first that holds the key answers.
type chainFinder []refindex.QuarantineFinder

func (c chainFinder) FindQuarantined(ctx context.Context, key string) (refindex.QuarantinedObject, bool, error) {
	for _, f := range c {
		q, ok, err := f.FindQuarantined(ctx, key)
		if err != nil || ok {
			return q, ok, err
		}
	}
	return refindex.QuarantinedObject{}, false, nil
}

// stagingBox holds an area for an atomic.Pointer.
type stagingBox struct{ a quarantine.Staging }

// entryKey is the original key of quarantine entry id (ErrNoEntry when the area holds none).
func entryKey(ctx context.Context, area quarantine.Area, id string) (string, error) {
	es, err := area.List(ctx)
	if err != nil {
		return "", err
	}
	for _, e := range es {
		if e.ID == id {
			return e.Key(), nil
		}
	}
	return "", fmt.Errorf("quarantine entry %s: %w", id, quarantine.ErrNoEntry)
}
