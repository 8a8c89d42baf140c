package mounttest

import (
	"errors"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/guard"
)

// Keys of the guarded-operations cases: ref is what a live checkpoint references.
const (
	refKey  = "job/shared/ref.sst"
	refData = "referenced"
	freeKey = "job/shared/free.sst"
	byChk   = "job/chk-1/_metadata"
)

// audited is what the audit log must show for one operation: a refusal or an allow of op on path (op may
// name alternatives, "write|truncate"), or (kind "") nothing at all, because the operation is not decided.
type audited struct {
	kind, op, path string
}

// check fails t unless the records the operation added (recs[before:]) are what a says.
func (a audited) check(t *testing.T, e *env, recs []audit.Record, before int) {
	t.Helper()
	added := recs[before:]
	if a.kind == "" {
		if len(added) != 0 {
			t.Errorf("an undecided operation left audit records: %+v", added)
		}
		return
	}
	i := slices.IndexFunc(added, func(r audit.Record) bool {
		return r.Decision == a.kind && slices.Contains(strings.Split(a.op, "|"), r.Op) && r.Path == a.path
	})
	if i < 0 {
		t.Errorf("no %s record of %s %s in the audit log: %+v", a.kind, a.op, a.path, added)
		return
	}
	r := added[i]
	if a.kind == "refuse" && (r.Errno != guard.ErrnoName(e.refuse) || r.Reason != "referenced" || r.PID == 0 || r.Comm == "" ||
		len(r.Referencing) == 0) {
		t.Errorf("incomplete refusal record (want errno %s, reason referenced, pid, comm, referencing): %+v", guard.ErrnoName(e.refuse), r)
	}
}

// oTrunc is the decision an open(O_TRUNC) of an existing file is audited as: a truncate where the kernel
// hands the mount O_TRUNC with the open, a write where it opens for writing and truncates afterwards (as
// it does for a filesystem that does not ask for atomic O_TRUNC); the truncate is then decided on its
// own once the open is allowed.
const oTrunc = "write|truncate"

// guardedCase is one operation of the guarded-operations tables.
type guardedCase struct {
	name  string
	do    func(e *env) error
	errno syscall.Errno // 0: allowed
	audit audited
}

// runGuarded runs the cases in order on e, checking after each that the referenced file is untouched
// and the audit log shows the decision.
func runGuarded(t *testing.T, e *env, cases []guardedCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.records(t))
			want(t, tc.name, tc.do(e), tc.errno)
			e.intact(t, tc.name, refKey, refData)
			tc.audit.check(t, e, e.records(t), before)
		})
	}
}

// openClose opens name with flags and closes it again at once.
func openClose(name string, flags int) error {
	f, err := os.OpenFile(name, flags, 0)
	if err == nil {
		return f.Close()
	}
	return err
}

