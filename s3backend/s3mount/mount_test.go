package s3mount_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex/verdict"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// fakeChecker protects a set of keys (and, for directories, anything below them) and records what the mount
// told it. onDecide, when set, runs inside every decision (to simulate races).
type fakeChecker struct {
	mu        sync.Mutex
	protected map[string]bool
	young     map[string]bool // refused for grace
	written   []string
	deleted   []string
	renamed   []string
	decisions []string
	onDecide  func(path string, op verdict.Op)
}

func newChecker(protected ...string) *fakeChecker {
	c := &fakeChecker{protected: map[string]bool{}}
	for _, p := range protected {
		c.protected[p] = true
	}
	return c
}

func (c *fakeChecker) Decide(ctx context.Context, p string, op verdict.Op) verdict.Decision {
	c.mu.Lock()
	c.decisions = append(c.decisions, op.String()+" "+p)
	hook := c.onDecide
	prot := false
	for k := range c.protected {
		if k == p || strings.HasPrefix(k, p+"/") || p == "" {
			prot = true
		}
	}
	c.mu.Unlock()
	if hook != nil {
		hook(p, op)
	}
	if prot {
		return verdict.Decision{Reason: verdict.ReasonReferenced, Message: p + " is referenced by test"}
	}
	c.mu.Lock()
	young := c.young[p]
	c.mu.Unlock()
	if young {
		return verdict.Decision{Reason: verdict.ReasonGrace, Message: p + " is young"}
	}
	return verdict.Decision{Allow: true, Reason: verdict.ReasonAllowed}
}
func (c *fakeChecker) Deleted(ctx context.Context, p string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deleted = append(c.deleted, p)
	return nil
}
func (c *fakeChecker) Written(ctx context.Context, p string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.written = append(c.written, p)
	return nil
}
func (c *fakeChecker) Renamed(ctx context.Context, from, to string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.renamed = append(c.renamed, from+" -> "+to)
	return nil
}
func (c *fakeChecker) Explain(ctx context.Context, p string) (string, []string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.protected[p] {
		return "referenced", []string{"job/chk-1/_metadata"}, nil
	}
	return "deletable", nil, nil
}

type env struct {
	srv  *s3server.Server
	c    *s3client.Client
	ck   *fakeChecker
	mnt  string
	m    *s3mount.Mounted
	opts s3mount.Options
}

func requireFUSE(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("FUSE mount not run in -short mode")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		s3server.Require(t, err)
	}
}

func setup(t *testing.T, ck *fakeChecker, tune func(*s3mount.Options)) *env {
	requireFUSE(t)
	srv := s3server.Start(t)
	srv.Bucket(t, "ckpt")
	c, err := s3client.New(context.Background(), srv.Config(), s3client.Location{Bucket: "ckpt", Prefix: "flink/"})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, c: c, ck: ck, mnt: t.TempDir()}
	enf, err := guard.NewEnforcer(guard.Config{Checker: ck})
	if err != nil {
		t.Fatal(err)
	}
	e.opts = s3mount.Options{Client: c, Mountpoint: e.mnt, Enforcer: enf, SpoolDir: t.TempDir()}
	if tune != nil {
		tune(&e.opts)
	}
	e.mount(t)
	return e
}

func (e *env) mount(t *testing.T) {
	t.Helper()
	m, err := s3mount.Mount(context.Background(), e.opts)
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			_ = exec.Command("fusermount3", "-uz", e.mnt).Run()
		}
	})
}

