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
	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/refindex/verdict"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// newChecker returns the fake index protecting the given keys (and the folders holding them).
func newChecker(protected ...string) *guardtest.Checker {
	c := guardtest.New()
	for _, p := range protected {
		c.Protect(p)
	}
	return c
}

type env struct {
	srv  *s3server.Server
	c    *s3client.Client
	ck   *guardtest.Checker
	mnt  string
	m    *s3mount.Mounted
	opts s3mount.Options
}

func setup(t *testing.T, ck *guardtest.Checker, tune func(*s3mount.Options)) *env {
	s3server.RequireFUSE(t)
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
	if calls := e.ck.CallLog(); !slices.Contains(calls, "written job/chk-5/_metadata") || !slices.Contains(calls, "written job/chk-5/state") {
		t.Errorf("Written not called before close returned: %v", calls)
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
	ck.SetDecideHook(func(p string, op verdict.Op) {
		if p == "job/shared/racy" && op == verdict.OpUnlink {
			n++
			e.put(t, p, "v"+itoa(n+1)) // a writer replaces the object while we decide
		}
	})
	wantErrno(t, "unlink of an object replaced during the decision", os.Remove(e.path("job/shared/racy")), syscall.ESTALE)
	if !e.exists(t, "job/shared/racy") {
		t.Fatalf("the replaced object was deleted")
	}
	ck.SetDecideHook(nil)
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
