// Package hdfssnap is the HDFS mount's second line of defence outside the mount (--hold): snapshots of
// the store root, so that a referenced file deleted beside the mount (`hdfs dfs -rm -skipTrash` from
// any node, a JobManager disposing state directly) can be copied back from the newest snapshot holding
// it (`ckguard restore-lost`, Source).
//
// # When a snapshot is taken
//
// After each successful sync whose live checkpoints include one the newest snapshot of this run did
// not see (Flink adds references only with a new `_metadata`), and once at the start. Snapshots are
// named ckguard-<UTC time> (SnapshotPrefix); snapshots of other names are never touched.
//
// # When a snapshot is deleted
//
// Never the newest. An older snapshot S is deleted once nothing it holds is needed: (a) the loss check
// has completed two passes since the newest snapshot N was taken, so every referenced file that was
// present when N was taken is in N (Flink never rewrites a file under the same name), and a file
// deleted before N was taken has been seen missing; and (b) S is not the newest snapshot holding a
// referenced file the loss check now reports missing. At most Keep snapshots are kept: when the bound
// is reached and none can be deleted, no new one is taken (WARN) until one can.
//
// # Cost
//
// A snapshot costs the NameNode no copy: it records the directory tree's state, and the blocks of the
// files deleted or changed since stay allocated (they count against the space quota of the
// snapshottable directory's owner until the snapshots holding them are deleted). Garbage deleted
// through the mount is therefore freed only when the last snapshot taken before its deletion goes.
//
// # What an operator sees
//
// Every snapshot taken or deleted, and every pass that could not take one it needed or delete one it
// meant to, is an audit record (AuditOp) and a log line, and counted (Register: ckguard_hold_snapshots,
// ckguard_hold_snapshots_created_total, ckguard_hold_snapshots_deleted_total,
// ckguard_hold_snapshot_failures_total{op}); ckguard_hold_snapshot_behind is 1 while a live
// checkpoint is in no snapshot because the last pass could not take one (no silent gap).
package hdfssnap

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/refindex"
)

// SnapshotPrefix starts the name of every snapshot ckguard takes (and deletes).
const SnapshotPrefix = "ckguard-"

// timeLayout is the time in a snapshot's name (sorts as it reads; no ':' for shells).
const timeLayout = "20060102T150405.000Z"

// DefaultKeep bounds the snapshots kept.
const DefaultKeep = 16

// Name is the snapshot name for t.
func Name(t time.Time) string { return SnapshotPrefix + t.UTC().Format(timeLayout) }

// parseName returns the time in a ckguard snapshot's name.
func parseName(n string) (time.Time, bool) {
	s, ok := strings.CutPrefix(n, SnapshotPrefix)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(timeLayout, s)
	return t, err == nil
}

// Index is what the snapshotter needs of the reference index (*refindex.Index is one).
type Index interface {
	Checkpoints(ctx context.Context, job string) (*refindex.CheckpointsResult, error)
}

// Options configure a Snapshotter.
type Options struct {
	FS    hdfsclient.FS
	Snaps hdfsclient.Snapshots
	// Dir is the store root (absolute), the snapshottable directory.
	Dir    string
	Index  Index
	Keep   int // 0: DefaultKeep
	Logger *slog.Logger
	Now    func() time.Time
	// Audit records every snapshot taken or deleted and every failure (nil: not audited).
	Audit audit.Sink
}

// Audit vocabulary of the snapshots: Op AuditOp, Path the snapshot's path below the store root
// (.snapshot/NAME), Decision one of these.
const (
	AuditOp       = "hold-snapshot"
	AuditCreated  = "created"
	AuditDeleted  = "deleted"
	AuditFailed   = "failed"
	reasonNew     = "new-checkpoint"
	reasonRetired = "not-needed"
	reasonBound   = "bound-reached"
)

// The op label values of ckguard_hold_snapshot_failures_total.
const (
	FailList   = "list"
	FailCreate = "create"
	FailDelete = "delete"
	// FailBound: a snapshot was needed but the bound of snapshots kept was reached with none deletable.
	FailBound = "bound"
)