func (e *env) put(t *testing.T, key, body string) string {
	t.Helper()
	etag, err := e.c.Put(context.Background(), key, strings.NewReader(body), int64(len(body)), s3client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return etag
}

func (e *env) exists(t *testing.T, key string) bool {
	t.Helper()
	_, err := e.c.Head(context.Background(), key)
	if err != nil && s3client.Errno(err) != syscall.ENOENT {
		t.Fatal(err)
	}
	return err == nil
}

func (e *env) path(rel string) string { return filepath.Join(e.mnt, rel) }

func names(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := f.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// TestNamespaceAndOrder: directories come from common prefixes and "dir/" markers, files from keys, and a
// checkpoint folder lists _metadata first then chk-* newest first, both when the folder fits in one listing
// page and when it is streamed over many pages.
func TestNamespaceAndOrder(t *testing.T) {
	for _, page := range []int32{1000, 3} {
		t.Run(fmt.Sprintf("page%d", page), func(t *testing.T) {
			e := setup(t, newChecker(), func(o *s3mount.Options) { o.PageSize = page })
			for _, k := range []string{"job/chk-9/0a-state", "job/chk-9/_metadata", "job/chk-9/Zstate", "job/chk-9/zz",
				"job/chk-10/_metadata", "job/chk-2/_metadata", "job/shared/s1", "job/Apple", "job/9lives"} {
				e.put(t, k, "x")
			}
			e.put(t, "job/taskowned/", "") // an empty directory, by marker
			got := names(t, e.path("job/chk-9"))
			if len(got) != 4 || got[0] != "_metadata" {
				t.Errorf("chk-9 = %v, want _metadata first of 4", got)
			}
			got = names(t, e.path("job"))
			if len(got) != 7 || got[0] != "chk-10" || got[1] != "chk-9" || got[2] != "chk-2" {
				t.Errorf("job = %v, want chk-10, chk-9, chk-2 first of 7", got)
			}
			if !slices.Contains(got, "taskowned") || !slices.Contains(got, "shared") {
				t.Errorf("job = %v: missing a directory", got)
			}
			st, err := os.Stat(e.path("job/taskowned"))
			if err != nil || !st.IsDir() {
				t.Errorf("marker directory: %v %v", st, err)
			}
			st, err = os.Stat(e.path("job/shared/s1"))
			if err != nil || st.IsDir() || st.Size() != 1 {
				t.Errorf("file stat: %v %v", st, err)
			}
			if _, err := os.Stat(e.path("job/nothing")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("missing: %v", err)
			}
		})
	}
}

// TestStreamedReaddirLarge: a 2,500-entry folder over 1000-key pages lists completely, no duplicates.
func TestStreamedReaddirLarge(t *testing.T) {
	e := setup(t, newChecker(), nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range 2500 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			k := "job/shared/sst-" + strings.Repeat("0", 4) + itoa(i)
			if _, err := e.c.Put(ctx, k, strings.NewReader("s"), 1, s3client.PutOptions{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	e.put(t, "job/shared/_metadata", "m")
	got := names(t, e.path("job/shared"))
	if len(got) != 2501 || got[0] != "_metadata" {
		t.Fatalf("listed %d entries, first %q", len(got), got[0])
	}
	seen := map[string]bool{}
	for _, n := range got {
		if seen[n] {
			t.Fatalf("duplicate %s", n)
		}
		seen[n] = true
	}
}

func itoa(i int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
		if i == 0 {
			return string(b)
		}
	}
}

// TestReadWrite: ranged reads with readahead return the object's bytes; files written through the mount
// are uploaded on close (multipart above the part size) and indexed before close returns.
func TestReadWrite(t *testing.T) {
	e := setup(t, newChecker(), func(o *s3mount.Options) { o.ReadChunk = 1 << 20; o.PartSize = 5 << 20 })
	big := make([]byte, 13<<20+77)
	_, _ = rand.Read(big)
	if _, err := e.c.Upload(context.Background(), "job/big", bytes.NewReader(big), int64(len(big)), 8<<20, 2, s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(e.path("job/big"))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("sequential read: %v, equal=%v", err, bytes.Equal(got, big))
	}
	f, err := os.Open(e.path("job/big"))
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 1000)
	for _, off := range []int64{5 << 20, 17, 13<<20 + 10, 3<<20 - 500} {
		n, err := f.ReadAt(p, off)
		want := big[off:min(off+1000, int64(len(big)))]
		if (err != nil && err != io.EOF) || !bytes.Equal(p[:n], want) {
			t.Errorf("random read at %d: %d %v", off, n, err)
		}
	}
	f.Close()

	// Write a new file larger than the part size, and a _metadata.
	if err := os.MkdirAll(e.path("job/chk-5"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("job/chk-5/state"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("job/chk-5/_metadata"), []byte("meta"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.ck.mu.Lock()
	written := slices.Clone(e.ck.written)
	e.ck.mu.Unlock()
	if !slices.Contains(written, "job/chk-5/_metadata") || !slices.Contains(written, "job/chk-5/state") {
		t.Errorf("Written not called before close returned: %v", written)
	}
	o, err := e.c.Head(context.Background(), "job/chk-5/state")
	if err != nil || o.Size != int64(len(big)) {
		t.Fatalf("uploaded object: %+v %v", o, err)
	}
	if !strings.Contains(o.ETag, "-") {
		t.Errorf("expected a multipart ETag for a %d-byte upload, got %s", len(big), o.ETag)
	}
	got, err = os.ReadFile(e.path("job/chk-5/state"))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read back: %v", err)
	}
	st, err := os.Stat(e.path("job/chk-5"))
	if err != nil || !st.IsDir() {
		t.Fatalf("mkdir: %v", err)
	}
	if !e.exists(t, "job/chk-5/") {
		t.Errorf("mkdir did not write a directory marker")
	}
	// Append to an unreferenced file (read-modify-write through the spool).
	af, err := os.OpenFile(e.path("job/chk-5/_metadata"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := af.WriteString("+more"); err != nil {
		t.Fatal(err)
	}
	if err := af.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(e.path("job/chk-5/_metadata")); string(got) != "meta+more" {
		t.Errorf("append: %q", got)
	}
}

// TestGuardedOps: every destructive operation on a referenced object is refused with EPERM and the object
// is untouched; unreferenced ones are deleted and reported to the index.
func TestGuardedOps(t *testing.T) {
	e := setup(t, newChecker("job/shared/ref", "job/chk-1/_metadata"), nil)
	e.put(t, "job/shared/ref", "referenced")
	e.put(t, "job/shared/free", "free")
	e.put(t, "job/chk-1/_metadata", "m")
	e.put(t, "job/chk-1/priv", "p")

	wantErrno(t, "unlink referenced", os.Remove(e.path("job/shared/ref")), syscall.EPERM)
	wantErrno(t, "truncate referenced", os.Truncate(e.path("job/shared/ref"), 0), syscall.EPERM)
	_, err := os.OpenFile(e.path("job/shared/ref"), os.O_WRONLY|os.O_TRUNC, 0)
	wantErrno(t, "O_TRUNC referenced", err, syscall.EPERM)
	_, err = os.OpenFile(e.path("job/shared/ref"), os.O_WRONLY, 0)
	wantErrno(t, "open for write referenced", err, syscall.EPERM)
	wantErrno(t, "rename referenced", os.Rename(e.path("job/shared/ref"), e.path("job/shared/moved")), syscall.EPERM)
	wantErrno(t, "replace referenced", os.Rename(e.path("job/shared/free"), e.path("job/shared/ref")), syscall.EPERM)
	wantErrno(t, "rmdir with referenced content", os.Remove(e.path("job/chk-1")), syscall.ENOTEMPTY)
	wantErrno(t, "hard link", os.Link(e.path("job/shared/ref"), e.path("job/shared/ref2")), syscall.ENOTSUP)
	if b, err := exec.Command("getfattr", "--only-values", "-n", "user.ckguard.state", e.path("job/shared/ref")).Output(); err == nil && string(b) != "referenced" {
		t.Errorf("user.ckguard.state = %q", b)
	}
	if got, _ := e.c.Head(context.Background(), "job/shared/ref"); got.Size != int64(len("referenced")) {
		t.Errorf("referenced object changed: %+v", got)
	}

	// Allowed: unlink, rename (copy + delete), directory rename refused with EXDEV.
	if err := os.Remove(e.path("job/chk-1/priv")); err != nil {
		t.Fatal(err)
	}
	if e.exists(t, "job/chk-1/priv") {
		t.Errorf("unlinked object still in S3")
	}
	if err := os.Rename(e.path("job/shared/free"), e.path("job/shared/renamed")); err != nil {
		t.Fatal(err)
	}
	if e.exists(t, "job/shared/free") || !e.exists(t, "job/shared/renamed") {
		t.Errorf("rename did not move the object")
	}
	wantErrno(t, "directory rename", os.Rename(e.path("job/shared"), e.path("job/shared2")), syscall.EXDEV)
	e.ck.mu.Lock()
	defer e.ck.mu.Unlock()
	if !slices.Contains(e.ck.deleted, "job/chk-1/priv") || !slices.Contains(e.ck.renamed, "job/shared/free -> job/shared/renamed") {
		t.Errorf("index not told: deleted=%v renamed=%v", e.ck.deleted, e.ck.renamed)
	}
}

// TestRmRfLeavesReferenced: GNU rm -rf through the mount removes everything unreferenced (implicit
// directories included) and leaves exactly the referenced objects; rm reports the refusals.
func TestRmRfLeavesReferenced(t *testing.T) {
	e := setup(t, newChecker("old/shared/keep1", "old/shared/sub/keep2"), nil)
	for _, k := range []string{"old/chk-1/_metadata", "old/chk-1/a", "old/shared/keep1", "old/shared/x", "old/shared/sub/keep2",
		"old/shared/sub/y", "old/taskowned/z"} {
		e.put(t, k, "d")
	}
	e.put(t, "old/empty/", "")
	out, err := exec.Command("rm", "-rf", e.path("old")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Operation not permitted") {
		t.Errorf("rm -rf: %v %s", err, out)
	}
	var left []string
	if err := e.c.Walk(context.Background(), "", func(o s3client.Object) error { left = append(left, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(left, ",") != "old/shared/keep1,old/shared/sub/keep2" {
		t.Errorf("left after rm -rf: %v", left)
	}
}

// TestConditionalDelete: an object replaced between the decision and the delete is not removed: the
// DeleteObject carries If-Match with the ETag the decision saw; unlink looks again once, and fails with
// ESTALE if the object changed again.
func TestConditionalDelete(t *testing.T) {
	ck := newChecker()
	e := setup(t, ck, nil)
	e.put(t, "job/shared/racy", "v1")
	if _, err := os.Stat(e.path("job/shared/racy")); err != nil { // caches the v1 ETag
		t.Fatal(err)
	}
	n := 0
	ck.mu.Lock()
	ck.onDecide = func(p string, op verdict.Op) {
		if p == "job/shared/racy" && op == verdict.OpUnlink {
			n++
			e.put(t, p, "v"+itoa(n+1)) // a writer replaces the object while we decide
		}
	}
	ck.mu.Unlock()
	wantErrno(t, "unlink of an object replaced during the decision", os.Remove(e.path("job/shared/racy")), syscall.ESTALE)
	if !e.exists(t, "job/shared/racy") {
		t.Fatalf("the replaced object was deleted")
	}
	ck.mu.Lock()
	ck.onDecide = nil
	ck.mu.Unlock()
	if err := os.Remove(e.path("job/shared/racy")); err != nil {
		t.Fatalf("unlink once quiet: %v", err)
	}
}

// TestStaleness: a change made beside the mount is visible within StatTTL plus the kernel's 1 s caches;
// the mount's own changes are visible at once.
func TestStaleness(t *testing.T) {
	e := setup(t, newChecker(), func(o *s3mount.Options) { o.StatTTL = 500 * time.Millisecond })
	e.put(t, "j/f", "one")
	if st, err := os.Stat(e.path("j/f")); err != nil || st.Size() != 3 {
		t.Fatal(st, err)
	}
	e.put(t, "j/f", "three")
	e.put(t, "j/g", "new")
	deadline := time.Now().Add(500*time.Millisecond + time.Second + 500*time.Millisecond)
	for {
		st, err := os.Stat(e.path("j/f"))
		_, gerr := os.Stat(e.path("j/g"))
		if err == nil && st.Size() == 5 && gerr == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("change beside the mount not visible after StatTTL+1s: %v %v %v", st.Size(), err, gerr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Own operations: immediately.
	if err := os.Remove(e.path("j/g")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.path("j/g")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("own unlink not visible at once: %v", err)
	}
	if err := os.WriteFile(e.path("j/h"), []byte("hh"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(e.path("j/h")); err != nil || st.Size() != 2 {
		t.Errorf("own write not visible at once: %v %v", st, err)
	}
}

// TestDirectoryRenameFallsBack: rename(2) of a directory is refused with EXDEV, so GNU mv copies and unlinks
// file by file, each through the guard: unreferenced files move, a referenced one stays where it is.
func TestDirectoryRenameFallsBack(t *testing.T) {
	e := setup(t, newChecker("job/old/ref"), nil)
	e.put(t, "job/old/ref", "r")
	e.put(t, "job/old/a", "a")
	e.put(t, "job/old/sub/b", "b")
	out, err := exec.Command("mv", e.path("job/old"), e.path("job/new")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Operation not permitted") {
		t.Errorf("mv of a directory holding a referenced file: %v %s", err, out)
	}
	for k, want := range map[string]bool{"job/old/ref": true, "job/old/a": false, "job/old/sub/b": false,
		"job/new/ref": true, "job/new/a": true, "job/new/sub/b": true} {
		if got := e.exists(t, k); got != want {
			t.Errorf("after mv: %s exists=%v, want %v", k, got, want)
		}
	}
}

// TestSetattrAndLinks: truncation of an unreferenced file by path works to size 0 (other sizes are not
// supported by path), times and modes are accepted without effect, hard links and symlinks are not
// supported.
func TestSetattrAndLinks(t *testing.T) {
	e := setup(t, newChecker(), nil)
	e.put(t, "j/f", "content")
	if err := os.Truncate(e.path("j/f"), 0); err != nil {
		t.Fatalf("truncate to 0: %v", err)
	}
	if o, err := e.c.Head(context.Background(), "j/f"); err != nil || o.Size != 0 {
		t.Errorf("after truncate: %+v %v", o, err)
	}
	e.put(t, "j/g", "content")
	wantErrno(t, "truncate to 3 by path", os.Truncate(e.path("j/g"), 3), syscall.EOPNOTSUPP)
	if err := os.Chtimes(e.path("j/g"), time.Now(), time.Now().Add(-time.Hour)); err != nil {
		t.Errorf("utimens: %v", err)
	}
	if err := os.Chmod(e.path("j/g"), 0o600); err != nil {
		t.Errorf("chmod: %v", err)
	}
	if err := os.Symlink("g", e.path("j/s")); err == nil {
		t.Errorf("symlink succeeded")
	}
	if err := os.Link(e.path("j/g"), e.path("j/h")); err == nil {
		t.Errorf("link succeeded")
	}
}

// TestCreateOnlyAndPinnedReads: a new file is uploaded create-only (If-None-Match), so an object that
// appeared under its name meanwhile is not overwritten (close fails with ESTALE); an open file reads one
// object version (If-Match), so an object replaced while open fails reads with ESTALE instead of mixing
// versions.
func TestCreateOnlyAndPinnedReads(t *testing.T) {
	e := setup(t, newChecker(), func(o *s3mount.Options) { o.ReadChunk = 1 << 20; o.ReadAhead = 1 })
	e.put(t, "j/x", "x")
	f, err := os.Create(e.path("j/new"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("mine"); err != nil {
		t.Fatal(err)
	}
	e.put(t, "j/new", "theirs")
	wantErrno(t, "close of a create racing another writer", f.Close(), syscall.ESTALE)
	if b, _ := os.ReadFile(e.path("j/new")); string(b) != "theirs" {
		t.Errorf("the other writer's object was overwritten: %q", b)
	}

	big := strings.Repeat("v1", 6<<20/2)
	e.put(t, "j/big", big)
	r, err := os.Open(e.path("j/big"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := make([]byte, 10)
	if _, err := r.ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
	e.put(t, "j/big", strings.Repeat("v2", 6<<20/2))
	// Within the readahead window the open version's bytes are served; beyond it the pinned GET fails.
	if _, err := r.ReadAt(p, 1<<20); err != nil || string(p) != "v1v1v1v1v1" {
		t.Errorf("read inside the readahead window: %q %v", p, err)
	}
	_, err = r.ReadAt(p, 5<<20)
	wantErrno(t, "read of an object replaced while open", err, syscall.ESTALE)
}

// TestMetadataCommitRename: Flink's commit of a checkpoint, the rename of chk-N/._metadata.inprogress.<id>
// onto chk-N/_metadata, is allowed although its young source is in grace (as on the local mount); any other
// rename of a young file onto _metadata is still refused for grace.
func TestMetadataCommitRename(t *testing.T) {
	ck := newChecker()
	ck.young = map[string]bool{"job/chk-7/._metadata.inprogress.0f3a": true, "job/chk-7/state": true}
	e := setup(t, ck, nil)
	e.put(t, "job/chk-7/._metadata.inprogress.0f3a", "meta")
	e.put(t, "job/chk-7/state", "s")
	wantErrno(t, "rename of a young state file onto _metadata",
		os.Rename(e.path("job/chk-7/state"), e.path("job/chk-7/_metadata")), syscall.EPERM)
	if err := os.Rename(e.path("job/chk-7/._metadata.inprogress.0f3a"), e.path("job/chk-7/_metadata")); err != nil {
		t.Fatalf("metadata commit rename: %v", err)
	}
	if !e.exists(t, "job/chk-7/_metadata") || e.exists(t, "job/chk-7/._metadata.inprogress.0f3a") {
		t.Errorf("commit rename did not move the object")
	}
	ck.mu.Lock()
	defer ck.mu.Unlock()
	if !slices.Contains(ck.renamed, "job/chk-7/._metadata.inprogress.0f3a -> job/chk-7/_metadata") {
		t.Errorf("index not told about the commit: %v", ck.renamed)
	}
}
