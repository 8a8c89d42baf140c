package guard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

type sink struct {
	recs []audit.Record
	err  error
}

func (s *sink) Record(r *audit.Record) error {
	s.recs = append(s.recs, *r)
	return s.err
}

type panicky struct{ guard.Checker }

func (panicky) Decide(context.Context, string, verdict.Op, ...store.ObjectInfo) verdict.Decision {
	panic("boom")
}

type graceChecker struct{ *guardtest.Checker }

func (graceChecker) Decide(context.Context, string, verdict.Op, ...store.ObjectInfo) verdict.Decision {
	return verdict.Decision{Reason: verdict.ReasonGrace, Message: "young"}
}

func TestEnforcer(t *testing.T) {
	fake := guardtest.New()
	fake.Protect("job/shared/ref", "job/chk-1/_metadata")
	tests := []struct {
		name      string
		checker   guard.Checker
		auditErr  error
		errno     syscall.Errno
		checks    []guard.Check
		wantErrno syscall.Errno
		wantRan   bool
		wantRecs  []string // decision/reason per record
	}{
		{"allowed runs the change", fake, nil, 0, []guard.Check{{Op: verdict.OpUnlink, Path: "job/shared/free"}}, 0, true, []string{"allow/allowed"}},
		{"refused does not run it", fake, nil, 0, []guard.Check{{Op: verdict.OpUnlink, Path: "job/shared/ref"}}, syscall.EPERM, false, []string{"refuse/referenced"}},
		{"custom errno", fake, nil, syscall.EACCES, []guard.Check{{Op: verdict.OpUnlink, Path: "job/shared/ref"}}, syscall.EACCES, false, []string{"refuse/referenced"}},
		{"rename refused on target only logs the refusal", fake, nil, 0, []guard.Check{
			{Op: verdict.OpRename, Path: "job/shared/free"}, {Op: verdict.OpReplace, Path: "job/shared/ref"}}, syscall.EPERM, false, []string{"refuse/referenced"}},
		{"a panicking index refuses (fail closed)", panicky{fake}, nil, 0, []guard.Check{{Op: verdict.OpUnlink, Path: "x"}}, syscall.EPERM, false, []string{"refuse/store-error"}},
		{"an allowed change whose record cannot be written does not happen", fake, errors.New("disk full"), 0, []guard.Check{{Op: verdict.OpUnlink, Path: "job/shared/free"}}, syscall.EIO, false, []string{"allow/allowed"}},
		{"a refusal stays a refusal when the log fails", fake, errors.New("disk full"), 0, []guard.Check{{Op: verdict.OpUnlink, Path: "job/shared/ref"}}, syscall.EPERM, false, []string{"refuse/referenced"}},
		{"pre-decided refusal", fake, nil, 0, []guard.Check{{Op: verdict.OpWrite, Path: "a", Decided: &verdict.Decision{Reason: guard.ReasonHardLinked}}}, syscall.EPERM, false, []string{"refuse/hard-linked"}},
		{"metadata commit overrides grace", graceChecker{fake}, nil, 0, []guard.Check{{Op: verdict.OpRename, Path: "j/chk-1/.tmp", To: "j/chk-1/_metadata", MetadataCommit: true}}, 0, true, []string{"allow/metadata-commit"}},
		{"grace without commit refuses", graceChecker{fake}, nil, 0, []guard.Check{{Op: verdict.OpRename, Path: "j/chk-1/.tmp", To: "j/chk-1/x"}}, syscall.EPERM, false, []string{"refuse/grace"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &sink{err: tc.auditErr}
			e, err := guard.NewEnforcer(guard.Config{Checker: tc.checker, Audit: s, Metrics: metrics.New(), RefuseErrno: tc.errno})
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			got := e.Mutate(context.Background(), tc.checks, func() syscall.Errno { ran = true; return 0 })
			if got != tc.wantErrno || ran != tc.wantRan {
				t.Fatalf("errno %v ran %v, want %v %v", got, ran, tc.wantErrno, tc.wantRan)
			}
			var recs []string
			for _, r := range s.recs {
				recs = append(recs, r.Decision+"/"+r.Reason)
			}
			if len(recs) != len(tc.wantRecs) {
				t.Fatalf("records %v, want %v", recs, tc.wantRecs)
			}
			for i := range recs {
				if recs[i] != tc.wantRecs[i] {
					t.Fatalf("records %v, want %v", recs, tc.wantRecs)
				}
			}
		})
	}
}

