package s3mount_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3store"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestUploadDecidedAgain: a write handle opened on an existing object (allowed then) replaces
// it only at close; if a checkpoint came to reference the object meanwhile, the close is refused and the
// object stays as it was. A second upload of the same handle (after an fsync) replaces only its own
// content and is not decided again.
func TestUploadDecidedAgain(t *testing.T) {
	ck := newChecker()
	e := setup(t, ck, nil)
	e.put(t, "job/chk-3/state", "original")
	e.put(t, "job/chk-3/other", "original")

	f, err := os.OpenFile(e.path("job/chk-3/state"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("CHANGED!"), 0); err != nil {
		t.Fatal(err)
	}
	ck.Protect("job/chk-3/state") // a checkpoint indexed since the open references it
	wantErrno(t, "close of a write handle on a now referenced object", f.Close(), syscall.EPERM)
	b := make([]byte, 64)
	m, err := e.c.ReadAt(context.Background(), "job/chk-3/state", b, 0, "")
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if string(b[:m]) != "original" {
		t.Errorf("referenced object replaced: %q", b[:m])
	}

	g, err := os.OpenFile(e.path("job/chk-3/other"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt([]byte("first"), 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(); err != nil {
		t.Fatalf("first upload: %v", err)
	}
	ck.Young("job/chk-3/other") // now in grace: it was just written
	if _, err := g.WriteAt([]byte("second"), 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("second upload of the handle's own content: %v", err)
	}
}

// TestMetadataCommitRealIndex: through the S3 mount with the real index, Flink's commit
// (chk-78/._metadata.inprogress.<uuid> -> chk-78/_metadata) succeeds and protects what it references at
// once, while moving an in-flight checkpoint folder or an in-flight state file onto _metadata is refused.
func TestMetadataCommitRealIndex(t *testing.T) {
	s3server.RequireFUSE(t)
	ctx := context.Background()
	srv := s3server.Start(t)
	srv.Bucket(t, "ckpt")
	c, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: "ckpt", Prefix: "flink/"})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := treegen.YoungOrphan(filepath.Join(t.TempDir(), "gen"), time.Now(), treegen.Options{URIPrefix: "s3://ckpt/flink"})
	if err != nil {
		t.Fatal(err)
	}
	job := "flink/fedcba9876543210fedcba9876543210"
	put := func(k string, b []byte) {
		if _, err := c.Put(ctx, k, bytes.NewReader(b), int64(len(b)), s3client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for k := range tr.Files {
		b, err := os.ReadFile(filepath.Join(tr.Root, k))
		if err != nil {
			t.Fatal(err)
		}
		put(k, b)
	}
	put(job+"/chk-78/inflight-state", bytes.Repeat([]byte{'a'}, 100))
	put(job+"/chk-78/inflight-state-2", bytes.Repeat([]byte{'b'}, 100))
	st := s3store.New(c, s3store.Options{})
	ix, err := refindex.Open(filepath.Join(t.TempDir(), "index"), st, refindex.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	enf, err := guard.NewEnforcer(guard.Config{Checker: ix})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, c: c, mnt: t.TempDir()}
	e.opts = s3mount.Options{Client: c, Mountpoint: e.mnt, Enforcer: enf, SpoolDir: t.TempDir()}
	e.mount(t)

	chk := job + "/chk-78"
	if out, err := exec.Command("mv", "-T", e.path(chk), e.path(job+"/_metadata")).CombinedOutput(); err == nil {
		t.Errorf("mv -T chk-78 _metadata succeeded: %s", out)
	}
	if out, err := exec.Command("mv", e.path(chk+"/inflight-state-2"), e.path(chk+"/_metadata")).CombinedOutput(); err == nil || !strings.Contains(string(out), "not permitted") {
		t.Errorf("mv chk-78/inflight-state-2 chk-78/_metadata: %v %s, want EPERM", err, out)
	}
	for _, k := range []string{chk + "/inflight-state", chk + "/inflight-state-2"} {
		if !e.exists(t, k) {
			t.Errorf("%s gone from the bucket", k)
		}
	}
	if e.exists(t, chk+"/_metadata") {
		t.Errorf("a state file became chk-78/_metadata")
	}

	// The job manager's chk-78/_metadata, referencing the in-flight files.
	ck78, err := tr.Checkpoint(treegen.Spec{Dir: chk, ID: 78, Completed: time.Now(), Private: []string{"inflight-state", "inflight-state-2"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(tr.Root, ck78.Metadata))
	if err != nil {
		t.Fatal(err)
	}
	tmp := e.path(chk + "/._metadata.inprogress.6f1c2a9e-0b1d-4c3e-9a7f-1d2e3f4a5b6c")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, e.path(chk+"/_metadata")); err != nil {
		t.Fatalf("Flink's _metadata commit through the S3 mount: %v", err)
	}
	if d := ix.Decide(ctx, chk+"/_metadata", verdict.OpUnlink); d.Allow {
		t.Errorf("committed chk-78/_metadata deletable at once: %+v", d)
	}
	if d := ix.Decide(ctx, chk+"/inflight-state", verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonReferenced {
		t.Errorf("a file chk-78 references is not protected as referenced right after the commit: %+v", d)
	}
}

// TestCreateOfAppearedObjectKeepsContent: the kernel sends CREATE for a name it believes missing (negative
// entry cache); if the object appeared beside the mount meanwhile, an open without O_TRUNC (an append) must
// not truncate it: it is a read-modify-write decided as OpWrite.
func TestCreateOfAppearedObjectKeepsContent(t *testing.T) {
	ck := newChecker()
	e := setup(t, ck, nil)
	e.put(t, "job/other", "x")
	p := e.path("job/log")
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("stat: %v", err)
	}
	e.put(t, "job/log", "original")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("+more")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	m, err := e.c.ReadAt(context.Background(), "job/log", b, 0, "")
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if got := string(b[:m]); got != "original+more" {
		t.Errorf("object after an append through a CREATE = %q, want %q", got, "original+more")
	}
	for _, d := range ck.Decisions() {
		if strings.HasPrefix(d, "truncate ") {
			t.Errorf("append decided as %s", d)
		}
	}
}

// TestNoHolePunchOnS3: the S3 mount has no fallocate at all, so a write handle cannot
// punch holes or zero ranges; an object changes only by a whole upload, which is decided (open, and again
// before the upload).
func TestNoHolePunchOnS3(t *testing.T) {
	e := setup(t, newChecker(), nil)
	e.put(t, "job/chk-9/state", "0123456789")
	f, err := os.OpenFile(e.path("job/chk-9/state"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []uint32{unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_ZERO_RANGE} {
		if err := unix.Fallocate(int(f.Fd()), mode, 0, 4); err == nil {
			t.Errorf("fallocate mode %#x through the S3 mount succeeded", mode)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 16)
	if m, err := e.c.ReadAt(context.Background(), "job/chk-9/state", b, 0, ""); string(b[:m]) != "0123456789" {
		t.Errorf("object changed: %q %v", b[:m], err)
	}
}

// TestOpenTruncOfExistingObject: open(O_TRUNC) of an existing unreferenced object (a shell's "> file")
// replaces it with what was written. The kernel sends it as an open for writing and a truncate without a
// handle; a truncate that emptied the object itself would fail the writer's upload at close (ESTALE: its
// If-Match names the version it opened) and leave the file empty.
func TestOpenTruncOfExistingObject(t *testing.T) {
	e := setup(t, newChecker(), nil)
	e.put(t, "j/f", "old content")
	if err := os.WriteFile(e.path("j/f"), []byte("new"), 0o644); err != nil {
		t.Fatalf("write onto an existing object: %v", err)
	}
	b := make([]byte, 64)
	m, err := e.c.ReadAt(context.Background(), "j/f", b, 0, "")
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if string(b[:m]) != "new" {
		t.Errorf("object after open(O_TRUNC) and write: %q, want %q", b[:m], "new")
	}
}

// TestTruncateByPathAfterFlush: a truncate(2) by path of an object whose writer has uploaded everything
// (a close flushed it; the handle is still open through a dup'd descriptor, as while a release is on its
// way) empties the object before truncate returns, and the writer's later close keeps it so.
func TestTruncateByPathAfterFlush(t *testing.T) {
	e := setup(t, newChecker(), nil)
	e.put(t, "job/chk-3/state", "original")
	f, err := os.OpenFile(e.path("job/chk-3/state"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("written!"), 0); err != nil {
		t.Fatal(err)
	}
	dup, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil { // the flush uploads "written!"; the handle stays open through dup
		t.Fatal(err)
	}
	read := func() string {
		b := make([]byte, 64)
		m, err := e.c.ReadAt(context.Background(), "job/chk-3/state", b, 0, "")
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		return string(b[:m])
	}
	if got := read(); got != "written!" {
		t.Fatalf("after the flush the store holds %q, want the written content", got)
	}
	if err := os.Truncate(e.path("job/chk-3/state"), 0); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "" {
		t.Errorf("truncate(2) by path returned, but the store still holds %q", got)
	}
	if err := unix.Close(dup); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "" {
		t.Errorf("after the last close the store holds %q, want it empty", got)
	}
}
