package guard_test

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// TestVerbsTellTheIndex: every verb runs the mount's act only when allowed, and tells the index exactly
// what the act reports it changed: a removal that is gone now (not one queued), a rename that may have
// moved names (even a failed one), a truncated _metadata, a new name _metadata; an open, a chmod or
// any other new name tells nothing.
func TestVerbsTellTheIndex(t *testing.T) {
	const meta, free, prot = "job/chk-1/_metadata", "job/shared/free", "job/shared/ref"
	removed := func(errno syscall.Errno) func() (bool, syscall.Errno) {
		return func() (bool, syscall.Errno) { return errno == 0, errno }
	}
	cases := []struct {
		name      string
		verb      func(e *guard.Enforcer, ran *bool) syscall.Errno
		wantErrno syscall.Errno
		wantRan   bool
		wantCalls []string
	}{
		{"remove", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Remove(context.Background(), guard.Check{Op: verdict.OpUnlink, Path: free}, ran1(ran, removed(0)))
		}, 0, true, []string{"deleted " + free}},
		{"remove queued", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Remove(context.Background(), guard.Check{Op: verdict.OpUnlink, Path: free},
				ran1(ran, func() (bool, syscall.Errno) { return false, 0 }))
		}, 0, true, nil},
		{"remove failing", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Remove(context.Background(), guard.Check{Op: verdict.OpRmdir, Path: free}, ran1(ran, removed(syscall.ENOTEMPTY)))
		}, syscall.ENOTEMPTY, true, nil},
		{"remove refused", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Remove(context.Background(), guard.Check{Op: verdict.OpUnlink, Path: prot}, ran1(ran, removed(0)))
		}, syscall.EPERM, false, nil},
		{"remove decided by the mount", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			d := guard.HardLinked(verdict.OpUnlink, free, 2, nil)
			return e.Remove(context.Background(), guard.Check{Op: verdict.OpUnlink, Path: free, Decided: d}, ran1(ran, removed(0)))
		}, syscall.EPERM, false, nil},
		{"rename", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Rename(context.Background(), []guard.Check{{Op: verdict.OpRename, Path: free, To: "job/x"}},
				ran1(ran, func() (bool, syscall.Errno) { return true, 0 }))
		}, 0, true, []string{"renamed " + free + " job/x"}},
		{"rename failing after a copy", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Rename(context.Background(), []guard.Check{{Op: verdict.OpRename, Path: free, To: "job/x"}},
				ran1(ran, func() (bool, syscall.Errno) { return true, syscall.EIO }))
		}, syscall.EIO, true, []string{"renamed " + free + " job/x"}},
		{"rename failing", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Rename(context.Background(), []guard.Check{{Op: verdict.OpRename, Path: free, To: "job/x"}},
				ran1(ran, func() (bool, syscall.Errno) { return false, syscall.EXDEV }))
		}, syscall.EXDEV, true, nil},
		{"rename onto a referenced file", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Rename(context.Background(), []guard.Check{{Op: verdict.OpRename, Path: free, To: prot}, {Op: verdict.OpReplace, Path: prot, To: free}},
				ran1(ran, func() (bool, syscall.Errno) { return true, 0 }))
		}, syscall.EPERM, false, nil},
		{"truncate a _metadata", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Change(context.Background(), []guard.Check{{Op: verdict.OpTruncate, Path: meta}}, ran0(ran, 0))
		}, 0, true, []string{"written " + meta}},
		{"truncate another file", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Change(context.Background(), []guard.Check{{Op: verdict.OpTruncate, Path: free}}, ran0(ran, 0))
		}, 0, true, nil},
		{"truncate failing", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Change(context.Background(), []guard.Check{{Op: verdict.OpTruncate, Path: meta}}, ran0(ran, syscall.EIO))
		}, syscall.EIO, true, nil},
		{"chmod a _metadata", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Change(context.Background(), []guard.Check{{Op: verdict.OpChmod, Path: meta}}, ran0(ran, 0))
		}, 0, true, nil},
		{"truncate refused", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Change(context.Background(), []guard.Check{{Op: verdict.OpTruncate, Path: prot}}, ran0(ran, 0))
		}, syscall.EPERM, false, nil},
		{"open for writing", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Open(context.Background(), guard.Check{Op: verdict.OpTruncate, Path: meta}, ran0(ran, 0))
		}, 0, true, nil},
		{"open refused", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Open(context.Background(), guard.Check{Op: verdict.OpWrite, Path: prot}, ran0(ran, 0))
		}, syscall.EPERM, false, nil},
		{"link", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Link(context.Background(), guard.Check{Op: verdict.OpLink, Path: free, To: "job/free.bak"}, ran0(ran, 0), nil)
		}, 0, true, nil},
		{"link named _metadata", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Link(context.Background(), guard.Check{Op: verdict.OpLink, Path: free, To: meta}, ran0(ran, 0), nil)
		}, 0, true, []string{"written " + meta}},
		{"link failing", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Link(context.Background(), guard.Check{Op: verdict.OpLink, Path: free, To: meta}, ran0(ran, syscall.EEXIST), nil)
		}, syscall.EEXIST, true, nil},
		{"link refused", func(e *guard.Enforcer, ran *bool) syscall.Errno {
			return e.Link(context.Background(), guard.Check{Op: verdict.OpLink, Path: prot, To: meta}, ran0(ran, 0), nil)
		}, syscall.EPERM, false, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := guardtest.New()
			c.Protect(prot, "job/chk-1/_metadata")
			e, err := guard.NewEnforcer(guard.Config{Checker: c, Audit: &sink{}})
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			if errno := tc.verb(e, &ran); errno != tc.wantErrno {
				t.Errorf("errno %v, want %v", errno, tc.wantErrno)
			}
			if ran != tc.wantRan {
				t.Errorf("act ran: %v, want %v", ran, tc.wantRan)
			}
			if calls := c.CallLog(); !slices.Equal(calls, tc.wantCalls) {
				t.Errorf("index told %q, want %q", calls, tc.wantCalls)
			}
		})
	}
}