func TestParseErrno(t *testing.T) {
	for in, want := range map[string]syscall.Errno{"": syscall.EPERM, "eperm": syscall.EPERM, "EACCES": syscall.EACCES, "EROFS": syscall.EROFS, "16": syscall.EBUSY} {
		if got, err := guard.ParseErrno(in); err != nil || got != want {
			t.Errorf("ParseErrno(%q) = %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"ENOPE", "-1", "0", "99999"} {
		if _, err := guard.ParseErrno(bad); err == nil {
			t.Errorf("ParseErrno(%q) accepted", bad)
		}
	}
}

func TestNoChecker(t *testing.T) {
	if _, err := guard.NewEnforcer(guard.Config{}); err == nil {
		t.Fatal("an enforcer without an index was created")
	}
}

// BenchmarkMutateAllowed is the enforcer's own cost per allowed deletion (fake index): the audit record
// written to a real file, the metrics, the lock. The index's Decide comes on top.
func BenchmarkMutateAllowed(b *testing.B) {
	al, err := audit.Open(b.TempDir()+"/audit.jsonl", audit.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer al.Close()
	e, err := guard.NewEnforcer(guard.Config{Checker: guardtest.New(), Audit: al, Metrics: metrics.New()})
	if err != nil {
		b.Fatal(err)
	}
	checks := []guard.Check{{Op: verdict.OpUnlink, Path: "job_old/shared/d001/sst-000001"}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if errno := e.Mutate(ctx, checks, func() syscall.Errno { return 0 }); errno != 0 {
			b.Fatal(errno)
		}
	}
}

// ctxChecker fails closed the way the real index does when its store call sees a cancelled context, and
// records whether the index notifications it gets can still run to completion.
type ctxChecker struct {
	*guardtest.Checker
	notifiedWithLiveCtx int
}

func (c *ctxChecker) Decide(ctx context.Context, p string, op verdict.Op, seen ...store.ObjectInfo) verdict.Decision {
	if err := ctx.Err(); err != nil {
		return verdict.Decision{Reason: verdict.ReasonStoreError, Message: "cannot stat it in the store: " + err.Error()}
	}
	return c.Checker.Decide(ctx, p, op, seen...)
}

func (c *ctxChecker) Written(ctx context.Context, p string) error {
	if ctx.Err() == nil {
		c.notifiedWithLiveCtx++
	}
	return ctx.Err()
}

func (c *ctxChecker) Deleted(ctx context.Context, p string) error { return c.Written(ctx, p) }

func (c *ctxChecker) Renamed(ctx context.Context, from, to string) error { return c.Written(ctx, from) }

// A caller interrupted while the index decides (the kernel's FUSE_INTERRUPT cancels the request context)
// gets EINTR, not a refusal, and nothing is done; changes that already happened are still recorded in the
// index in full. Found as EPERM/EIO flakes of Flink-style writers under Go's preemption signals.
func TestInterruptedCaller(t *testing.T) {
	c := &ctxChecker{Checker: guardtest.New()}
	s := &sink{}
	e, err := guard.NewEnforcer(guard.Config{Checker: c, Audit: s, Metrics: metrics.New()})
	if err != nil {
		t.Fatal(err)
	}
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	checks := []guard.Check{{Op: verdict.OpUnlink, Path: "job/shared/free"}}
	ran := false
	if got := e.Mutate(cancelled, checks, func() syscall.Errno { ran = true; return 0 }); got != syscall.EINTR || ran {
		t.Errorf("interrupted decision: errno %v ran %v, want EINTR and nothing done", got, ran)
	}
	if len(s.recs) != 1 || s.recs[0].Decision != "refuse" || s.recs[0].Errno != "EINTR" {
		t.Errorf("audit of the interrupted decision: %+v, want one refusal answered with EINTR", s.recs)
	}
	if got := e.Mutate(live, checks, func() syscall.Errno { return 0 }); got != 0 {
		t.Errorf("uninterrupted decision: errno %v, want 0", got)
	}
	if got := e.Written(cancelled, "job/chk-2/_metadata"); got != 0 {
		t.Errorf("Written with an interrupted caller: errno %v, want 0", got)
	}
	e.Deleted(cancelled, "job/chk-1/_metadata")
	if got := e.Renamed(cancelled, "job/chk-3/._metadata.inprogress.x", "job/chk-3/_metadata"); got != 0 {
		t.Errorf("Renamed with an interrupted caller: errno %v, want 0", got)
	}
	if c.notifiedWithLiveCtx != 3 {
		t.Errorf("index notifications that could complete: %d of 3", c.notifiedWithLiveCtx)
	}
}

// TestAuditKeepsInvalidNames: a name that is not valid UTF-8 is logged with U+FFFD in its JSON
// string, so the record also carries its exact bytes; two such names stay apart in the log.
func TestAuditKeepsInvalidNames(t *testing.T) {
	s := &sink{}
	e, err := guard.NewEnforcer(guard.Config{Checker: guardtest.New(), Audit: s})
	if err != nil {
		t.Fatal(err)
	}
	from, to := "job/shared/a\xff", "job/shared/a\xfe"
	if errno := e.Mutate(context.Background(), []guard.Check{{Op: verdict.OpRename, Path: from, To: to}}, func() syscall.Errno { return 0 }); errno != 0 {
		t.Fatal(errno)
	}
	e.Mutate(context.Background(), []guard.Check{{Op: verdict.OpUnlink, Path: "job/shared/plain"}}, func() syscall.Errno { return 0 })
	if len(s.recs) != 2 {
		t.Fatalf("records: %+v", s.recs)
	}
	if r := s.recs[0]; string(r.PathBytes) != from || string(r.ToBytes) != to {
		t.Errorf("record of an invalid UTF-8 rename: path_bytes %q to_bytes %q, want %q %q", r.PathBytes, r.ToBytes, from, to)
	}
	if r := s.recs[1]; r.PathBytes != nil || r.ToBytes != nil {
		t.Errorf("record of a valid name carries raw bytes: %+v", r)
	}
}

// blockingIndex is an index whose updates (Written, Renamed) start, say so, and wait to be released: a
// large _metadata being read and parsed.
type blockingIndex struct {
	*guardtest.Checker
	started chan string
	release chan struct{}
	fail    error
	young   string // refused for grace
}

func newBlockingIndex() *blockingIndex {
	return &blockingIndex{Checker: guardtest.New(), started: make(chan string, 1), release: make(chan struct{})}
}

// Decide answers grace for the young file, like the index for a file younger than --grace.
func (b *blockingIndex) Decide(ctx context.Context, p string, op verdict.Op, seen ...store.ObjectInfo) verdict.Decision {
	if p == b.young {
		return verdict.Decision{Reason: verdict.ReasonGrace, Message: "young"}
	}
	return b.Checker.Decide(ctx, p, op, seen...)
}

func (b *blockingIndex) wait(p string) error {
	b.started <- p
	<-b.release
	return b.fail
}

func (b *blockingIndex) Written(ctx context.Context, p string) error {
	if !flinklayout.IsMetadata(p) {
		return b.Checker.Written(ctx, p)
	}
	return b.wait(p)
}

func (b *blockingIndex) Renamed(ctx context.Context, from, to string) error { return b.wait(to) }

// While an index update made through the mount is being read (a _metadata closed, renamed or linked into
// place), decisions that do not wait for it (PendingWait < 0; see TestDecisionWaitsForPendingUpdate): every change the index would allow is refused as pending, refusals
// keep their own reason, and once the update is in, the same change is allowed. Asserted by ordering: the
// update is held until the decisions have returned.
func TestPendingUpdate(t *testing.T) {
	const meta = "job/chk-2/_metadata"
	updates := []struct {
		name string
		run  func(e *guard.Enforcer) syscall.Errno
	}{
		{"written", func(e *guard.Enforcer) syscall.Errno { return e.Written(context.Background(), meta) }},
		{"renamed", func(e *guard.Enforcer) syscall.Errno {
			return e.MutateExclusive(context.Background(), []guard.Check{{Op: verdict.OpRename, Path: "job/chk-2/._metadata.inprogress.1", To: meta}},
				func() syscall.Errno {
					return e.Renamed(context.Background(), "job/chk-2/._metadata.inprogress.1", meta)
				})
		}},
		{"linked", func(e *guard.Enforcer) syscall.Errno {
			return e.Link(context.Background(), guard.Check{Op: verdict.OpLink, Path: "job/chk-2/copy", To: meta},
				func() syscall.Errno { return 0 }, nil)
		}},
	}
	for _, u := range updates {
		for _, fail := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fail=%v", u.name, fail), func(t *testing.T) {
				ix := newBlockingIndex()
				ix.Protect("job/shared/ref", "job/chk-1/_metadata")
				if fail {
					ix.fail = errors.New("disk full")
				}
				s := &sink{}
				// No wait: the decisions below are taken while the update is held.
				e, err := guard.NewEnforcer(guard.Config{Checker: ix, Audit: s, Metrics: metrics.New(), PendingWait: -1})
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan syscall.Errno)
				go func() { done <- u.run(e) }()
				if got := <-ix.started; got != meta {
					t.Fatalf("update of %s, want %s", got, meta)
				}
				ctx := context.Background()
				unlink := func(p string) syscall.Errno {
					return e.Mutate(ctx, []guard.Check{{Op: verdict.OpUnlink, Path: p}}, func() syscall.Errno { return 0 })
				}
				if errno := unlink("job/shared/free"); errno != syscall.EPERM {
					t.Errorf("unlink of an unreferenced file during the update: errno %v, want EPERM", errno)
				}
				if errno := unlink("job/shared/ref"); errno != syscall.EPERM {
					t.Errorf("unlink of a referenced file during the update: errno %v, want EPERM", errno)
				}
				if errno := e.Errno(ctx, guard.Check{Op: verdict.OpWrite, Path: "job/shared/free"}); errno != syscall.EPERM {
					t.Errorf("write-open during the update: errno %v, want EPERM", errno)
				}
				// Another job's Flink commit (its young temporary file renamed onto its _metadata) still goes.
				ix.young = "job2/chk-7/._metadata.inprogress.2"
				commit := []guard.Check{{Op: verdict.OpRename, Path: ix.young, To: "job2/chk-7/_metadata", MetadataCommit: true}}
				if errno := e.Mutate(ctx, commit, func() syscall.Errno { return 0 }); errno != 0 {
					t.Errorf("another job's commit rename during the update: errno %v, want 0", errno)
				}
				got := []string{}
				for _, r := range s.recs {
					got = append(got, r.Decision+"/"+r.Reason)
				}
				want := []string{"refuse/index-pending", "refuse/referenced", "refuse/index-pending", "allow/metadata-commit"}
				if u.name != "written" {
					want = append([]string{"allow/allowed"}, want...) // the rename or link itself
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("records during the update: %v, want %v", got, want)
				}
				if m := s.recs[len(s.recs)-2].Message; !strings.Contains(m, "/"+meta) || !strings.Contains(m, "retry") {
					t.Errorf("pending refusal %q does not name the _metadata being read and the fix", m)
				}
				close(ix.release)
				wantErrno := syscall.Errno(0)
				if fail {
					wantErrno = syscall.EIO
				}
				if errno := <-done; errno != wantErrno {
					t.Errorf("update: errno %v, want %v", errno, wantErrno)
				}
				// Applied (or failed, which the index itself fails closed on): no longer pending.
				if errno := unlink("job/shared/free"); errno != 0 {
					t.Errorf("unlink of an unreferenced file after the update: errno %v, want 0", errno)
				}
			})
		}
	}
}

