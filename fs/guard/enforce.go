package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// Check is one question to the index: may Op happen to Path? Decided, when set, is a decision the filesystem
// took itself (StoreChanged, HardLinked: see rules.go); it is recorded exactly like one from the index.
type Check struct {
	Op      verdict.Op
	Path    string
	To      string // rename target, for the audit record
	Decided *verdict.Decision
	// MetadataCommit marks the source of a rename onto a _metadata in the same folder: a writer (Flink's
	// recoverable writer) committing a checkpoint written under a temporary name. Such a source is
	// necessarily young and unreferenced, so the grace rule alone would refuse the commit; a refusal for
	// grace (and only for grace) is turned into an allow, recorded with ReasonMetadataCommit (overrule).
	MetadataCommit bool
	// Observed is what the mount saw of Path just before asking, through what the change then acts
	// through (the local mount's stat through its folder descriptor, the S3 version its conditional
	// request names). The index judges it (store.StatObserved) instead of looking by path again, so
	// the decision is about the very object the change acts on. nil: the index looks itself.
	Observed *store.ObjectInfo
	// Result, when set, receives the decision taken (the act of a deletion copies it into the entry that
	// stages the object in quarantine).
	Result *verdict.Decision
}

// OpenOp is the decision an open of an existing file for writing asks for: OpTruncate with O_TRUNC (the
// content goes at once), OpWrite otherwise. Both mounts decide their opens with it.
func OpenOp(flags uint32) verdict.Op {
	if flags&syscall.O_TRUNC != 0 {
		return verdict.OpTruncate
	}
	return verdict.OpWrite
}

// Config configures an Enforcer.
type Config struct {
	Checker     Checker
	Audit       audit.Sink       // nil: no audit log
	Metrics     *metrics.Metrics // nil: no metrics
	RefuseErrno syscall.Errno    // errno for refusals; 0 means EPERM
	Logger      *slog.Logger     // nil: slog.Default()
	// PendingWait is how long a decision waits for index updates made through the mount (a _metadata
	// being read) before it is taken; one still pending then refuses what the index would allow.
	// 0: 10 s; negative: no wait.
	PendingWait time.Duration
	// BeforeChange, when set, is called under the lock for every path of an allowed change, right
	// before the mount makes it (the local store's immutable flag is cleared there: localbackend/localhold). It
	// must not block: a map lookup, at most a syscall or two on a local file.
	BeforeChange func(op verdict.Op, key string)
	// BeforeDecide, when set, is called for every check a verb is about to decide, before the lock
	// is taken (and before the wait for pending updates): it may block, within its own bound (guardd
	// refreshes a Flink REST view older than one sync there: fs/guardd/flink.go). It never runs
	// under the lock, so a hung endpoint delays only the decisions that wait for it. A refusal it
	// returns (what it had to do first did not finish) is the check's decision.
	BeforeDecide func(ctx context.Context, op verdict.Op, key string) (refuse *verdict.Decision)
}

// Enforcer is the single place where guarded operations are decided: it asks the Checker, writes the audit
// record (before the caller gets an answer), counts metrics and maps the decision to an errno. Both the local
// loopback filesystem and the S3 filesystem use it.
type Enforcer struct {
	checker Checker
	audit   audit.Sink
	metrics *metrics.Metrics
	refuse  syscall.Errno
	log     *slog.Logger

	// mu orders index changes made through the mount against decisions: a decision and the change it allows
	// run under the shared lock; renames take it exclusively, and so does registering an index update as
	// pending. The update itself (reading and parsing a _metadata) runs after the lock is released, and
	// every change the index would allow is refused while one is pending. So no decision taken before an
	// update can act after it, none taken during it allows anything, and a _metadata whose close has
	// returned is indexed before any later decision.
	mu sync.RWMutex
	// pending holds the index updates started under mu and not yet applied (see pendingUpdates).
	pending pendingUpdates
	// pendingWait bounds how long a decision waits for pending updates (Config.PendingWait).
	pendingWait time.Duration
	// inExclusive is set while MutateExclusive holds mu; deferred (guarded by mu) collects the index
	// updates its do function started, which it finishes once mu is released.
	inExclusive atomic.Bool
	deferred    []*indexUpdate

	comms commCache

	beforeChange func(op verdict.Op, key string)
	beforeDecide func(ctx context.Context, op verdict.Op, key string) *verdict.Decision

	// records recycles audit records: one is built for every decision, and a steady stream of them
	// (rm -rf of a job folder) would otherwise be garbage the daemon pays for in GC cycles.
	records sync.Pool
}

