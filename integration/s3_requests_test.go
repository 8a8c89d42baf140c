package integration

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// s3PutFiles creates n old objects below dir (a store-relative folder) straight in versitygw's posix data
// directory, with the ETag a PUT would have stored (user.etag): uploading thousands of objects through
// PUTs would dominate the test's time and measure nothing.
func (e *s3env) s3PutFiles(t *testing.T, dir string, n int, age time.Duration) []string {
	t.Helper()
	body := []byte("ckguard-request-count")
	sum := md5.Sum(body)
	etag := []byte(hex.EncodeToString(sum[:]))
	root := filepath.Join(e.srv.DataDir, s3Bucket, s3Prefix, filepath.FromSlash(dir))
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-age)
	keys := make([]string, n)
	for i := range n {
		name := fmt.Sprintf("state-%06d", i)
		p := filepath.Join(root, name)
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Setxattr(p, "user.etag", etag, 0); err != nil {
			t.Fatalf("setxattr %s: %v", p, err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		keys[i] = dir + "/" + name
	}
	return keys
}

// TestS3UnlinkRequests counts the S3 requests of `rm -rf` through the mount (at the proxy): every unlink of
// a listed, unreferenced object costs exactly its conditional DeleteObject. The decision's stat (grace needs
// the mtime) and the ETag come from the listing rm's readdir just did; listing the folder costs its pages
// (plus, for a folder bigger than a page, one HEAD of _metadata and one chk-* listing per readdir pass).
// A regression that adds a HEAD, a listing or a marker probe per file fails here.
func TestS3UnlinkRequests(t *testing.T) {
	e := s3Start(t)
	const n = 2500 // three listing pages: the streamed readdir path
	keys := e.s3PutFiles(t, "del/job/chk-1", n, 30*24*time.Hour)
	small := e.s3PutFiles(t, "del/job/small", 10, 30*24*time.Hour)
	p := mntStart(t, s3Root, filepath.Join(t.TempDir(), "index"), e.mountArgs("--sync-interval", "1h", "--max-staleness", "3h")...)
	e.proxy.Ops() // forget the mount's start and first sync
	t0 := time.Now()
	mntMust(t, "rm", "-rf", p.m("del"))
	took := time.Since(t0)
	ops := e.proxy.Ops()
	var total int64
	for _, c := range ops {
		total += c
	}
	files := int64(len(keys) + len(small))
	t.Logf("rm -rf of %d objects: %v (%.2f ms/object), %d requests (%.3f per unlink): %v",
		files, took, float64(took.Microseconds())/1000/float64(files), total, float64(total)/float64(files), ops)
	if ops["DeleteObject"] != files {
		t.Errorf("%d DeleteObject requests, want one per object (%d)", ops["DeleteObject"], files)
	}
	if ops["HeadObject"] > 10 {
		t.Errorf("%d HeadObject requests for %d unlinks of listed objects, want a few (the readdir's _metadata probes)", ops["HeadObject"], files)
	}
	// Listing: 3 pages of chk-1 (plus its chk-* and _metadata probes), job, small, del, with rm's second
	// readdir of each emptied folder; generous, but far below one per file.
	if ops["ListObjectsV2"] > 40 {
		t.Errorf("%d ListObjectsV2 requests for %d unlinks, want a few per folder", ops["ListObjectsV2"], files)
	}
	if left := e.keys(t); len(left) != 0 {
		t.Errorf("%d objects left after rm -rf, e.g. %s", len(left), left[0])
	}
	p.stop()
}
