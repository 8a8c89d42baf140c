// Package mounttest is the contract every guard mount keeps, as a suite of tests run through the kernel
// (system calls and real tools on the mountpoint) against the one fake index of fs/guard/guardtest:
// what a live checkpoint references is refused with the configured errno and stays as it was, the rest
// is allowed; every decision is in the audit log; the index is told of every change made through the
// mount, and of a _metadata before its close returns; Flink's commit by rename onto _metadata is allowed;
// rm -rf, find -delete, shutil.rmtree and mv leave exactly the referenced files; listings come in cleanup
// order; user.ckguard.* attributes are readable but neither listed nor settable; ckguard's own folders at
// the store root are neither seen nor changed, and every request for them is audited.
//
// What a backend really cannot do (hard links, modes, mtimes, folder renames) is declared once, as a
// field of its Harness; the suite's cases read those fields, so a difference is never a skip inside a
// test. A mount runs the suite from its own tests, over a real FUSE mount of a real store:
//
//	func TestContract(t *testing.T) {
//		mounttest.Run(t, mounttest.Harness{
//			Mount: func(t *testing.T, enf *guard.Enforcer) (string, mounttest.Store) {
//				store, mnt := newEmptyStore(t), t.TempDir() // a temp dir, a fresh bucket prefix, ...
//				m, err := mymount.Mount(mymount.Options{Store: store, Mountpoint: mnt, Enforcer: enf})
//				if err != nil {
//					t.Fatal(err)
//				}
//				t.Cleanup(func() { _ = m.Unmount() })
//				return mnt, myStore{store} // Put, Get, Files beside the mount
//			},
//			Symlinks: true, // and whatever else the backend really has
//		})
//	}
//
// The suite can fail: with CKGUARD_CONTRACT_BREAK set to an operation's name (unlink, rename, truncate,
// write, rmdir, replace, link, chmod), the enforcer the suite builds asks an index that allows that
// operation wherever the fake would refuse it, a broken enforcer; the suite then fails on every backend
// (CatchesBroken runs that from a mount's tests):
//
//	CKGUARD_CONTRACT_BREAK=unlink go test -count=1 -run TestContract ./localbackend/localfs/ ./s3backend/s3mount/ ./hdfsbackend/hdfsmount/
package mounttest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/internal/fusetest"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// Harness is what a guard mount gives the suite: how to mount a fresh store, and the behaviours in which
// the backend really differs. A field's zero value is the narrower behaviour (the feature is absent).
type Harness struct {
	// Mount mounts a new, empty store guarded by enf on a new mountpoint, arranges the unmount with
	// t.Cleanup, and returns the mountpoint and the store seen beside the mount.
	Mount func(t *testing.T, enf *guard.Enforcer) (mountpoint string, st Store)

	// HardLinks: link(2) makes a second name, decided as OpLink on its target, and a file with two names
	// is refused writes and truncation (hard-linked). Otherwise link fails with ENOTSUP.
	HardLinks bool
	// Symlinks: symlink(2) works. Otherwise it fails.
	Symlinks bool
	// Modes: the store keeps modes, so a chmod that takes read access away is decided (OpChmod).
	// Otherwise chmod is accepted without effect and never decided.
	Modes bool
	// Times: the store keeps mtimes, so moving a file's mtime into the past is decided (OpWrite: grace is
	// judged by mtime). Otherwise utimes is accepted without effect and never decided.
	Times bool
	// DirRename: rename(2) of a folder is one decided change (OpRename covers everything below it).
	// Otherwise it fails with EXDEV, and mv falls back to copying and unlinking file by file.
	DirRename bool
	// TruncateToSize: truncate(2) by path to a size other than 0 works. Otherwise it fails EOPNOTSUPP.
	TruncateToSize bool
	// UserXattrs: other extended attributes are stored and listed. Otherwise the store has none.
	UserXattrs bool
	// RmdirDecidesFirst: rmdir asks the index before it looks inside the folder, so a folder holding a
	// referenced file is refused with the refusal errno. Otherwise it fails ENOTEMPTY undecided.
	RmdirDecidesFirst bool
	// NotifiesEveryWrite: the index is told (Written) of every file closed after writing, not only of
	// a _metadata.
	NotifiesEveryWrite bool
}

// Store is the storage under the mount, reached beside it (not through the mount). Keys are relative to
// the mounted root, "/"-separated.
type Store interface {
	// Put writes data at key, creating the folders above it.
	Put(t testing.TB, key, data string)
	// Get returns what key holds, and whether it exists as a file.
	Get(t testing.TB, key string) (data string, ok bool)
	// Files returns the key of every file below the root (no folders, no folder markers), sorted.
	Files(t testing.TB) []string
}

// All is the suite: every case of the contract, by name.
var All = map[string]func(*testing.T, Harness){
	"RefusedWhenReferenced":       refusedWhenReferenced,
	"AllowedWhenUnreferenced":     allowedWhenUnreferenced,
	"ConfiguredErrno":             configuredErrno,
	"OpenDescriptorDecidedAgain":  openDescriptorDecidedAgain,
	"Modes":                       modes,
	"Times":                       times,
	"HardLinks":                   hardLinks,
	"MetadataIndexedAtClose":      metadataIndexedAtClose,
	"MetadataCommitRename":        metadataCommitRename,
	"CleanupToolsLeaveReferenced": cleanupToolsLeaveReferenced,
	"MvFolderKeepsReferenced":     mvFolderKeepsReferenced,
	"ListingOrder":                listingOrder,
	"GuardXattrs":                 guardXattrs,
	"ReservedFolders":             reservedFolders,
}