// Snapshotter takes and retires the snapshots (guardd.Holds, and guardd's loss observer).
type Snapshotter struct {
	o    Options
	kick chan struct{}

	mu        sync.Mutex
	seen      map[string]bool // live `_metadata` when the newest snapshot of this run was taken
	taken     bool            // a snapshot was taken in this run
	completes []time.Time     // times of the complete loss-check passes (the last few)
	missing   []string        // referenced keys the last loss report found missing

	// What the metrics read. kept is -1 until a pass has listed the snapshots. behind: the last pass
	// needed a snapshot (a live checkpoint no snapshot of this run saw) and could not take it.
	kept     atomic.Int64
	behind   atomic.Bool
	created  atomic.Int64
	deleted  atomic.Int64
	failures *prometheus.CounterVec
}

// New returns a Snapshotter.
func New(o Options) *Snapshotter {
	if o.Keep <= 0 {
		o.Keep = DefaultKeep
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Snapshotter{o: o, kick: make(chan struct{}, 1),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ckguard_hold_snapshot_failures_total",
			Help: "HDFS --hold: snapshot operations of the store root that failed (op: list, create, delete; bound: a snapshot was needed but the bound of snapshots kept was reached with none deletable)."},
			[]string{"op"})}
	s.kept.Store(-1)
	for _, op := range []string{FailList, FailCreate, FailDelete, FailBound} {
		s.failures.WithLabelValues(op) // exported at 0 from the start, so increase() sees the first one
	}
	return s
}

// Register adds the snapshots' metrics to reg.
func (s *Snapshotter) Register(reg prometheus.Registerer) error {
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ckguard_hold_active", Help: "1 when HDFS snapshots of the store root are taken (--hold), 0 when --hold best-effort runs without them."},
			func() float64 { return 1 }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ckguard_hold_snapshots", Help: "HDFS --hold: ckguard snapshots of the store root kept (as of the last pass; -1 before the first)."},
			func() float64 { return float64(s.kept.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ckguard_hold_snapshot_behind", Help: "HDFS --hold: 1 while a live checkpoint is in no snapshot because the last pass could not take one (see ckguard_hold_snapshot_failures_total and the log)."},
			func() float64 {
				if s.behind.Load() {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ckguard_hold_snapshots_created_total", Help: "HDFS --hold: snapshots of the store root taken."},
			func() float64 { return float64(s.created.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ckguard_hold_snapshots_deleted_total", Help: "HDFS --hold: ckguard snapshots deleted once nothing they held was needed."},
			func() float64 { return float64(s.deleted.Load()) }),
		s.failures,
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// RegisterInactive adds ckguard_hold_active at 0 to reg: --hold best-effort on a store root that
// cannot be snapshotted (the CkguardHoldsFailing alert reads it).
func RegisterInactive(reg prometheus.Registerer) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ckguard_hold_active",
		Help: "1 when HDFS snapshots of the store root are taken (--hold), 0 when --hold best-effort runs without them."},
		func() float64 { return 0 }))
}

// record audits one snapshot event. A failing audit log is logged, never fatal to the pass: the
// snapshot itself is the protection, the record its trace.
func (s *Snapshotter) record(decision, reason, name, msg string, live int) {
	if s.o.Audit == nil {
		return
	}
	r := &audit.Record{Time: s.o.Now(), Op: AuditOp, Decision: decision, Reason: reason, Message: msg, RefCount: live}
	r.SetNames(".snapshot/"+name, "")
	if err := s.o.Audit.Record(r); err != nil {
		s.o.Logger.Warn("HDFS snapshots: audit record not written", "snapshot", name, "decision", decision, "err", err)
	}
}

// fail counts and audits a failed snapshot operation.
func (s *Snapshotter) fail(op, name string, err error, live int) {
	s.failures.WithLabelValues(op).Inc()
	reason := op + "-failed"
	if op == FailBound {
		reason = reasonBound
	}
	s.record(AuditFailed, reason, name, err.Error(), live)
}

// Probe makes dir snapshottable where the mount's user may (allowSnapshot needs the superuser: a
// refusal is not an error when an administrator made it snapshottable already), then checks that a
// snapshot can be taken and deleted. Its error names the fix.
func Probe(ctx context.Context, snaps hdfsclient.Snapshots, dir string, now time.Time) error {
	aerr := snaps.AllowSnapshots(ctx, dir)
	name := SnapshotPrefix + "probe-" + now.UTC().Format(timeLayout)
	if _, err := snaps.CreateSnapshot(ctx, dir, name); err != nil {
		if aerr != nil {
			return fmt.Errorf("%s is not snapshottable and the mount's user cannot make it so (%v); an HDFS superuser must run `hdfs dfsadmin -allowSnapshot %s` once (then createSnapshot needs the directory's owner): %w", dir, aerr, dir, err)
		}
		return fmt.Errorf("cannot take a snapshot of %s (createSnapshot needs the directory's owner or the superuser): %w", dir, err)
	}
	if err := snaps.DeleteSnapshot(ctx, dir, name); err != nil {
		return fmt.Errorf("took the probe snapshot %s of %s but cannot delete it (deleteSnapshot needs the directory's owner; delete it with `hdfs dfs -deleteSnapshot %s %s`): %w", name, dir, dir, name, err)
	}
	return nil
}

// Kick asks for a pass (after a successful sync).
func (s *Snapshotter) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run runs a pass per Kick until ctx ends.
func (s *Snapshotter) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		if err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.o.Logger.Warn("HDFS snapshots: a pass failed; retried after the next sync", "dir", s.o.Dir, "err", err)
		}
	}
}