// refusedWhenReferenced: every change that would destroy a referenced file, or the folder holding it,
// is refused with the refusal errno and recorded; reads and owner changes pass undecided.
func refusedWhenReferenced(t *testing.T, h Harness) {
	e := start(t, h, syscall.EPERM)
	e.st.Put(t, byChk, "meta")
	e.st.Put(t, refKey, refData)
	e.st.Put(t, freeKey, "garbage")
	e.ck.Protect(refKey, byChk)
	refused := func(op, path string) audited { return audited{"refuse", op, path} }

	rmdirErrno, rmdirAudit := e.refuse, refused("rmdir", "job/shared")
	if !h.RmdirDecidesFirst {
		rmdirErrno, rmdirAudit = syscall.ENOTEMPTY, audited{}
	}
	dirRenameErrno, dirRenameAudit := e.refuse, refused("rename", "job/shared")
	if !h.DirRename {
		dirRenameErrno, dirRenameAudit = syscall.EXDEV, audited{}
	}
	linkErrno, linkAudit := e.refuse, refused("link", refKey)
	if !h.HardLinks {
		linkErrno, linkAudit = syscall.ENOTSUP, audited{}
	}
	runGuarded(t, e, []guardedCase{
		{"unlink", func(e *env) error { return os.Remove(e.path(refKey)) }, e.refuse, refused("unlink", refKey)},
		{"truncate by path", func(e *env) error { return os.Truncate(e.path(refKey), 0) }, e.refuse, refused("truncate", refKey)},
		{"open O_TRUNC", func(e *env) error { return openClose(e.path(refKey), os.O_WRONLY|os.O_TRUNC) }, e.refuse, refused(oTrunc, refKey)},
		{"open for writing", func(e *env) error { return openClose(e.path(refKey), os.O_WRONLY) }, e.refuse, refused("write", refKey)},
		{"open for appending", func(e *env) error { return openClose(e.path(refKey), os.O_WRONLY|os.O_APPEND) }, e.refuse, refused("write", refKey)},
		{"open for reading and writing", func(e *env) error { return openClose(e.path(refKey), os.O_RDWR) }, e.refuse, refused("write", refKey)},
		{"rename", func(e *env) error { return os.Rename(e.path(refKey), e.path("job/moved.sst")) }, e.refuse, refused("rename", refKey)},
		{"rename onto", func(e *env) error { return os.Rename(e.path(freeKey), e.path(refKey)) }, e.refuse, refused("replace", refKey)},
		{"rmdir of the folder", func(e *env) error { return retryEINTR(func() error { return syscall.Rmdir(e.path("job/shared")) }) }, rmdirErrno, rmdirAudit},
		{"rename of the folder", func(e *env) error { return os.Rename(e.path("job/shared"), e.path("job/shared2")) }, dirRenameErrno, dirRenameAudit},
		{"hard link", func(e *env) error { return os.Link(e.path(refKey), e.path("job/alias")) }, linkErrno, linkAudit},
		{"read", func(e *env) error { _, err := os.ReadFile(e.path(refKey)); return err }, 0, audited{}},
		// A restore (cp -a, tar -p as root) gives files their owner after creating them owner-only: a
		// change of owner is not decided.
		{"chown", func(e *env) error { return os.Chown(e.path(refKey), 65534, 65534) }, 0, audited{}},
		{"chown to the owner it has", func(e *env) error { return os.Chown(e.path(refKey), os.Getuid(), -1) }, 0, audited{}},
	})
	e.intact(t, "after the refusals", freeKey, "garbage")
}

// allowedWhenUnreferenced: what nothing references can be deleted, renamed, truncated and rewritten
// through the mount; each change is recorded as allowed and the index is told of it.
func allowedWhenUnreferenced(t *testing.T, h Harness) {
	e := start(t, h, syscall.EPERM)
	e.st.Put(t, refKey, refData)
	e.ck.Protect(refKey, byChk)
	for _, k := range []string{"j/del", "j/mv", "j/trunc", "j/otrunc", "j/size", "j/times", "j/chmod", "j/emptied/x"} {
		e.st.Put(t, k, "content")
	}
	allowed := func(op, path string) audited { return audited{"allow", op, path} }
	sizeErrno, sizeAudit := syscall.Errno(0), allowed("truncate", "j/size")
	if !h.TruncateToSize {
		sizeErrno, sizeAudit = syscall.EOPNOTSUPP, audited{}
	}
	chmodAudit := audited{}
	if h.Modes {
		chmodAudit = allowed("chmod", "j/chmod")
	}
	runGuarded(t, e, []guardedCase{
		{"unlink", func(e *env) error { return os.Remove(e.path("j/del")) }, 0, allowed("unlink", "j/del")},
		{"rename", func(e *env) error { return os.Rename(e.path("j/mv"), e.path("j/moved")) }, 0, allowed("rename", "j/mv")},
		{"truncate by path to 0", func(e *env) error { return os.Truncate(e.path("j/trunc"), 0) }, 0, allowed("truncate", "j/trunc")},
		{"open O_TRUNC and write", func(e *env) error {
			return os.WriteFile(e.path("j/otrunc"), []byte("new"), 0o644)
		}, 0, allowed("truncate", "j/otrunc")},
		{"truncate by path to a size", func(e *env) error { return os.Truncate(e.path("j/size"), 3) }, sizeErrno, sizeAudit},
		{"unlink then rmdir of the emptied folder", func(e *env) error {
			if err := os.Remove(e.path("j/emptied/x")); err != nil {
				return err
			}
			return retryEINTR(func() error { return syscall.Rmdir(e.path("j/emptied")) })
		}, 0, allowed("rmdir", "j/emptied")},
		{"mkdir", func(e *env) error { return os.Mkdir(e.path("j/newdir"), 0o755) }, 0, audited{}},
		{"utimes forward", func(e *env) error { return os.Chtimes(e.path("j/times"), time.Now(), time.Now().Add(time.Hour)) }, 0, audited{}},
		{"chmod taking read away", func(e *env) error { return os.Chmod(e.path("j/chmod"), 0o600) }, 0, chmodAudit},
	})
	for _, k := range []string{"j/del", "j/mv", "j/emptied/x"} {
		e.gone(t, "after the allowed changes", k)
	}
	e.intact(t, "renamed", "j/moved", "content")
	e.intact(t, "truncated", "j/trunc", "")
	e.intact(t, "rewritten", "j/otrunc", "new")
	if h.TruncateToSize {
		e.intact(t, "truncated to a size", "j/size", "con")
	} else {
		e.intact(t, "truncate to a size refused", "j/size", "content")
	}
	for _, c := range []string{"deleted j/del", "renamed j/mv j/moved", "deleted j/emptied/x", "deleted j/emptied"} {
		e.told(t, c)
	}
	if h.DirRename {
		e.st.Put(t, "j/dir/f", "content")
		want(t, "rename of a folder", os.Rename(e.path("j/dir"), e.path("j/dir2")), 0)
		e.intact(t, "renamed folder", "j/dir2/f", "content")
		e.told(t, "renamed j/dir j/dir2")
	}
	err := os.Symlink("moved", e.path("j/link"))
	if h.Symlinks {
		want(t, "symlink", err, 0)
	} else if err == nil {
		t.Errorf("symlink succeeded on a store without symlinks")
	}
}

