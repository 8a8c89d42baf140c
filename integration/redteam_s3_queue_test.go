package integration

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestRedteamS3QueuedDeleteReferencedAtApply: with --quarantine on S3 an unlink is acknowledged before
// the object is staged. A checkpoint whose `_metadata` is written (through the mount) right after the rm,
// referencing the removed object, must keep it: the deletion is decided again when it is applied, the
// object stays at its key, nothing of it is left in the area, and the audit log has the keep. The
// staging's copies fail (503s from the proxy) until the `_metadata` is indexed, so the window is held
// open for certain rather than by timing. (Only the mount's owner can unlink on an S3 mount.)
func TestRedteamS3QueuedDeleteReferencedAtApply(t *testing.T) {
	e := s3Start(t)
	src := filepath.Join(t.TempDir(), "tree")
	tr, err := treegen.IncidentTwo(src, time.Now(), treegen.Options{URIPrefix: s3Root})
	if err != nil {
		t.Fatal(err)
	}
	// A checkpoint with a file no other checkpoint references; its _metadata is not uploaded yet.
	var meta, key string
	var metas []string
	for m := range tr.Live {
		metas = append(metas, m)
	}
	sort.Strings(metas)
	for _, m := range metas {
		others := map[string]bool{}
		for om, oc := range tr.Live {
			if om != m {
				for _, r := range oc.Refs {
					others[r] = true
				}
			}
		}
		for _, r := range tr.Live[m].Refs {
			if _, ok := tr.Files[r]; ok && !others[r] {
				meta, key = m, r
				break
			}
		}
		if meta != "" {
			break
		}
	}
	if meta == "" {
		t.Fatal("no checkpoint with a file of its own")
	}
	held := filepath.Join(src, filepath.FromSlash(meta))
	e.upload(t, tr)
	c := e.client(t, e.srv.Endpoint)
	ctx := context.Background()
	if err := c.Delete(ctx, meta, ""); err != nil {
		t.Fatal(err)
	}
	p := mntStart(t, s3Root, filepath.Join(t.TempDir(), "index"), e.mountArgs("--quarantine", "24h", "--grace", "0s",
		"--active-window", "0s", "--savepoint-keep-newest=false")...)
	e.proxy.FailNext("CopyObject", 1<<30, false)
	if err := os.Remove(p.m(key)); err != nil {
		t.Fatalf("unlink %s (referenced by nothing yet): %v", key, err)
	}
	mntMust(t, "cp", held, p.m(meta)) // indexed before close returns
	if err := os.Remove(p.m(key)); err == nil {
		t.Errorf("unlink %s again after its checkpoint was indexed: allowed", key)
	}
	e.proxy.FailNext("CopyObject", 0, false)
	deadline := time.Now().Add(2 * time.Minute)
	kept := false
	for !kept && time.Now().Before(deadline) {
		for _, r := range p.auditRecords() {
			if r.Op == "unlink-applied" && r.Path == key && r.Decision == "keep" {
				kept = true
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	if !kept {
		t.Errorf("no unlink-applied keep record for %s after 2 minutes", key)
	}
	if _, err := c.Head(ctx, key); err != nil {
		t.Fatalf("%s, referenced when its queued deletion was applied, is gone: %v", key, err)
	}
	for _, en := range qList(t, p) {
		if en.Path == key {
			t.Errorf("%s is in quarantine too: %+v", key, en)
		}
	}
	for i := 0; ; i++ {
		_, err := os.Stat(p.m(key))
		ls, _ := os.ReadDir(filepath.Dir(p.m(key)))
		listed := false
		for _, d := range ls {
			listed = listed || d.Name() == filepath.Base(key)
		}
		if err == nil && listed {
			t.Logf("shown again after %d s", i)
			break
		}
		if i == 20 {
			t.Errorf("%s not shown by the mount 20 s after the keep (stat: %v, listed: %v)", key, err, listed)
			break
		}
		time.Sleep(time.Second)
	}
	if out, code := p.cli("verify"); code != 0 {
		t.Errorf("verify after the keep: exit %d\n%s", code, out)
	}
}
