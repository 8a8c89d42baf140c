package refindex_test

// Safety rules of the index that span sync and decide: partial listings, unparseable and
// unmapped _metadata, symlinked store roots, in-flight writes, globs, streaming, Close.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// TestDamagedNewestNotProtected: a damaged _metadata in the job's highest chk-N folder (a JobManager
// that crashed mid-write) is no checkpoint the job can restart from: it does not take the active-window
// protection away from the job's previous good checkpoint, is not protected itself, and once past
// --grace it (and its folder) may be deleted; it refuses nothing else. (It used to count as the newest
// and block every deletion for the active window.)
func TestDamagedNewestNotProtected(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	job := "flink/fedcba9876543210fedcba9876543210"
	good, err := tr.Checkpoint(treegen.Spec{Dir: job + "/chk-78", ID: 78, Completed: testNow.Add(-3 * time.Hour), Private: []string{"p78"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tr.Checkpoint(treegen.Spec{Dir: job + "/chk-79", ID: 79, Completed: testNow.Add(-2 * time.Hour), Private: []string{"p"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.WriteBytes(c.Metadata, []byte("\x00\x00\x00\x06garbage"), testNow.Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, tr)
	for _, op := range []verdict.Op{verdict.OpUnlink, verdict.OpRename, verdict.OpTruncate} {
		if d := ix.Decide(ctx, c.Metadata, op); !d.Allow {
			t.Errorf("%s of the damaged newest _metadata, past --grace: %+v", op, d)
		}
		if d := ix.Decide(ctx, good.Metadata, op); d.Allow || d.Reason != verdict.ReasonProtectedMetadata {
			t.Errorf("%s of the previous good checkpoint (the job's newest): %+v", op, d)
		}
	}
	if d := ix.Decide(ctx, job+"/chk-79", verdict.OpRmdir); !d.Allow {
		t.Errorf("rmdir of the damaged checkpoint's folder: %+v", d)
	}
	if d := ix.Decide(ctx, good.Refs[0], verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonReferenced {
		t.Errorf("a file of the good checkpoint: %+v", d)
	}
	cs, err := ix.Checkpoints(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(cs.Unparseable) != 1 || cs.Unparseable[0].Protected {
		t.Errorf("checkpoints shows the damaged one as protected: %+v", cs.Unparseable)
	}
	// What it refuses is said in its scope (a damaged one: only itself), never "every deletion".
	if len(cs.Unparseable) == 1 && !strings.HasPrefix(cs.Unparseable[0].Refuses, "nothing but itself") {
		t.Errorf("checkpoints says the damaged one refuses %q, want nothing but itself", cs.Unparseable[0].Refuses)
	}
	// Within --grace (just written) it is kept.
	pol := testPolicy()
	pol.Grace = 3 * time.Hour
	if err := ix.SetPolicy(pol); err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, c.Metadata, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonGrace {
		t.Errorf("damaged _metadata within --grace: %+v", d)
	}
}

// TestSymlinkedStoreRoot: a store given through a symlinked path: Flink wrote its references
// through the link, and they must protect the store's files.
func TestSymlinkedStoreRoot(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	real := filepath.Join(base, "nfs", "ckpt")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "flink")
	if err := os.Symlink(filepath.Join(base, "nfs"), link); err != nil {
		t.Fatal(err)
	}
	given := filepath.Join(link, "ckpt")
	tr, err := treegen.IncidentOne(real, testNow, treegen.Options{URIPrefix: "file:" + given})
	if err != nil {
		t.Fatal(err)
	}
	ix := openSynced(t, localStore(t, given))
	refs := tr.Referenced()
	if len(refs) == 0 {
		t.Fatal("scenario references nothing")
	}
	for _, k := range refs {
		if d := ix.Decide(ctx, k, verdict.OpUnlink); d.Allow {
			t.Errorf("referenced %s deletable: %+v", k, d)
		}
	}
	if s, _ := ix.Stats(ctx); s.OutsideReferences != 0 {
		t.Errorf("%d references through the symlinked root counted as outside", s.OutsideReferences)
	}
}

// TestInFlightWriteAndLinkRefused: opening an in-flight (young, unreferenced) file for writing is
// refused like deleting it; with a newer-format _metadata nothing may be written to or linked, with
// a damaged one everything else stays as it was.
func TestInFlightWriteAndLinkRefused(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	young := tr.InGrace(treegen.DefaultPolicy)
	old := tr.Orphans(treegen.DefaultPolicy, 0)
	if len(young) != 1 || len(old) != 1 {
		t.Fatalf("scenario: young %v old %v", young, old)
	}
	ix := openTree(t, tr)
	if d := ix.Decide(ctx, young[0], verdict.OpWrite); d.Allow || d.Reason != verdict.ReasonGrace {
		t.Errorf("write of an in-flight file: %+v", d)
	}
	if d := ix.Decide(ctx, young[0], verdict.OpLink); !d.Allow {
		t.Errorf("link of an in-flight file: %+v", d)
	}
	if d := ix.Decide(ctx, old[0], verdict.OpWrite); !d.Allow {
		t.Errorf("write of an old orphan: %+v", d)
	}
	// A damaged _metadata refuses nothing else: writes and links stay allowed.
	if err := tr.WriteBytes("flink/fedcba9876543210fedcba9876543210/chk-76/_metadata", []byte("broken"), testNow.Add(-9*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, op := range []verdict.Op{verdict.OpWrite, verdict.OpLink} {
		if d := ix.Decide(ctx, old[0], op); !d.Allow {
			t.Errorf("%s with a damaged _metadata: %+v", op, d)
		}
	}
	// One of a newer format version, from the job folder's owner (this test's user): writes and
	// links are refused too.
	if err := tr.WriteBytes("flink/fedcba9876543210fedcba9876543210/chk-76/_metadata", newerFormat, testNow.Add(-9*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, op := range []verdict.Op{verdict.OpWrite, verdict.OpLink} {
		if d := ix.Decide(ctx, old[0], op); d.Allow || d.Reason != verdict.ReasonUnparseable {
			t.Errorf("%s with a newer-format _metadata: %+v", op, d)
		}
	}
}

// newerFormat is the start of a `_metadata` of a format version the parser does not know (Flink's
// magic number, version 9).
var newerFormat = []byte("\x49\x60\x67\x2d\x00\x00\x00\x09\x00\x00\x00\x00\x00\x00\x00\x01")

// TestNewestByTimeToo: a job resubmitted with a fixed job id restarts its checkpoint ids in the
// same folder; its newest checkpoint (chk-51, completed after the old chk-100) is protected too.
func TestNewestByTimeToo(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	job := "flink/00000000000000000000000000000000"
	old, err := tr.Checkpoint(treegen.Spec{Dir: job + "/chk-100", ID: 100, Completed: testNow.Add(-3 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	mid, err := tr.Checkpoint(treegen.Spec{Dir: job + "/chk-50", ID: 50, Completed: testNow.Add(-2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	newer, err := tr.Checkpoint(treegen.Spec{Dir: job + "/chk-51", ID: 51, Completed: testNow.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, tr)
	for _, c := range []*treegen.Checkpoint{old, newer} {
		if d := ix.Decide(ctx, c.Metadata, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonProtectedMetadata {
			t.Errorf("%s: %+v", c.Metadata, d)
		}
	}
	if d := ix.Decide(ctx, mid.Metadata, verdict.OpUnlink); !d.Allow {
		t.Errorf("%s (subsumed by chk-51): %+v", mid.Metadata, d)
	}
}

// TestUnparseableWriteIsNoError: a _metadata written directly (not renamed into place) that cannot
// be parsed is recorded as unparseable (damaged: refusing nothing else; a newer format from the job
// folder's owner: every deletion refused) and its close through the mount succeeds.
func TestUnparseableWriteIsNoError(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, tr)
	meta := "flink/fedcba9876543210fedcba9876543210/chk-78/_metadata"
	if err := tr.WriteBytes(meta, []byte("half a _metadata"), testNow.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := ix.Written(ctx, meta); err != nil {
		t.Fatalf("close of an unparseable _metadata through the mount: %v", err)
	}
	if err := ix.IndexMetadata(ctx, meta); !errors.Is(err, refindex.ErrUnparseable) {
		t.Fatalf("IndexMetadata = %v, want ErrUnparseable", err)
	}
	old := tr.Orphans(treegen.DefaultPolicy, 0)
	// Damaged (half a file): it refuses nothing but itself.
	if d := ix.Decide(ctx, old[0], verdict.OpUnlink); !d.Allow {
		t.Errorf("with the damaged _metadata recorded: %+v", d)
	}
	if d := ix.Decide(ctx, meta, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonGrace {
		t.Errorf("the young damaged _metadata itself: %+v", d)
	}
	// A newer format from the job folder's owner: every deletion refused, and still no error.
	if err := tr.WriteBytes(meta, newerFormat, testNow.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := ix.Written(ctx, meta); err != nil {
		t.Fatalf("close of a newer-format _metadata through the mount: %v", err)
	}
	if d := ix.Decide(ctx, old[0], verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonUnparseable {
		t.Errorf("with the newer-format _metadata recorded: %+v", d)
	}
}

// TestMappingChangedNotSynced: reopened with another path mapping and not synced, the index refuses
// instead of answering from keys derived with the old mapping.
func TestMappingChangedNotSynced(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.SchemeAliasing(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	ix := reopened(t, localStore(t, tr.Root), refindex.WithPathMap(tr.Maps, ""))
	k := tr.Referenced()[0]
	if d := ix.Decide(ctx, k, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonIndexStale || !strings.Contains(d.Message, "mapping") {
		t.Fatalf("mapping changed, not synced: %+v", d)
	}
	if or, _ := ix.Orphans(ctx, 0); or.Blocked == "" {
		t.Errorf("orphans not blocked after a mapping change: %+v", or)
	}
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if d := ix.Decide(ctx, k, verdict.OpUnlink); d.Reason != verdict.ReasonReferenced {
		t.Fatalf("after the sync: %+v", d)
	}
}

// TestRootDirectoryHandle: a file-merging directory handle that maps to the store root covers
// objects at the root too.
func TestRootDirectoryHandle(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tr.Checkpoint(treegen.Spec{Dir: "flink/fedcba9876543210fedcba9876543210/chk-78", ID: 78, Completed: testNow.Add(-48 * time.Hour), Dirs: []string{"managed"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Data(c, testNow.Add(-49*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Write("loose-physical-file", 10, testNow.Add(-49*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// The managed directory is the store root under another name.
	tr.Maps = append(tr.Maps, pathnorm.Mapping{From: tr.URI("managed")})
	ix := openTree(t, tr)
	if d := ix.Decide(ctx, "loose-physical-file", verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonReferenced {
		t.Errorf("root-level object under a root directory handle: %+v", d)
	}
	or, err := ix.Orphans(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range or.Files {
		if f.Path == "loose-physical-file" {
			t.Errorf("listed as orphan: %+v", f)
		}
	}
}

// TestProtectGlobSyntaxAndEmptyFolders: "**" in a --protect glob is rejected (path.Match would
// match one level only), and an empty folder matching a glob protects the folder above it from a
// rename.
func TestProtectGlobSyntaxAndEmptyFolders(t *testing.T) {
	ctx := context.Background()
	pol := testPolicy()
	pol.Protect = []string{"**/ha"}
	if err := pol.Validate(); err == nil || !strings.Contains(err.Error(), "**") {
		t.Errorf("'**/ha' accepted: %v", err)
	}
	tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tr.Root, "cluster", "ha"), 0o755); err != nil {
		t.Fatal(err)
	}
	ix := openTree(t, tr)
	pol.Protect = []string{"*/ha"}
	if err := ix.SetPolicy(pol); err != nil {
		t.Fatal(err)
	}
	for _, op := range []verdict.Op{verdict.OpRename, verdict.OpRmdir} {
		if d := ix.Decide(ctx, "cluster", op); d.Allow || d.Reason != verdict.ReasonProtectGlob {
			t.Errorf("%s of a folder holding an empty protected folder: %+v", op, d)
		}
	}
}
