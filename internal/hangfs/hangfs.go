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

// Mount mounts a file system that never answers on dir (which must exist) and returns release, which
// makes every blocked request and every later one answer (an error): a test that finds itself blocked
// calls it before failing, so that what it blocked (a sync holding the index's lock) can finish. At
// the end of t it is released and unmounted lazily (fusermount3 -u -z), so that no goroutine or
// process stays stuck in it. It skips t when /dev/fuse is unusable or with -short (in CI,
// CI=true, a missing /dev/fuse fails t instead).
func Mount(t testing.TB, dir string) (release func()) {
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
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	server, err := fs.Mount(dir, &root{release: ch}, &fs.Options{
		MountOptions: fuse.MountOptions{FsName: "hangfs", Name: "hangfs", AllowOther: os.Geteuid() == 0},
		// No caching: every stat goes to the file system, as a hostile one would make sure of.
		AttrTimeout: new(time.Duration), EntryTimeout: new(time.Duration),
	})
	if err != nil {
		t.Skipf("mount a FUSE file system on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("fusermount3", "-u", "-z", dir).CombinedOutput(); err != nil {
			t.Errorf("fusermount3 -u -z %s: %v: %s", dir, err, out)
		}
		release()
		done := make(chan struct{})
		go func() { server.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("the hung file system on %s did not stop serving within 10s of its unmount", dir)
		}
	})
	return release
}