// Run runs every case of the suite against h, each on its own mount, in name order.
func Run(t *testing.T, h Harness) {
	fusetest.Require(t)
	names := make([]string, 0, len(All))
	for k := range All {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		t.Run(k, func(t *testing.T) { All[k](t, h) })
	}
}

// BreakEnv names the environment variable that makes the suite's index allow one operation everywhere.
const BreakEnv = "CKGUARD_CONTRACT_BREAK"

// env is one case's mount: the fake index, the audit log the enforcer writes, and the errno it refuses
// with.
type env struct {
	h         Harness
	mnt       string
	st        Store
	ck        *guardtest.Checker
	auditPath string
	refuse    syscall.Errno
}

// start mounts a fresh store guarded by an enforcer over a fresh fake index, refusing with refuse.
func start(t *testing.T, h Harness, refuse syscall.Errno) *env {
	t.Helper()
	fusetest.Require(t)
	e := &env{h: h, ck: guardtest.New(), auditPath: filepath.Join(t.TempDir(), "audit.jsonl"), refuse: refuse}
	al, err := audit.Open(e.auditPath, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() }) // after the unmount the harness registers below (last in, first out)
	var checker guard.Checker = e.ck
	if op := os.Getenv(BreakEnv); op != "" {
		checker = brokenChecker{Checker: e.ck, op: op}
	}
	enf, err := guard.NewEnforcer(guard.Config{Checker: checker, Audit: al, RefuseErrno: refuse})
	if err != nil {
		t.Fatal(err)
	}
	e.mnt, e.st = h.Mount(t, enf)
	return e
}

// brokenChecker allows op wherever the index it wraps refuses it: what an enforcer that skips the
// question for one operation does.
type brokenChecker struct {
	*guardtest.Checker
	op string
}

func (b brokenChecker) Decide(ctx context.Context, key string, op verdict.Op, seen ...store.ObjectInfo) verdict.Decision {
	d := b.Checker.Decide(ctx, key, op, seen...)
	if op.String() == b.op {
		return verdict.Decision{Allow: true, Reason: verdict.ReasonAllowed}
	}
	return d
}

// path is key's name on the mount.
func (e *env) path(key string) string { return filepath.Join(e.mnt, filepath.FromSlash(key)) }

// want reports err unless it is want (0: success).
func want(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	switch {
	case want == 0 && err != nil:
		t.Errorf("%s: %v, want success", what, err)
	case want != 0 && !errors.Is(err, want):
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// intact fails t unless key holds data in the store.
func (e *env) intact(t *testing.T, what, key, data string) {
	t.Helper()
	if got, ok := e.st.Get(t, key); !ok || got != data {
		t.Errorf("%s: %s holds %q (exists %v), want %q untouched", what, key, got, ok, data)
	}
}

// gone fails t if key is still a file in the store.
func (e *env) gone(t *testing.T, what, key string) {
	t.Helper()
	if _, ok := e.st.Get(t, key); ok {
		t.Errorf("%s: %s is still in the store", what, key)
	}
}

// told fails t unless the index was told the notification ("deleted x", "renamed x y", "written x").
func (e *env) told(t *testing.T, call string) {
	t.Helper()
	if !slices.Contains(e.ck.CallLog(), call) {
		t.Errorf("index not told %q: %v", call, e.ck.CallLog())
	}
}

// records returns the audit log so far, without the attempts an interrupt answered with EINTR (Go's
// preemption signal interrupts a system call; the caller retried, and the retry is what counts).
func (e *env) records(t *testing.T) []audit.Record {
	t.Helper()
	recs, err := audit.ReadFile(e.auditPath)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(recs, func(r audit.Record) bool { return r.Errno == "EINTR" })
}

// wantErrText fails t unless a tool's output says the refusal in words (strerror of the errno).
func wantErrText(t *testing.T, tool string, out []byte, err error, errno syscall.Errno) {
	t.Helper()
	if err == nil || !strings.Contains(strings.ToLower(string(out)), errno.Error()) {
		t.Errorf("%s: %v, output %q: want a failure saying %q", tool, err, out, errno.Error())
	}
}

// retryEINTR runs a system call the os package has no wrapper for (rmdir(2) itself, setxattr(2)) as
// the os package runs its own: again while it fails with EINTR. Go's runtime interrupts a thread
// blocked in a system call with a signal (SIGURG, goroutine preemption), the kernel then sends
// FUSE_INTERRUPT, and the daemon answers EINTR when the request's context was cancelled before it did
// anything (hdfsclient checks the context before each NameNode call; guard.refusalErrno): the caller is
// to retry, as os.Remove and os.Rename do. Bounded: a daemon that answers EINTR to every attempt fails
// the test.
func retryEINTR(call func() error) error {
	var err error
	for range 50 {
		if err = call(); !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
	return err
}
