package guard

import (
	"context"

	"github.com/ckguard/ckguard/refindex/verdict"
)

// Redecide asks the index again about changes it allowed earlier that are applied only now (the S3
// mount's queued deletions), and runs apply with the answers while holding the shared lock: a _metadata
// indexed through the mount (exclusive lock) comes before all of them or after the changes they allow,
// never between an answer and its change. A _metadata whose update is pending (started, not yet in the
// index: Written runs it outside the lock) is not seen by the index, so what it would allow is refused as
// index-pending (overrule), exactly as for a first decision; the queue asks again later. Nothing is recorded here: the allow was recorded when it was
// first decided, and the caller records what it does not apply (RecordKept).
func (e *Enforcer) Redecide(ctx context.Context, checks []Check, apply func([]verdict.Decision)) {
	checks = e.prepare(ctx, checks)
	e.mu.RLock()
	defer e.mu.RUnlock()
	// Read before the index is asked: an update that is no longer pending is in the index (pendingUpdates).
	pending := e.pending.any()
	ds := make([]verdict.Decision, len(checks))
	for i, c := range checks {
		ds[i] = e.decision(ctx, c, pending)
	}
	apply(ds)
}

// RecordKept writes the audit record of an acknowledged change that is not applied after all: d is the
// refusal of Redecide (or the server's) and message says what was acknowledged and what stays. The
// record's op is the check's op with "-applied" appended, its decision "keep".
func (e *Enforcer) RecordKept(ctx context.Context, c Check, d verdict.Decision, message string) {
	e.metrics.Decision(c.Op.String()+"-applied", false, string(d.Reason))
	rec := e.record(ctx, c.Op.String()+"-applied", c.Path, c.To)
	defer e.putRecord(rec)
	rec.Decision = "keep"
	rec.Reason = string(d.Reason)
	rec.Message = message
	rec.Referencing = d.Referencing
	rec.RefCount = d.RefCount
	if e.audit != nil {
		if err := e.audit.Record(rec); err != nil {
			e.log.Error("audit log write failed", "op", rec.Op, "path", c.Path, "err", err)
		}
	}
	e.log.Warn("an acknowledged deletion is not applied; the object is kept", "path", c.Path, "reason", d.Reason, "msg", message)
}
