// Package hangfs is a test FUSE file system that never answers: its getattr, lookup and readdir
// block until it is released. It stands for what any user may fusermount inside a store (issue 29)
// and for a store whose server stops answering.
package hangfs

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

type root struct {
	fs.Inode
	release <-chan struct{}
}

var (
	_ fs.NodeGetattrer = (*root)(nil)
	_ fs.NodeLookuper  = (*root)(nil)
	_ fs.NodeReaddirer = (*root)(nil)
	_ fs.NodeOpendirer = (*root)(nil)
)

// Each request blocks until release, whatever the kernel's interrupts say (the worst case).
func (r *root) Getattr(context.Context, fs.FileHandle, *fuse.AttrOut) syscall.Errno {
	<-r.release
	return syscall.EIO
}

func (r *root) Lookup(context.Context, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	<-r.release
	return nil, syscall.ENOENT
}

func (r *root) Opendir(context.Context) syscall.Errno {
	<-r.release
	return syscall.EIO
}

func (r *root) Readdir(context.Context) (fs.DirStream, syscall.Errno) {
	<-r.release
	return nil, syscall.EIO
}

// FS is a mounted file system that never answers.
type FS struct {
	dir       string
	server    *fuse.Server
	release   sync.Once
	ch        chan struct{}
	unmounted sync.Once
}

// Mount mounts a file system that never answers on dir (which must exist). At the end of t it is
// released and unmounted (Unmount), so that no goroutine or process stays stuck in it. It skips t
// when /dev/fuse is unusable or with -short (in CI, CI=true, a missing /dev/fuse fails t instead).
func Mount(t testing.TB, dir string) *FS {
	t.Helper()
	if testing.Short() {
		t.Skip("real FUSE mount: skipped with -short")
	}
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("/dev/fuse is required in CI: %v", err)
		}
		t.Skipf("/dev/fuse unavailable: %v", err)
	} else {
		f.Close()
	}
	h := &FS{dir: dir, ch: make(chan struct{})}
	server, err := fs.Mount(dir, &root{release: h.ch}, &fs.Options{
		MountOptions: fuse.MountOptions{FsName: "hangfs", Name: "hangfs", AllowOther: os.Geteuid() == 0},
		// No caching: every stat goes to the file system, as a hostile one would make sure of.
		AttrTimeout: new(time.Duration), EntryTimeout: new(time.Duration),
	})
	if err != nil {
		t.Fatalf("mount a FUSE file system on %s: %v", dir, err)
	}
	h.server = server
	t.Cleanup(func() { h.Unmount(t) })
	return h
}

// Release makes every blocked request and every later one answer (an error): a test that finds
// itself blocked calls it before failing, so that what it blocked (a sync holding the index's lock)
// can finish.
func (h *FS) Release() { h.release.Do(func() { close(h.ch) }) }

// Unmount detaches the file system (fusermount3 -u -z: lazily, as a stat of the mount point would
// block), releases its requests and waits for its server to stop. Only the first call acts.
func (h *FS) Unmount(t testing.TB) {
	h.unmounted.Do(func() {
		if out, err := exec.Command("fusermount3", "-u", "-z", h.dir).CombinedOutput(); err != nil {
			t.Errorf("fusermount3 -u -z %s: %v: %s", h.dir, err, out)
		}
		h.Release()
		done := make(chan struct{})
		go func() { h.server.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("the hung file system on %s did not stop serving within 10s of its unmount", h.dir)
		}
	})
}