// NewEnforcer checks cfg and returns an Enforcer.
func NewEnforcer(cfg Config) (*Enforcer, error) {
	if cfg.Checker == nil {
		return nil, errors.New("guard: no Checker: the filesystem cannot decide anything without the index")
	}
	e := &Enforcer{checker: cfg.Checker, audit: cfg.Audit, metrics: cfg.Metrics, refuse: cfg.RefuseErrno, log: cfg.Logger,
		pendingWait: cfg.PendingWait, beforeChange: cfg.BeforeChange, beforeDecide: cfg.BeforeDecide}
	if e.pendingWait == 0 {
		e.pendingWait = defaultPendingWait
	}
	if e.refuse == 0 {
		e.refuse = syscall.EPERM
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	e.comms.entries = make(map[uint32]commEntry)
	e.records.New = func() any { return new(audit.Record) }
	return e, nil
}

// RefuseErrno is the errno refusals are answered with.
func (e *Enforcer) RefuseErrno() syscall.Errno { return e.refuse }

// Checker returns the index the enforcer asks.
func (e *Enforcer) Checker() Checker { return e.checker }

// Mutate decides every check in order (stopping at the first refusal), records each decision, and runs do
// only when all are allowed. It returns the refusal errno, or do's result.
func (e *Enforcer) Mutate(ctx context.Context, checks []Check, do func() syscall.Errno) syscall.Errno {
	checks = e.prepare(ctx, checks)
	e.pending.wait(ctx, e.pendingWait)
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.mutateLocked(ctx, checks, do)
}

// MutateExclusive is Mutate holding the lock exclusively, for changes that also change the index (renames,
// which may move or create a _metadata): no other decision interleaves with it.
// The index updates its do function records (Renamed, a hard link's) are finished after the lock is released:
// the returned errno is do's, or EIO when do succeeded and an update could not be recorded.
func (e *Enforcer) MutateExclusive(ctx context.Context, checks []Check, do func() syscall.Errno) (errno syscall.Errno) {
	checks = e.prepare(ctx, checks)
	e.pending.wait(ctx, e.pendingWait)
	e.mu.Lock()
	e.inExclusive.Store(true)
	// Deferred, so that a panic in do still releases the lock and finishes what it started.
	defer func() {
		e.inExclusive.Store(false)
		updates := e.deferred
		e.deferred = nil
		e.mu.Unlock()
		for _, u := range updates {
			if uerr := e.finish(u); errno == 0 {
				errno = uerr
			}
		}
	}()
	return e.mutateLocked(ctx, checks, do)
}

// prepare runs Config.BeforeDecide for the checks the index will be asked about and returns them
// with its refusals as their decisions (a copy when it refused one: the caller's slice is not
// changed). The caller holds no lock of the enforcer.
func (e *Enforcer) prepare(ctx context.Context, checks []Check) []Check {
	if e.beforeDecide == nil {
		return checks
	}
	out := checks
	for i, c := range checks {
		if c.Decided != nil {
			continue
		}
		if d := e.beforeDecide(ctx, c.Op, c.Path); d != nil {
			if &out[0] == &checks[0] {
				out = append([]Check(nil), checks...)
			}
			out[i].Decided = d
		}
	}
	return out
}

// prepare1 is prepare for one check.
func (e *Enforcer) prepare1(ctx context.Context, c Check) Check {
	if e.beforeDecide == nil || c.Decided != nil {
		return c
	}
	if d := e.beforeDecide(ctx, c.Op, c.Path); d != nil {
		c.Decided = d
	}
	return c
}

// decision is c's decision under the lock: the one made before it (Decided) or else the index's,
// overruled as the rules say while an update is pending (pending: read before the index was asked).
func (e *Enforcer) decision(ctx context.Context, c Check, pending bool) verdict.Decision {
	var d verdict.Decision
	if c.Decided != nil {
		d = *c.Decided
	} else {
		d = e.ask(ctx, c)
	}
	return e.overrule(c, d, pending)
}

func (e *Enforcer) mutateLocked(ctx context.Context, checks []Check, do func() syscall.Errno) syscall.Errno {
	// All questions first, then the record: an operation refused for one of its paths (a rename onto a
	// referenced file) is logged as that refusal, not as an allowed source followed by a refusal.
	// Every guarded operation asks about one or two paths; the array keeps the decisions off the heap.
	var arr [2]verdict.Decision
	ds := arr[:0]
	if len(checks) > len(arr) {
		ds = make([]verdict.Decision, 0, len(checks))
	}
	ds = ds[:len(checks)]
	refused := false
	// Read before the index is asked: an update that is no longer pending is in the index (pendingUpdates).
	pending := e.pending.any()
	for i, c := range checks {
		ds[i] = e.decision(ctx, c, pending)
		if c.Result != nil {
			*c.Result = ds[i]
		}
		if !ds[i].Allow {
			refused = true
			ds = ds[:i+1]
			break
		}
	}
	for i, d := range ds {
		if refused && d.Allow {
			continue
		}
		if errno := e.record1(ctx, checks[i], d); errno != 0 {
			return errno
		}
	}
	if do == nil {
		return 0
	}
	if e.beforeChange != nil {
		for _, c := range checks {
			e.beforeChange(c.Op, c.Path)
		}
	}
	return do()
}

// Errno decides one check without a change to run under the lock, for a change that must not run there
// (an S3 upload at close, which can take minutes; it replaces only the version decided, If-Match) or
// that reaches the store only later (an S3 truncation of open writers' spools, uploaded at close and
// decided again then). It returns the errno the caller answers with: 0 to go ahead, the refusal errno
// (or EINTR, EIO) otherwise. A change that can run under the lock uses a verb (verbs.go).
func (e *Enforcer) Errno(ctx context.Context, c Check) syscall.Errno {
	c = e.prepare1(ctx, c)
	e.pending.wait(ctx, e.pendingWait)
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.decide(ctx, c)
}

func (e *Enforcer) decide(ctx context.Context, c Check) syscall.Errno {
	pending := e.pending.any() // before the index is asked, as in mutateLocked
	var d verdict.Decision
	if c.Decided != nil {
		d = *c.Decided
	} else {
		d = e.ask(ctx, c)
	}
	return e.record1(ctx, c, e.overrule(c, d, pending))
}

// record1 counts and logs one decision and maps it to an errno. The audit record is written (handed to the
// kernel) before the caller learns the answer.
func (e *Enforcer) record1(ctx context.Context, c Check, d verdict.Decision) syscall.Errno {
	var errno syscall.Errno
	if !d.Allow {
		errno = refusalErrno(ctx, e.refuse)
	}
	e.metrics.Decision(c.Op.String(), d.Allow, string(d.Reason))
	rec := e.record(ctx, c.Op.String(), c.Path, c.To)
	defer e.putRecord(rec)
	rec.Reason = string(d.Reason)
	rec.Message = d.Message
	rec.Referencing = d.Referencing
	rec.RefCount = d.RefCount
	if d.Allow {
		rec.Decision = "allow"
	} else {
		rec.Decision = "refuse"
		rec.Errno = ErrnoName(errno)
	}
	if e.audit != nil {
		if err := e.audit.Record(rec); err != nil {
			// An unrecorded refusal still protects the data; an unrecorded deletion breaks the promise that
			// the log has every decision, so a deletion whose record cannot be written does not happen.
			e.log.Error("audit log write failed", "op", rec.Op, "path", c.Path, "err", err)
			if d.Allow {
				return syscall.EIO
			}
		}
	}
	if !d.Allow {
		e.log.Info("refused", "op", rec.Op, "path", c.Path, "reason", d.Reason, "msg", d.Message, "pid", rec.PID, "comm", rec.Comm)
	}
	return errno
}

// ask calls the Checker about c (with what the mount observed, if anything), turning a panic into a
// refusal: the guard fails closed.
func (e *Enforcer) ask(ctx context.Context, c Check) (d verdict.Decision) {
	op, p := c.Op, c.Path
	t0 := time.Now()
	defer func() {
		e.metrics.DecisionLatency(op.String(), time.Since(t0))
		if r := recover(); r != nil {
			e.log.Error("index panicked while deciding", "op", op, "path", p, "panic", r)
			d = panicRefusal(op, p, r)
		}
	}()
	if c.Observed != nil {
		return e.checker.Decide(ctx, p, op, *c.Observed)
	}
	return e.checker.Decide(ctx, p, op)
}

// Deleted tells the index that p was removed through the mount. A failure is logged and counted; the index
// still believes p exists, which can only make it refuse more, and the next sync repairs it.
func (e *Enforcer) Deleted(ctx context.Context, p string) {
	if err := e.checker.Deleted(context.WithoutCancel(ctx), p); err != nil {
		e.notifyFailed(ctx, "deleted", p, "", err)
	}
}

// Written tells the index that p was written and closed through the mount. A _metadata is read, parsed
// and indexed before this returns, but without the enforcer's lock: while it is, every change the index
// would allow is refused (ReasonIndexPending), so nothing it references can go meanwhile, and decisions
// never wait for a parse. If the index cannot record it, the caller gets EIO: the checkpoint would
// otherwise be unprotected while the writer believes it is safely stored.
func (e *Enforcer) Written(ctx context.Context, p string) syscall.Errno {
	run := func(ctx context.Context) error { return e.checker.Written(ctx, p) }
	if !flinklayout.IsMetadata(p) {
		// Nothing to index (the checker only looks at _metadata): no pending window.
		if err := run(context.WithoutCancel(ctx)); err != nil {
			e.notifyFailed(ctx, "written", p, "", err)
			return syscall.EIO
		}
		return 0
	}
	return e.update(&indexUpdate{kind: "written", path: p, key: p, ctx: ctx, run: run}, false)
}

// linked tells the index that p, a _metadata, got its name from a hard link made through the mount
// (Link). Called from the do function of MutateExclusive: the update is pending from then on (see
// Written) and is indexed by the time MutateExclusive returns. If it cannot be, undo (when set) runs
// while the update is still pending, and MutateExclusive returns EIO.
func (e *Enforcer) linked(ctx context.Context, p string, undo func()) syscall.Errno {
	return e.update(&indexUpdate{kind: "linked", path: p, key: p, ctx: ctx, undo: undo,
		run: func(ctx context.Context) error { return e.checker.Written(ctx, p) }}, true)
}

// Renamed tells the index about a rename done through the mount (which may move a _metadata, or a folder
// holding some). Call it from the do function of MutateExclusive: as for a hard link (Link), the index reads the
// target after the lock is released, pending until then, and MutateExclusive returns EIO if it failed.
func (e *Enforcer) Renamed(ctx context.Context, from, to string) syscall.Errno {
	return e.update(&indexUpdate{kind: "renamed", path: from, to: to, key: to, ctx: ctx,
		run: func(ctx context.Context) error { return e.checker.Renamed(ctx, from, to) }}, true)
}

func (e *Enforcer) notifyFailed(ctx context.Context, kind, p, to string, err error) {
	e.metrics.NotifyError(kind)
	e.log.Error("index could not record a change made through the mount", "change", kind, "path", p, "to", to, "err", err)
	if e.audit != nil {
		rec := e.record(ctx, "index-"+kind, p, to)
		defer e.putRecord(rec)
		rec.Decision = "error"
		rec.Reason = "index-notify-failed"
		rec.Message = err.Error()
		if aerr := e.audit.Record(rec); aerr != nil {
			e.log.Error("audit log write failed", "err", aerr)
		}
	}
}

// Explain returns the state and referencing checkpoints of p (the user.ckguard.* attributes, Getxattr).
func (e *Enforcer) Explain(ctx context.Context, p string) (string, []string, error) {
	return e.checker.Explain(ctx, p)
}

// record returns a record of op from the pool, filled with the time and the caller; hand it back with
// putRecord once the sink has it (audit.Sink must not keep the record after Record returns).
func (e *Enforcer) record(ctx context.Context, op, p, to string) *audit.Record {
	now := time.Now() // one clock reading for the record and the comm cache (about 100 ns each on a VM)
	r := e.records.Get().(*audit.Record)
	*r = audit.Record{Time: now.UTC(), Op: op}
	r.SetNames(p, to)
	if c, ok := fuse.FromContext(ctx); ok && c != nil {
		r.PID, r.UID, r.GID = c.Pid, c.Uid, c.Gid
		r.Comm = e.comms.get(c.Pid, now)
	}
	return r
}

func (e *Enforcer) putRecord(r *audit.Record) {
	*r = audit.Record{} // drop the strings it points at
	e.records.Put(r)
}

// ErrnoName is how the audit log names an errno (Record.Errno): its symbolic name for the errnos the
// enforcer answers with, the number otherwise.
func ErrnoName(e syscall.Errno) string {
	switch e {
	case syscall.EPERM:
		return "EPERM"
	case syscall.ENOENT:
		return "ENOENT" // a lookup of a reserved folder (RefuseReserved)
	case syscall.EACCES:
		return "EACCES"
	case syscall.EROFS:
		return "EROFS"
	case syscall.EBUSY:
		return "EBUSY"
	case syscall.EIO:
		return "EIO"
	case syscall.EINTR:
		return "EINTR" // an interrupted caller (see record1): it retries
	}
	return strconv.Itoa(int(e))
}

// ParseErrno maps a --refuse-errno value (EPERM, EACCES, EROFS, EBUSY or a number) to an errno.
func ParseErrno(s string) (syscall.Errno, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "", "EPERM":
		return syscall.EPERM, nil
	case "EACCES":
		return syscall.EACCES, nil
	case "EROFS":
		return syscall.EROFS, nil
	case "EBUSY":
		return syscall.EBUSY, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > 4095 {
		return 0, fmt.Errorf("--refuse-errno %q: want EPERM, EACCES, EROFS, EBUSY or a positive errno number", s)
	}
	return syscall.Errno(n), nil
}

// Comm is the command name of process pid as the audit records name it ("" for pid 0).
func (e *Enforcer) Comm(pid uint32) string { return e.comms.get(pid, time.Now()) }

// Staged is the quarantine record of a change of kind op (quarantine.OpUnlink, OpReplace, OpTruncate,
// OpAllocate) staged for the FUSE request in ctx: the decision's reason and message and the caller's
// identity, built here once for every mount, as the audit record is.
func (e *Enforcer) Staged(ctx context.Context, op, reason, message string) quarantine.Decision {
	rec := quarantine.Decision{Op: op, Reason: reason, Message: message}
	if rec.Reason == "" {
		rec.Reason = quarantine.ReasonAllowed
	}
	if c, ok := fuse.FromContext(ctx); ok && c != nil {
		rec.PID, rec.UID, rec.GID = c.Pid, c.Uid, c.Gid
		rec.Comm = e.comms.get(c.Pid, time.Now())
	}
	return rec
}

// commCache remembers /proc/<pid>/comm for a short while: one rm -rf makes thousands of decisions, and reading
// /proc for each would cost more than the decision itself. Entries expire so a reused pid is not misnamed for
// long.
type commCache struct {
	mu      sync.Mutex
	entries map[uint32]commEntry
}

type commEntry struct {
	comm string
	at   time.Time
}

const commTTL = 2 * time.Second

func (c *commCache) get(pid uint32, now time.Time) string {
	if pid == 0 {
		return ""
	}
	c.mu.Lock()
	if ent, ok := c.entries[pid]; ok && now.Sub(ent.at) < commTTL {
		c.mu.Unlock()
		return ent.comm
	}
	c.mu.Unlock()
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/comm")
	comm := strings.TrimSpace(string(b))
	if err != nil {
		comm = "?"
	}
	c.mu.Lock()
	if len(c.entries) > 4096 {
		for k, ent := range c.entries {
			if now.Sub(ent.at) >= commTTL {
				delete(c.entries, k)
			}
		}
	}
	c.entries[pid] = commEntry{comm: comm, at: now}
	c.mu.Unlock()
	return comm
}