// By default a decision waits (outside the enforcer's lock) for index updates made through the mount, so
// Flink's subsumption right after its commit through the mount is decided against the index with the new
// _metadata in, not refused as pending. Asserted by ordering: the unlink cannot have been decided before
// the update was released, since it then returns allowed and its record is the only one.
func TestDecisionWaitsForPendingUpdate(t *testing.T) {
	const meta = "job/chk-2/_metadata"
	ix := newBlockingIndex()
	s := &sink{}
	e, err := guard.NewEnforcer(guard.Config{Checker: ix, Audit: s, Metrics: metrics.New()})
	if err != nil {
		t.Fatal(err)
	}
	updated := make(chan syscall.Errno)
	go func() { updated <- e.Written(context.Background(), meta) }()
	if got := <-ix.started; got != meta {
		t.Fatalf("update of %s, want %s", got, meta)
	}
	unlinked := make(chan syscall.Errno)
	go func() {
		unlinked <- e.Mutate(context.Background(), []guard.Check{{Op: verdict.OpUnlink, Path: "job/shared/free"}},
			func() syscall.Errno { return 0 })
	}()
	close(ix.release)
	if errno := <-updated; errno != 0 {
		t.Fatalf("update: errno %v", errno)
	}
	if errno := <-unlinked; errno != 0 {
		t.Errorf("unlink issued during the update: errno %v, want 0 (decided once the update was in)", errno)
	}
	for _, r := range s.recs {
		if r.Reason == string(guard.ReasonIndexPending) {
			t.Errorf("a decision was refused as pending: %+v", r)
		}
	}
}

