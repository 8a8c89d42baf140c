//go:build hdfs

package hdfsquarantine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/quarantine/quarantinetest"
)

// hdfsStore is a store root on the MiniDFSCluster (a fresh directory per case).
type hdfsStore struct {
	cl   hdfsclient.FS
	root string
}

func (s *hdfsStore) Open(t testing.TB) quarantine.Staging {
	a, err := hdfsquarantine.Open(context.Background(), s.cl, s.root, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (s *hdfsStore) Write(t testing.TB, key string, data []byte) {
	p := s.root + "/" + key
	if err := s.cl.Remove(context.Background(), p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	minidfs.WriteFile(t, s.cl, p, string(data))
}

func (s *hdfsStore) Read(t testing.TB, key string) ([]byte, bool) {
	r, err := s.cl.Open(context.Background(), s.root+"/"+key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b := make([]byte, r.Size())
	if _, err := r.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return b, true
}

func (s *hdfsStore) Remove(t testing.TB, key string) {
	if err := s.cl.Remove(context.Background(), s.root+"/"+key); err != nil {
		t.Fatal(err)
	}
}

func (s *hdfsStore) Crash(t testing.TB, _ quarantine.Staging, key string, d quarantine.Decision, step int) bool {
	ctx := context.Background()
	cf := &crashingFS{FS: s.cl}
	a, err := hdfsquarantine.Open(ctx, cf, s.root, nil) // Open's own changes pass: not armed yet
	if err != nil {
		t.Fatal(err)
	}
	cf.Arm(step)
	if _, err := a.Restage(ctx, key, d); err != nil && !errors.Is(err, quarantinetest.ErrCrashed) {
		t.Fatalf("staging %s before its crash at step %d: %v", key, step, err)
	}
	return cf.Crashed()
}

// crashingFS passes the NameNode the changes (creates, renames, removes, mkdirs) its Crasher lets through.
type crashingFS struct {
	hdfsclient.FS
	quarantinetest.Crasher
}

func (c *crashingFS) Create(ctx context.Context, name string, perm fs.FileMode) (hdfsclient.Writer, error) {
	if err := c.Change("create", name); err != nil {
		return nil, err
	}
	return c.FS.Create(ctx, name, perm)
}

func (c *crashingFS) Mkdir(ctx context.Context, name string, perm fs.FileMode) error {
	if err := c.Change("mkdir", name); err != nil {
		return err
	}
	return c.FS.Mkdir(ctx, name, perm)
}

func (c *crashingFS) MkdirAll(ctx context.Context, name string, perm fs.FileMode) error {
	if err := c.Change("mkdir", name); err != nil {
		return err
	}
	return c.FS.MkdirAll(ctx, name, perm)
}

func (c *crashingFS) Remove(ctx context.Context, name string) error {
	if err := c.Change("remove", name); err != nil {
		return err
	}
	return c.FS.Remove(ctx, name)
}

func (c *crashingFS) Rename(ctx context.Context, from, to string) error {
	if err := c.Change("rename", from); err != nil {
		return err
	}
	return c.FS.Rename(ctx, from, to)
}

func (c *crashingFS) Chtimes(ctx context.Context, name string, mtime time.Time) error {
	if err := c.Change("chtimes", name); err != nil {
		return err
	}
	return c.FS.Chtimes(ctx, name, mtime)
}

// TestQuarantineSuiteHDFS runs the conformance suite on the MiniDFSCluster.
func TestQuarantineSuiteHDFS(t *testing.T) {
	c := minidfs.Start(t, minidfs.Options{})
	cl, _ := c.DialSuperuser(t, c.Root())
	n := 0
	quarantinetest.Run(t, func(t *testing.T) quarantinetest.Store {
		n++
		root := fmt.Sprintf("%s/suite%d", c.Root(), n)
		if err := cl.MkdirAll(context.Background(), root, 0o755); err != nil {
			t.Fatal(err)
		}
		return &hdfsStore{cl: cl, root: root}
	})
}