// Heal: HDFS has nothing to heal in place (a delete is final outside the snapshots);
// `ckguard restore-lost` copies back from a snapshot.
func (s *Snapshotter) Heal(context.Context, string, string) (bool, error) { return false, nil }

// ObserveLoss takes a loss-check report: the complete passes' times, and what is missing now.
func (s *Snapshotter) ObserveLoss(rep *refindex.LossReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rep.Complete {
		s.completes = append(s.completes, rep.Time)
		if len(s.completes) > 4 {
			s.completes = s.completes[len(s.completes)-4:]
		}
	}
	s.missing = s.missing[:0]
	for _, m := range rep.Missing {
		s.missing = append(s.missing, m.Path)
	}
}

// Snapshot is one snapshot of the store root.
type Snapshot struct {
	Name string
	Time time.Time // from a ckguard name; else the listing's mtime
	Ours bool
}

// List returns the snapshots of dir, newest first.
func List(ctx context.Context, f hdfsclient.FS, dir string) ([]Snapshot, error) {
	var out []Snapshot
	err := f.List(ctx, hdfsclient.SnapshotDir(dir), func(page []hdfsclient.FileInfo) error {
		for _, fi := range page {
			sn := Snapshot{Name: fi.Name, Time: fi.ModTime}
			if t, ok := parseName(fi.Name); ok {
				sn.Time, sn.Ours = t, true
			}
			out = append(out, sn)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // not snapshottable (yet)
	}
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.After(out[j].Time) })
	return out, nil
}

