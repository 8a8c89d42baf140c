package localfs

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// replaceStore swaps the directory at store for a copy of it (same names, other inodes), the way a restore
// tool or `mv store store.old && cp -a store.old store` would: the root descriptor keeps the old one.
func replaceStore(t *testing.T, store string) (old string) {
	t.Helper()
	old = store + ".old"
	if out, err := exec.Command("cp", "-a", store, store+".new").CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, out)
	}
	if err := os.Rename(store, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(store+".new", store); err != nil {
		t.Fatal(err)
	}
	return old
}

// bindOver mounts an empty directory over store (an NFS or bind mount that appears after the daemon
// started) and returns a path that still reaches the directory hidden under it. It needs root; the test is
// skipped without it outside CI.
func bindOver(t *testing.T, store string) (hidden string) {
	t.Helper()
	fd, err := unix.Open(store, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	over := t.TempDir()
	if err := os.MkdirAll(filepath.Join(over, "job"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(over, store, "", unix.MS_BIND, ""); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bind mount over the store: %v", err)
		}
		t.Skip("bind mount over the store needs root:", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(store, unix.MNT_DETACH) })
	return procFdPath(fd) + "/"
}

// TestSwappedStoreRootRefuses: once the store path names another directory than the root
// descriptor, every resolution beneath the root fails with EIO and a reason, logged once; a replacement is
// final (restart the mount), a path that merely cannot be stated refuses until it can.
func TestSwappedStoreRootRefuses(t *testing.T) {
	for _, how := range []string{"replaced", "mounted over"} {
		t.Run(how, func(t *testing.T) {
			store := filepath.Join(t.TempDir(), "store")
			if err := os.MkdirAll(filepath.Join(store, "job"), 0o755); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			r, err := openStoreRoot(store, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer r.close()
			for i := range 3 {
				if err := os.WriteFile(filepath.Join(store, "job/f"+strconv.Itoa(i)), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.remove("job/f0", 0); err != nil {
				t.Fatalf("remove before the swap: %v", err)
			}
			old := store
			if how == "replaced" {
				old = replaceStore(t, store)
			} else {
				old = bindOver(t, store)
			}
			time.Sleep(rootCheckInterval + time.Millisecond)
			for _, op := range []struct {
				name string
				do   func() error
			}{
				{"unlink", func() error { return r.remove("job/f1", 0) }},
				{"rename", func() error { return r.rename("job/f1", "job/g", 0) }},
				{"create", func() error {
					fd, err := r.open("job/new", unix.O_CREAT|unix.O_WRONLY, 0o644)
					if err == nil {
						unix.Close(fd)
					}
					return err
				}},
				{"open root", func() error { fd, err := r.dir(""); r.release(fd); return err }},
				{"setxattr", func() error {
					return r.onFile("job/f1", func(p string) error { return unix.Setxattr(p, "user.x", []byte("1"), 0) })
				}},
			} {
				err := op.do()
				var sc *storeChangedError
				if !errors.As(err, &sc) || !sc.replaced || !errors.Is(err, syscall.EIO) {
					t.Errorf("%s after the store was %s: %v, want a store-replaced EIO", op.name, how, err)
				}
			}
			if _, err := os.Stat(filepath.Join(old, "job/f1")); err != nil {
				t.Errorf("job/f1 in the mount's directory: %v", err)
			}
			if _, err := os.Stat(filepath.Join(old, "job/new")); err == nil {
				t.Error("job/new created in the mount's directory")
			}
			if n := strings.Count(logs.String(), "replaced or mounted over"); n != 1 {
				t.Errorf("logged %d times, want once:\n%s", n, logs.String())
			}
			if how == "replaced" {
				// Final: even with the old directory back at the path, the mount must be restarted.
				if err := os.Rename(store, store+".copy"); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(old, store); err != nil {
					t.Fatal(err)
				}
				time.Sleep(rootCheckInterval + time.Millisecond)
				if err := r.remove("job/f1", 0); err == nil {
					t.Error("a replacement was forgotten once the old directory came back")
				}
			}
		})
	}

	t.Run("moved away", func(t *testing.T) {
		store := filepath.Join(t.TempDir(), "store")
		if err := os.MkdirAll(filepath.Join(store, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		r, err := openStoreRoot(store, slog.Default())
		if err != nil {
			t.Fatal(err)
		}
		defer r.close()
		if err := os.Rename(store, store+".away"); err != nil {
			t.Fatal(err)
		}
		var sc *storeChangedError
		if err := r.remove("d", unix.AT_REMOVEDIR); !errors.As(err, &sc) || sc.replaced {
			t.Fatalf("rmdir with nothing at the store path: %v, want a (non-final) refusal", err)
		}
		if err := os.Rename(store+".away", store); err != nil {
			t.Fatal(err)
		}
		time.Sleep(rootCheckInterval + time.Millisecond)
		if err := r.remove("d", unix.AT_REMOVEDIR); err != nil {
			t.Errorf("rmdir once the store is back: %v", err)
		}
	})
}

// TestSwapStoreReplacedUnderMount through a real mount: after the store directory is replaced
// by a copy, or mounted over, the index (which reads the store path) and the changes (beneath the root
// descriptor) would see different trees. Decided operations are refused with the reason in the audit log,
// the others fail with EIO, and neither directory changes.
func TestSwapStoreReplacedUnderMount(t *testing.T) {
	for _, how := range []string{"replaced", "mounted over"} {
		t.Run(how, func(t *testing.T) {
			e := mountFake(t)
			e.write(t, "job/chk-1/_metadata", "meta")
			e.write(t, "job/shared/a.sst", "a")
			e.write(t, "job/shared/b.sst", "b")
			m := func(k string) string { return filepath.Join(e.mnt, k) }
			if err := os.Remove(m("job/shared/b.sst")); err != nil {
				t.Fatalf("unlink before the swap: %v", err)
			}
			// A checkpoint being written through the mount while the store is swapped.
			if err := os.Mkdir(m("job/chk-2"), 0o755); err != nil {
				t.Fatal(err)
			}
			meta, err := os.Create(m("job/chk-2/_metadata"))
			if err != nil {
				t.Fatal(err)
			}
			defer meta.Close()
			var old string // the directory the mount started on
			if how == "replaced" {
				old = replaceStore(t, e.store)
			} else {
				old = bindOver(t, e.store)
				// The new directory holds what the index would see: a checkpoint referencing nothing.
				e.write(t, "job/shared/a.sst", "copy")
			}
			if err := os.WriteFile(filepath.Join(old, "job/chk-2/_metadata"), []byte("meta"), 0o644); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, old)
			var asked atomic.Int32
			// (A fork+exec while the _metadata is open, as cp -a above, closes a copy of its descriptor:
			// the kernel flushes it, and it is indexed then, before the swap.)
			calls := len(e.checker.CallLog())
			e.setDecideHook(func(string, verdict.Op) { asked.Add(1) })
			// Past the kernel's entry and attribute cache, so lookups reach the new directory.
			time.Sleep(1100 * time.Millisecond)
			if err := os.Remove(m("job/shared/a.sst")); !errors.Is(err, syscall.EPERM) {
				t.Errorf("unlink: %v, want EPERM", err)
			}
			if err := os.Rename(m("job/shared/a.sst"), m("job/shared/c.sst")); !errors.Is(err, syscall.EPERM) {
				t.Errorf("rename: %v, want EPERM", err)
			}
			if err := os.Truncate(m("job/shared/a.sst"), 0); err == nil {
				t.Error("truncate allowed")
			}
			if err := os.WriteFile(m("job/new"), []byte("checkpoint data"), 0o644); !errors.Is(err, syscall.EIO) {
				t.Errorf("create: %v, want EIO", err)
			}
			if err := os.Mkdir(m("job/chk-3"), 0o755); !errors.Is(err, syscall.EIO) {
				t.Errorf("mkdir: %v, want EIO", err)
			}
			if _, err := os.ReadFile(m("job/shared/a.sst")); !errors.Is(err, syscall.EIO) {
				t.Errorf("read: %v, want EIO (the open would reach the old directory)", err)
			}
			if after := snapshot(t, old); after != before {
				t.Errorf("the mount's directory changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			// The open checkpoint's close cannot index it (the index reads the new directory): the writer
			// must learn that. (Writes to a file already open reach it: they are not namespace changes.)
			if _, err := meta.Write([]byte("meta")); err != nil {
				t.Fatal(err)
			}
			if err := meta.Close(); !errors.Is(err, syscall.EIO) {
				t.Errorf("close of a _metadata written into the old directory: %v, want EIO", err)
			}
			if c := e.checker.CallLog(); len(c) != calls {
				t.Errorf("the index was told about changes after the swap: %v", c[calls:])
			}
			if b, err := os.ReadFile(filepath.Join(e.store, "job/shared/a.sst")); err != nil || len(b) == 0 {
				t.Errorf("the new directory's a.sst: %q %v", b, err)
			}
			recs, err := audit.ReadFile(e.auditPath)
			if err != nil {
				t.Fatal(err)
			}
			var refused int
			for _, r := range recs {
				if r.Decision != "refuse" {
					continue
				}
				if r.Reason != string(guard.ReasonStoreReplaced) || !strings.Contains(r.Message, "restart the mount") {
					t.Errorf("refusal record: %+v", r)
				}
				switch r.Errno {
				case "EPERM":
					refused++
				case "EINTR":
					// The caller was interrupted during the request (Go's preemption signal makes the kernel
					// send FUSE_INTERRUPT): it got EINTR and retried; the retry is refused with EPERM.
				default:
					t.Errorf("refusal record with errno %s, want EPERM: %+v", r.Errno, r)
				}
			}
			if refused < 2 {
				t.Errorf("%d refusals with EPERM audited, want the unlink and the rename:\n%+v", refused, recs)
			}
			if n := asked.Load(); n != 0 {
				t.Errorf("the index was asked %d times about a tree the change would not act on", n)
			}
		})
	}
}
