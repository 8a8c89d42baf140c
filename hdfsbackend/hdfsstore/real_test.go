//go:build hdfs

package hdfsstore_test

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsstore"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/storetest"
)

func putReal(cl *hdfsclient.Client, dir string) func(ctx context.Context, key string, data []byte, mt time.Time) error {
	return func(ctx context.Context, key string, data []byte, mt time.Time) error {
		p := path.Join(dir, key)
		if err := cl.MkdirAll(ctx, path.Dir(p), 0o755); err != nil {
			return err
		}
		w, err := cl.Create(ctx, p, 0o644)
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			w.Close()
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
		return cl.Chtimes(ctx, p, mt)
	}
}

// TestConformanceHDFS runs the index's Store conformance suite on a real MiniDFSCluster.
func TestConformanceHDFS(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		c := minidfs.Start(t, minidfs.Options{})
		dir := c.Root() + "/flink/checkpoints"
		cl, res := c.DialSuperuser(t, dir)
		if err := cl.MkdirAll(context.Background(), dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return storetest.Harness{Store: hdfsstore.New(cl, res, hdfsstore.Options{}), ModTimeSettable: true, Put: putReal(cl, dir)}
	})
}

// TestClientOnHDFS: the FS contract on a real NameNode: a rename never replaces its target, a remove
// never recurses, the trash interval is read from the NameNode.
func TestClientOnHDFS(t *testing.T) {
	ctx := context.Background()
	c := minidfs.Start(t, minidfs.Options{TrashInterval: time.Hour})
	cl, _ := c.DialSuperuser(t, c.Root())
	put := putReal(cl, c.Root())
	for _, k := range []string{"a", "b", "d/x"} {
		if err := put(ctx, k, []byte(k), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	r := c.Root()
	if err := cl.Rename(ctx, r+"/a", r+"/b"); !errors.Is(err, fs.ErrExist) || hdfsclient.Errno(err) != syscall.EEXIST {
		t.Errorf("rename onto an existing file: %v", err)
	}
	if got, _ := cl.Stat(ctx, r+"/b"); got.Size != 1 {
		t.Errorf("b after the refused rename: %+v", got)
	}
	if err := cl.Remove(ctx, r+"/d"); hdfsclient.Errno(err) != syscall.ENOTEMPTY {
		t.Errorf("remove of a non-empty directory: %v (errno %v)", err, hdfsclient.Errno(err))
	}
	if _, err := cl.Stat(ctx, r+"/d/x"); err != nil {
		t.Errorf("d/x after the refused remove: %v", err)
	}
	if _, err := cl.Stat(ctx, r+"/nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat missing: %v", err)
	}
	if d, err := cl.Defaults(ctx); err != nil || d.TrashInterval != time.Hour {
		t.Errorf("defaults = %+v, %v", d, err)
	}
	to, err := hdfsclient.MoveToTrash(ctx, cl, r+"/a", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Stat(ctx, to); err != nil {
		t.Errorf("trashed file at %s: %v", to, err)
	}
}

// TestNameNodeTroubleOnHDFS: safe mode refuses changes with ErrSafeMode (EIO) and keeps the file; a
// stopped NameNode fails discovery (never an empty store) and stat (never "not found"); after a
// restart everything is there.
func TestNameNodeTroubleOnHDFS(t *testing.T) {
	ctx := context.Background()
	c := minidfs.Start(t, minidfs.Options{Exclusive: true})
	dir := c.Root() + "/ckpt"
	cl, res := c.DialSuperuser(t, dir)
	put := putReal(cl, dir)
	for _, k := range []string{"j/chk-1/_metadata", "j/shared/s"} {
		if err := put(ctx, k, []byte("m"), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	st := hdfsstore.New(cl, res, hdfsstore.Options{})

	c.SafeMode(t, true)
	err := cl.Remove(ctx, dir+"/j/shared/s")
	if !errors.Is(err, hdfsclient.ErrSafeMode) || hdfsclient.Errno(err) != syscall.EIO {
		t.Errorf("remove in safe mode: %v (errno %v)", err, hdfsclient.Errno(err))
	}
	c.SafeMode(t, false)
	if _, err := cl.Stat(ctx, dir+"/j/shared/s"); err != nil {
		t.Errorf("file after the refused remove: %v", err)
	}

	c.StopNameNode(t)
	n := 0
	err = st.ListMetadata(ctx, func(store.ObjectInfo) error { n++; return nil })
	if err == nil || !hdfsclient.Unavailable(err) {
		t.Errorf("discovery with the NameNode stopped: %v (%d reported)", err, n)
	}
	if _, err := st.Stat(ctx, "j/shared/s"); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat with the NameNode stopped: %v", err)
	}
	c.RestartNameNode(t)
	var got []string
	for range 30 { // the library reconnects on the next call; the first may still see the old connection fail
		got = got[:0]
		if err = st.ListMetadata(ctx, func(oi store.ObjectInfo) error { got = append(got, oi.Path); return nil }); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil || len(got) != 1 || got[0] != "j/chk-1/_metadata" {
		t.Errorf("discovery after the restart: %v, %v", got, err)
	}
}

// TestUnreadableFolderOnHDFS: on a real NameNode, a folder another user (minidfs.Other) made with mode
// 700 in a 777 scratch folder cannot be listed by the store's user (minidfs.User, no superuser): the
// walk reports it as an unknown subtree (permission denied) and lists the rest of the store; without a
// callback the listing fails as before.
func TestUnreadableFolderOnHDFS(t *testing.T) {
	ctx := context.Background()
	c := minidfs.Start(t, minidfs.Options{})
	dir := c.Root() + "/flink/checkpoints"
	su, _ := c.DialSuperuser(t, dir)
	put := putReal(su, dir)
	for _, k := range []string{"j1/chk-1/_metadata", "scratch/keep"} {
		if err := put(ctx, k, []byte("m"), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := c.DFS(t, "-chown", "-R", minidfs.User, c.Root()); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	if out, err := c.DFS(t, "-chmod", "777", dir+"/scratch"); err != nil {
		t.Fatalf("chmod: %v %s", err, out)
	}
	for _, args := range [][]string{{"-mkdir", "-p", dir + "/scratch/dark/chk-9"}, {"-touchz", dir + "/scratch/dark/chk-9/_metadata"}, {"-chmod", "700", dir + "/scratch/dark"}} {
		if out, err := c.DFSAs(t, minidfs.Other, args...); err != nil {
			t.Fatalf("%v as %s: %v %s", args, minidfs.Other, err, out)
		}
	}
	l, err := hdfsclient.ParseLocation(c.URI(dir))
	if err != nil {
		t.Fatal(err)
	}
	res, err := hdfsclient.Resolve(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := hdfsclient.Dial(ctx, hdfsclient.Config{Resolved: res, User: minidfs.User, RPCTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s := hdfsstore.New(cl, res, hdfsstore.Options{})
	if err := s.ListMetadata(ctx, func(store.ObjectInfo) error { return nil }); err == nil {
		t.Errorf("ListMetadata without a callback succeeded over an unreadable folder")
	}
	var unknown []store.UnknownSubtree
	uctx := store.WithUnknown(ctx, func(u store.UnknownSubtree) error { unknown = append(unknown, u); return nil })
	var got []string
	if err := s.ListMetadata(uctx, func(oi store.ObjectInfo) error { got = append(got, oi.Path); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "j1/chk-1/_metadata" || len(unknown) != 1 || unknown[0].Key != "scratch/dark" || !errors.Is(unknown[0].Err, fs.ErrPermission) {
		t.Errorf("listed %v, unknown %+v; want j1/chk-1/_metadata, unknown scratch/dark (permission denied)", got, unknown)
	}
	// The store reports HDFS owners, so the index can confine the folder: its owner (from its parent's
	// listing) is not the writer of the store's checkpoints.
	if len(unknown) == 1 && (!unknown[0].HasUID || unknown[0].UID != hdfsstore.OwnerID(minidfs.Other)) {
		t.Errorf("unknown subtree %+v: want the owner of %s (%d)", unknown[0], minidfs.Other, hdfsstore.OwnerID(minidfs.Other))
	}
	if oi, err := s.Stat(ctx, "j1/chk-1/_metadata"); err != nil || !oi.HasUID || oi.UID != hdfsstore.OwnerID(minidfs.User) {
		t.Errorf("stat of the checkpoint: %+v %v; want the owner %s (%d)", oi, err, minidfs.User, hdfsstore.OwnerID(minidfs.User))
	}
}