func ran0(ran *bool, errno syscall.Errno) func() syscall.Errno {
	return func() syscall.Errno { *ran = true; return errno }
}

func ran1(ran *bool, act func() (bool, syscall.Errno)) func() (bool, syscall.Errno) {
	return func() (bool, syscall.Errno) { *ran = true; return act() }
}

// seenChecker records what the mount observed, per decision.
type seenChecker struct {
	*guardtest.Checker
	seen []store.ObjectInfo
}

func (c *seenChecker) Decide(ctx context.Context, p string, op verdict.Op, seen ...store.ObjectInfo) verdict.Decision {
	c.seen = append(c.seen, seen...)
	return c.Checker.Decide(ctx, p, op, seen...)
}

// TestRemoveResolvedJudgesTheResolvedObject: the decision gets what the mount's resolver observed (not a
// look of its own), the act that runs is the resolved one, and what resolving took is released
// afterwards; a check the mount already refused resolves nothing.
func TestRemoveResolvedJudgesTheResolvedObject(t *testing.T) {
	seenAt := time.Unix(1_000_000, 0)
	for _, refused := range []bool{false, true} {
		c := &seenChecker{Checker: guardtest.New()}
		e, err := guard.NewEnforcer(guard.Config{Checker: c})
		if err != nil {
			t.Fatal(err)
		}
		var resolved, acted, released bool
		check := guard.Check{Op: verdict.OpUnlink, Path: "j/f"}
		if refused {
			check.Decided = guard.StoreChanged(verdict.OpUnlink, "j/f", syscall.ESTALE, true)
		}
		errno := e.RemoveResolved(context.Background(), check, func() guard.Target {
			resolved = true
			return guard.Target{
				Observed: &store.ObjectInfo{Path: "j/f", Size: 7, ModTime: seenAt},
				Act:      func() (bool, syscall.Errno) { acted = true; return true, 0 },
				Release:  func() { released = true },
			}
		})
		if refused {
			if errno != syscall.EPERM || resolved || acted || len(c.seen) != 0 {
				t.Errorf("refused by the mount: errno %v, resolved %v, acted %v, seen %v; want EPERM and nothing done", errno, resolved, acted, c.seen)
			}
			continue
		}
		if errno != 0 || !acted || !released {
			t.Errorf("errno %v, acted %v, released %v; want the resolved act run and released", errno, acted, released)
		}
		if len(c.seen) != 1 || c.seen[0].Size != 7 || !c.seen[0].ModTime.Equal(seenAt) {
			t.Errorf("the decision saw %+v, want the resolver's observation", c.seen)
		}
	}
}

// TestBeforeChange: the hook sees every path of an allowed change (a rename's source and the target
// it replaces) right before the change runs, under the lock, and nothing of a refused one.
func TestBeforeChange(t *testing.T) {
	const free, other, prot = "job/shared/free", "job/shared/other", "job/shared/ref"
	c := guardtest.New()
	c.Protect(prot, "job/chk-1/_metadata")
	var seen []string
	ranAfter := true
	e, err := guard.NewEnforcer(guard.Config{Checker: c, BeforeChange: func(op verdict.Op, key string) {
		seen = append(seen, op.String()+" "+key)
		ranAfter = false
	}})
	if err != nil {
		t.Fatal(err)
	}
	act := func() (bool, syscall.Errno) { ranAfter = len(seen) > 0; return true, 0 }
	cases := []struct {
		name string
		do   func() syscall.Errno
		want []string
	}{
		{"unlink", func() syscall.Errno {
			return e.Remove(context.Background(), guard.Check{Op: verdict.OpUnlink, Path: free}, act)
		}, []string{"unlink " + free}},
		{"rename replacing", func() syscall.Errno {
			return e.Rename(context.Background(), []guard.Check{{Op: verdict.OpRename, Path: free, To: other}, {Op: verdict.OpReplace, Path: other, To: free}}, act)
		}, []string{"rename " + free, "replace " + other}},
		{"truncate", func() syscall.Errno {
			return e.Change(context.Background(), []guard.Check{{Op: verdict.OpTruncate, Path: free}}, func() syscall.Errno { _, errno := act(); return errno })
		}, []string{"truncate " + free}},
		{"refused", func() syscall.Errno {
			return e.Remove(context.Background(), guard.Check{Op: verdict.OpUnlink, Path: prot}, act)
		}, nil},
	}
	for _, tc := range cases {
		seen, ranAfter = nil, true
		errno := tc.do()
		if strings.Join(seen, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: hook saw %q, want %q", tc.name, seen, tc.want)
		}
		if tc.want != nil && (errno != 0 || !ranAfter) {
			t.Errorf("%s: errno %v, change ran after the hook %v", tc.name, errno, ranAfter)
		}
	}
}