// TestRefuseReserved: the reserved-folder rule answers on the key alone: ENOENT for a look, EPERM for
// a name made or moved there (whatever errno the index's refusals get), each audited with its reason,
// nothing for other keys (a folder of the same name below the root included); it takes no lock, so it
// answers while a rename holds the enforcer's lock exclusively, and asks nothing of the index.
func TestRefuseReserved(t *testing.T) {
	s := &sink{}
	fake := guardtest.New()
	e, err := guard.NewEnforcer(guard.Config{Checker: fake, Audit: s, RefuseErrno: syscall.EBUSY})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cases := []struct {
		req     guard.Request
		key, to string
		want    syscall.Errno
	}{
		{guard.RequestLookup, store.QuarantineDir, "", syscall.ENOENT},
		{guard.RequestUnlink, store.SharedDir + "/v1/pins/x", "", syscall.ENOENT},
		{guard.RequestMkdir, store.SharedDir, "", syscall.EPERM},
		{guard.RequestRename, "job/x", store.QuarantineDir + "/planted", syscall.EPERM},
		{guard.RequestCreate, "job/" + store.QuarantineDir, "", 0},
		{guard.RequestRename, "job/x", "job/y", 0},
		{guard.RequestLookup, store.QuarantineDir + "x", "", 0},
	}
	errno := e.MutateExclusive(ctx, nil, func() syscall.Errno {
		for _, c := range cases {
			if got := e.RefuseReserved(ctx, c.req, c.key, c.to); got != c.want {
				t.Errorf("%s %s %s: %v, want %v", c.req, c.key, c.to, got, c.want)
			}
		}
		return 0
	})
	if errno != 0 {
		t.Fatal(errno)
	}
	if len(s.recs) != 4 {
		t.Fatalf("%d records, want one per refusal (4): %+v", len(s.recs), s.recs)
	}
	for i, r := range s.recs {
		if r.Decision != "refuse" || r.Reason != string(guard.ReasonReservedFolder) || r.Op != string(cases[i].req) ||
			r.Path != cases[i].key || r.To != cases[i].to || r.Errno != guard.ErrnoName(cases[i].want) {
			t.Errorf("record %d: %+v, want a %s refusal of %s with errno %v", i, r, guard.ReasonReservedFolder, cases[i].key, cases[i].want)
		}
	}
	if calls := append(fake.Decisions(), fake.CallLog()...); len(calls) != 0 {
		t.Errorf("the index was asked or told: %v", calls)
	}
}
