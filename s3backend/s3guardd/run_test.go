package s3guardd_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3guardd"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// mountFake mounts s3://bkt/flink of the server cfg names with the default policy until the test
// ends, and returns the mountpoint.
func mountFake(t *testing.T, cfg s3client.Config) string {
	t.Helper()
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	guarddtest.Start(t, guardd.Config{StoreDir: "s3://bkt/flink", IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
		Policy: refindex.DefaultPolicy()}, func(ctx context.Context, c guardd.Config) error {
		return s3guardd.Run(ctx, c, cfg, func(o *s3mount.Options) { o.SpoolDir = filepath.Join(dir, "spool") })
	})
	return mnt
}

// TestFreshDecisionsWithoutIfMatch: on a server that ignores If-Match on DeleteObject
// (gofakes3), the daemon finds out at start and decides every unlink on a fresh HEAD. An old object the
// mount listed, then replaced beside the mount (new content, in grace), must not be deleted on the strength
// of the listing's stale attributes: the conditional delete would not have stopped it.
func TestFreshDecisionsWithoutIfMatch(t *testing.T) {
	s3server.RequireFUSE(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := gofakes3.FixedTimeSource(time.Now().Add(-48 * time.Hour))
	hs := httptest.NewServer(gofakes3.New(s3mem.New(s3mem.WithTimeSource(clock)), gofakes3.WithTimeSource(clock), gofakes3.WithTimeSkewLimit(0)).Server())
	defer hs.Close()
	cfg := s3server.FakeConfig(hs.URL, 2)
	c := s3server.NewBucket(t, cfg, s3client.Location{Bucket: "bkt", Prefix: "flink/"})
	if _, err := c.Put(ctx, "job/shared/x.sst", strings.NewReader("old"), 3, s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	mnt := mountFake(t, cfg)
	if _, err := os.ReadDir(filepath.Join(mnt, "job/shared")); err != nil { // the mount caches x.sst's attributes
		t.Fatal(err)
	}
	clock.Advance(48 * time.Hour)
	if _, err := c.Put(ctx, "job/shared/x.sst", strings.NewReader("new"), 3, s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("rm", filepath.Join(mnt, "job/shared/x.sst")).CombinedOutput(); err == nil || !strings.Contains(string(out), "not permitted") {
		t.Errorf("rm of an object replaced a moment ago (in grace): %v %s, want EPERM", err, out)
	}
	b := make([]byte, 8)
	if n, err := c.ReadAt(ctx, "job/shared/x.sst", b, 0, ""); string(b[:n]) != "new" {
		t.Errorf("replaced object lost: %q %v", b[:n], err)
	}
}