// Pass takes a snapshot when the live checkpoints include a new one, retiring what is no longer
// needed first.
func (s *Snapshotter) Pass(ctx context.Context) error {
	res, err := s.o.Index.Checkpoints(ctx, "")
	if err != nil {
		return fmt.Errorf("read the live checkpoints: %w", err)
	}
	live := map[string]bool{}
	for _, j := range res.Jobs {
		for _, c := range j.Checkpoints {
			live[c.Metadata] = true
		}
	}
	for _, u := range res.Unparseable {
		live[u.Metadata] = true
	}
	s.mu.Lock()
	fresh := !s.taken
	for m := range live {
		if !s.seen[m] {
			fresh = true
		}
	}
	s.mu.Unlock()
	snaps, err := List(ctx, s.o.FS, s.o.Dir)
	if err != nil {
		err = fmt.Errorf("list the snapshots of %s: %w", s.o.Dir, err)
		s.fail(FailList, "", err, len(live))
		s.behind.Store(s.behind.Load() || fresh)
		return err
	}
	snaps, err = s.retire(ctx, snaps)
	s.kept.Store(int64(countOurs(snaps)))
	if err != nil {
		s.fail(FailList, "", err, len(live))
		s.behind.Store(s.behind.Load() || fresh)
		return err
	}
	if !fresh {
		s.behind.Store(false)
		return nil
	}
	if ours := countOurs(snaps); ours >= s.o.Keep {
		s.o.Logger.Warn("HDFS snapshots: the bound of snapshots kept is reached and none can be deleted yet (the older ones still hold referenced files the store misses, or the loss check has not passed twice since the newest); new references are not in a snapshot until one can",
			"dir", s.o.Dir, "kept", ours, "bound", s.o.Keep)
		s.fail(FailBound, "", fmt.Errorf("%d ckguard snapshots of %s kept (the bound), none deletable yet: the newest live checkpoints are in no snapshot", ours, s.o.Dir), len(live))
		s.behind.Store(true)
		return nil
	}
	now := s.o.Now()
	name := Name(now)
	if len(snaps) > 0 && snaps[0].Name == name {
		return nil
	}
	if _, err := s.o.Snaps.CreateSnapshot(ctx, s.o.Dir, name); err != nil {
		err = fmt.Errorf("take snapshot %s of %s (createSnapshot needs the directory's owner or the superuser): %w", name, s.o.Dir, err)
		s.fail(FailCreate, name, err, len(live))
		s.behind.Store(true)
		return err
	}
	s.created.Add(1)
	s.kept.Add(1)
	s.behind.Store(false)
	s.o.Logger.Info("HDFS snapshot taken: what live checkpoints reference now can be restored from it after a deletion beside the mount (ckguard restore-lost)",
		"dir", s.o.Dir, "snapshot", name, "live_checkpoints", len(live))
	s.record(AuditCreated, reasonNew, name, fmt.Sprintf("snapshot %s of %s taken: the files of %d live checkpoints can be restored from it (ckguard restore-lost)", name, s.o.Dir, len(live)), len(live))
	s.mu.Lock()
	s.seen, s.taken = live, true
	s.mu.Unlock()
	return nil
}

func countOurs(snaps []Snapshot) int {
	n := 0
	for _, sn := range snaps {
		if sn.Ours {
			n++
		}
	}
	return n
}

// retire deletes the older ckguard snapshots nothing needs (see the package doc) and returns the
// snapshots left.
func (s *Snapshotter) retire(ctx context.Context, snaps []Snapshot) ([]Snapshot, error) {
	if len(snaps) < 2 {
		return snaps, nil
	}
	newest := snaps[0]
	s.mu.Lock()
	passes := 0
	for _, t := range s.completes {
		if t.After(newest.Time) {
			passes++
		}
	}
	missing := append([]string(nil), s.missing...)
	s.mu.Unlock()
	if passes < 2 {
		return snaps, nil
	}
	needed := map[string]bool{}
	for _, k := range missing {
		for _, sn := range snaps {
			fi, err := s.o.FS.Stat(ctx, hdfsclient.Join(hdfsclient.Join(hdfsclient.SnapshotDir(s.o.Dir), sn.Name), k))
			if err == nil && !fi.IsDir {
				needed[sn.Name] = true
				break
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return snaps, fmt.Errorf("stat %s in snapshot %s: %w (no snapshot deleted)", k, sn.Name, err)
			}
		}
	}
	kept := []Snapshot{newest}
	for _, sn := range snaps[1:] {
		if !sn.Ours || needed[sn.Name] {
			kept = append(kept, sn)
			continue
		}
		if err := s.o.Snaps.DeleteSnapshot(ctx, s.o.Dir, sn.Name); err != nil {
			s.o.Logger.Warn("HDFS snapshots: could not delete a snapshot no longer needed; retried at the next pass", "dir", s.o.Dir, "snapshot", sn.Name, "err", err)
			s.fail(FailDelete, sn.Name, fmt.Errorf("delete snapshot %s of %s (deleteSnapshot needs the directory's owner; it holds the blocks of files deleted since): %w", sn.Name, s.o.Dir, err), 0)
			kept = append(kept, sn)
			continue
		}
		s.deleted.Add(1)
		s.o.Logger.Info("HDFS snapshot deleted: everything it held that live checkpoints reference is in a newer snapshot or in the store", "dir", s.o.Dir, "snapshot", sn.Name, "newest", newest.Name)
		s.record(AuditDeleted, reasonRetired, sn.Name, fmt.Sprintf("snapshot %s of %s deleted: every referenced file it held is in the store or in the newer %s", sn.Name, s.o.Dir, newest.Name), 0)
	}
	return kept, nil
}
