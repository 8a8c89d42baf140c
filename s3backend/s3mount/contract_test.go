package s3mount_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/mounttest"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// s3Harness runs the mount contract over one versitygw bucket, a fresh prefix per mount. S3 has a single
// name per object and no modes, mtimes a client may set, or extended attributes; a folder rename is
// refused with EXDEV (mv then goes file by file), truncation by path only reaches size 0, rmdir looks for
// keys below before it asks the index, and every upload is reported to the index.
func s3Harness(t *testing.T) mounttest.Harness {
	s3server.RequireFUSE(t)
	srv := s3server.Start(t)
	srv.Bucket(t, "ckpt")
	n := 0
	return mounttest.Harness{
		Mount: func(t *testing.T, enf *guard.Enforcer) (string, mounttest.Store) {
			n++
			c, err := s3client.New(context.Background(), srv.Config(), s3client.Location{Bucket: "ckpt", Prefix: fmt.Sprintf("m%d/", n)})
			if err != nil {
				t.Fatal(err)
			}
			e := &env{srv: srv, c: c, mnt: t.TempDir()}
			e.opts = s3mount.Options{Client: c, Mountpoint: e.mnt, Enforcer: enf, SpoolDir: t.TempDir()}
			e.mount(t)
			return e.mnt, bucketStore{c}
		},
		NotifiesEveryWrite: true,
	}
}

// TestContract runs the mount contract suite on the S3 mount.
func TestContract(t *testing.T) { mounttest.Run(t, s3Harness(t)) }

// TestContractCatchesBrokenEnforcer: with an enforcer that lets every unlink through, the suite fails
// on the S3 mount.
func TestContractCatchesBrokenEnforcer(t *testing.T) {
	s3server.RequireFUSE(t)
	_, err := s3server.Binary()
	s3server.Require(t, err) // the broken run needs versitygw too: skipped there, it would pass
	mounttest.CatchesBroken(t, "^TestContract$/^(RefusedWhenReferenced|CleanupToolsLeaveReferenced)$", "unlink",
		"TestContract/RefusedWhenReferenced/unlink", "TestContract/CleanupToolsLeaveReferenced/rm_-rf")
}

// bucketStore is a bucket prefix, reached beside the mount with the S3 client.
type bucketStore struct{ c *s3client.Client }

func (b bucketStore) Put(t testing.TB, key, data string) {
	t.Helper()
	if _, err := b.c.Put(context.Background(), key, strings.NewReader(data), int64(len(data)), s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (b bucketStore) Get(t testing.TB, key string) (string, bool) {
	t.Helper()
	o, err := b.c.Head(context.Background(), key)
	if s3client.Errno(err) == syscall.ENOENT || (err == nil && o.IsDir) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, o.Size)
	n, err := b.c.ReadAt(context.Background(), key, p, 0, "")
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return string(p[:n]), true
}

func (b bucketStore) Files(t testing.TB) []string {
	t.Helper()
	var out []string
	err := b.c.Walk(context.Background(), "", func(o s3client.Object) error {
		if !o.IsDir && !strings.HasSuffix(o.Key, "/") {
			out = append(out, o.Key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