// configuredErrno: refusals answer with the errno the enforcer is configured with, and the audit log
// names it.
func configuredErrno(t *testing.T, h Harness) {
	e := start(t, h, syscall.EBUSY)
	e.st.Put(t, refKey, refData)
	e.ck.Protect(refKey, byChk)
	refused := func(op string) audited { return audited{"refuse", op, refKey} }
	runGuarded(t, e, []guardedCase{
		{"unlink", func(e *env) error { return os.Remove(e.path(refKey)) }, syscall.EBUSY, refused("unlink")},
		{"rename", func(e *env) error { return os.Rename(e.path(refKey), e.path("job/x")) }, syscall.EBUSY, refused("rename")},
		{"truncate by path", func(e *env) error { return os.Truncate(e.path(refKey), 0) }, syscall.EBUSY, refused("truncate")},
		{"open O_TRUNC", func(e *env) error { return openClose(e.path(refKey), os.O_WRONLY|os.O_TRUNC) }, syscall.EBUSY, refused(oTrunc)},
	})
}

// openDescriptorDecidedAgain: a descriptor opened for writing while its file was unreferenced cannot
// truncate it once a checkpoint references the file: ftruncate is decided again.
func openDescriptorDecidedAgain(t *testing.T, h Harness) {
	e := start(t, h, syscall.EPERM)
	e.st.Put(t, "job/chk-3/state", "original")
	f, err := os.OpenFile(e.path("job/chk-3/state"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.ck.Protect("job/chk-3/state", "job/chk-3/_metadata") // a checkpoint indexed since the open references it
	want(t, "ftruncate of a now referenced file", f.Truncate(0), e.refuse)
	_ = f.Close()
	e.intact(t, "after ftruncate", "job/chk-3/state", "original")
}

// modes: where the store keeps modes, a chmod that leaves a referenced file (or a folder holding one)
// unreadable to someone who could read it is refused, as a file the Flink user cannot read fails the
// restore like a deleted one; adding permissions and taking write away pass undecided. Where it does
// not, chmod is accepted without effect.
func modes(t *testing.T, h Harness) {
	e := start(t, h, syscall.EPERM)
	e.st.Put(t, refKey, refData)
	e.st.Put(t, "job/shared/private.sst", "readable by owner and group")
	if !h.Modes {
		e.ck.Protect(refKey, byChk)
		runGuarded(t, e, []guardedCase{
			{"chmod 0600", func(e *env) error { return os.Chmod(e.path(refKey), 0o600) }, 0, audited{}},
			{"chmod 000 of the folder", func(e *env) error { return os.Chmod(e.path("job/shared"), 0) }, 0, audited{}},
		})
		return
	}
	// Owner and group only, set while unreferenced (a chmod taking read away from others: allowed).
	want(t, "chmod 0640 while unreferenced", os.Chmod(e.path("job/shared/private.sst"), 0o640), 0)
	e.ck.Protect(refKey, byChk)
	e.ck.Protect("job/shared/private.sst", byChk)
	refused := func(path string) audited { return audited{"refuse", "chmod", path} }
	runGuarded(t, e, []guardedCase{
		{"chmod taking read away", func(e *env) error { return os.Chmod(e.path(refKey), 0o600) }, e.refuse, refused(refKey)},
		{"chmod taking group read away", func(e *env) error { return os.Chmod(e.path("job/shared/private.sst"), 0o600) },
			e.refuse, refused("job/shared/private.sst")},
		{"chmod 000 of the folder", func(e *env) error { return os.Chmod(e.path("job/shared"), 0) }, e.refuse, refused("job/shared")},
		{"chmod taking write away", func(e *env) error { return os.Chmod(e.path(refKey), 0o444) }, 0, audited{}},
		{"chmod adding permissions", func(e *env) error { return os.Chmod(e.path(refKey), 0o664) }, 0, audited{}},
	})
}

// times: where the store keeps mtimes, moving a referenced file's mtime into the past is decided
// (grace is judged by mtime) and refused; elsewhere utimes is accepted without effect.
func times(t *testing.T, h Harness) {
	e := start(t, h, syscall.EPERM)
	e.st.Put(t, refKey, refData)
	e.ck.Protect(refKey, byChk)
	errno, a := e.refuse, audited{"refuse", "write", refKey}
	if !h.Times {
		errno, a = 0, audited{}
	}
	old := time.Now().Add(-time.Hour)
	runGuarded(t, e, []guardedCase{
		{"backdate", func(e *env) error { return os.Chtimes(e.path(refKey), old, old) }, errno, a},
		{"utimes forward", func(e *env) error { return os.Chtimes(e.path(refKey), time.Now(), time.Now().Add(time.Hour)) }, 0, audited{}},
	})
}

// hardLinks: where the store has hard links, a second name of an unreferenced file can be made, and
// once a checkpoint references the file by its first name, the second cannot write or truncate it (the
// index knows files by name); removing the second name leaves the data; a second name _metadata is
// indexed before link returns (linkedMetadata). Elsewhere link fails ENOTSUP.
func hardLinks(t *testing.T, h Harness) {
	e := start(t, h, syscall.EPERM)
	e.st.Put(t, "a/free", "data")
	err := os.Link(e.path("a/free"), e.path("a/alias"))
	if !h.HardLinks {
		want(t, "link", err, syscall.ENOTSUP)
		return
	}
	if err != nil {
		t.Fatalf("link to an unreferenced file: %v", err)
	}
	e.ck.Protect("a/free", "job/chk-9/_metadata")
	want(t, "truncate through the second name", os.Truncate(e.path("a/alias"), 0), e.refuse)
	want(t, "open for writing through the second name", openClose(e.path("a/alias"), os.O_WRONLY), e.refuse)
	want(t, "unlink of the unreferenced second name", os.Remove(e.path("a/alias")), 0)
	e.intact(t, "after the second name", "a/free", "data")
	linkedMetadata(t, e)
}

// linkedMetadata: a hard link named _metadata (cp -al of a checkpoint folder) makes a live checkpoint,
// so it is indexed before link returns; when indexing fails the new name is removed again and the
// caller gets EIO (were it left to the next sync, deleting the original _metadata in the meantime would
// make the checkpoint's files deletable). Any other new name is no checkpoint and is not indexed.
func linkedMetadata(t *testing.T, e *env) {
	e.st.Put(t, "job/chk-5/_metadata", "meta")
	e.st.Put(t, "job/chk-5/state", "s")
	for _, d := range []string{"archive", "broken"} {
		if err := os.Mkdir(e.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.ck.SetWrittenHook(func(key string) error {
		if key == "broken/_metadata" {
			return errors.New("index unavailable")
		}
		e.ck.Protect("job/chk-5/state", key)
		return nil
	})
	if err := os.Link(e.path("job/chk-5/_metadata"), e.path("archive/_metadata")); err != nil {
		t.Fatalf("link onto _metadata: %v", err)
	}
	e.told(t, "written archive/_metadata")
	want(t, "unlink of what the linked _metadata references, right after link", os.Remove(e.path("job/chk-5/state")), e.refuse)
	want(t, "link whose indexing failed", os.Link(e.path("job/chk-5/_metadata"), e.path("broken/_metadata")), syscall.EIO)
	e.gone(t, "the link whose indexing failed", "broken/_metadata")
	if err := os.Link(e.path("job/chk-5/_metadata"), e.path("archive/meta.bak")); err != nil {
		t.Fatalf("link to another name: %v", err)
	}
	if slices.Contains(e.ck.CallLog(), "written archive/meta.bak") {
		t.Error("a link not named _metadata was indexed")
	}
}
