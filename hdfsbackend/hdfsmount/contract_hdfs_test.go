//go:build hdfs

package hdfsmount_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os/exec"
	"path"
	"sort"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/mounttest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsmount"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
)

// realStore is a directory of a real NameNode under the mount, reached beside it through its own
// client.
type realStore struct {
	c    hdfsclient.FS
	root string
}

func (s realStore) Put(t testing.TB, key, data string) {
	t.Helper()
	ctx := context.Background()
	p := path.Join(s.root, key)
	if err := s.c.MkdirAll(ctx, path.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	// HDFS files are written once: a Put over an existing key replaces the file.
	if err := s.c.Remove(ctx, p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	w, err := s.c.Create(ctx, p, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, data); err != nil {
		w.Close()
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func (s realStore) Get(t testing.TB, key string) (string, bool) {
	t.Helper()
	ctx := context.Background()
	p := path.Join(s.root, key)
	if fi, err := s.c.Stat(ctx, p); err != nil || fi.IsDir {
		return "", false
	}
	r, err := s.c.Open(ctx, p)
	if err != nil {
		return "", false
	}
	defer r.Close()
	b := make([]byte, r.Size())
	if n, err := r.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read %s beside the mount: %v", key, err)
	} else {
		b = b[:n]
	}
	return string(b), true
}

func (s realStore) Files(t testing.TB) []string {
	t.Helper()
	var out []string
	var walk func(dir string)
	walk = func(dir string) {
		err := s.c.List(context.Background(), dir, func(fis []hdfsclient.FileInfo) error {
			for _, fi := range fis {
				p := path.Join(dir, fi.Name)
				if fi.IsDir {
					walk(p)
					continue
				}
				out = append(out, strings.TrimPrefix(p, s.root+"/"))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("list %s beside the mount: %v", dir, err)
		}
	}
	walk(s.root)
	sort.Strings(out)
	return out
}

// TestContractHDFS runs the mount contract suite on the HDFS mount over a real MiniDFSCluster, each
// case in a fresh directory of its own, with the differences the in-process namespace declares.
func TestContractHDFS(t *testing.T) {
	h := hdfsHarness()
	h.Mount = func(t *testing.T, enf *guard.Enforcer) (string, mounttest.Store) {
		c := minidfs.Start(t, minidfs.Options{})
		root := c.Root() + dir
		cl, _ := c.DialSuperuser(t, root)
		if err := cl.MkdirAll(context.Background(), root, 0o755); err != nil {
			t.Fatal(err)
		}
		mnt := t.TempDir()
		m, err := hdfsmount.Mount(context.Background(), hdfsmount.Options{FS: cl, Dir: root, Name: c.URI(root), Mountpoint: mnt, Enforcer: enf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := m.Unmount(); err != nil {
				_ = exec.Command("fusermount3", "-uz", mnt).Run()
			}
		})
		return mnt, realStore{c: cl, root: root}
	}
	mounttest.Run(t, h)
}
