package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/s3backend/deleteq"
)

// TestRedteamS3QueuedDeleteReferencedAtApply: with --quarantine on S3 an unlink is acknowledged before
// the object is staged. A checkpoint whose `_metadata` is written (through the mount) right after the rm,
// referencing the removed object, must keep it: the deletion is decided again when it is applied, the
// object stays at its key, nothing of it is left in the area, and the audit log has the keep. The order
// is forced, not timed (--sync-interval 1h: only the write through the mount tells the index): the
// staging's copies fail (503s from the proxy) until the `_metadata` is being indexed; its read is held
// at the proxy while the copies are let through, and a round of the queue runs meanwhile (seen in
// deletes.jsonl) and must not stage; once the read is released the next round keeps the object. An
// unlink of the name shown again is refused. (Only the mount's owner can unlink on an S3 mount.)
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
	index := filepath.Join(t.TempDir(), "index")
	p := mntStart(t, s3Root, index, e.mountArgs("--quarantine", "24h", "--grace", "0s",
		"--active-window", "0s", "--savepoint-keep-newest=false", "--sync-interval", "1h", "--max-staleness", "0s")...)
	e.proxy.FailNext("CopyObject", 1<<30, false)
	if err := os.Remove(p.m(key)); err != nil {
		t.Fatalf("unlink %s (referenced by nothing yet): %v", key, err)
	}
	// The first round decided the deletion again, allowed (nothing references it yet), and its copy
	// into the area failed.
	queued := func(rp deleteq.Replay) (deleteq.Entry, bool) {
		for _, en := range rp.Pending {
			if en.Key == key {
				return en, true
			}
		}
		return deleteq.Entry{}, false
	}
	waitJournal(t, index, "a failed staging of "+key, func(rp deleteq.Replay) bool {
		en, ok := queued(rp)
		return ok && en.Attempts > 0
	})
	// The `_metadata` is written through the mount; its read by the index is held, so the update is
	// pending while the copies are let through again.
	read := e.proxy.Hold("GetObject", func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/"+meta) })
	t.Cleanup(read.Release)
	cpDone := make(chan error, 1)
	go func() {
		out, err := exec.Command("cp", held, p.m(meta)).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out)
		}
		cpDone <- err
	}()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // a failure bound only
	defer cancel()
	if err := read.Wait(wctx, 1); err != nil {
		t.Fatalf("the index never read %s written through the mount: %v", meta, err)
	}
	e.proxy.FailNext("CopyObject", 0, false)
	// Rounds run one at a time: of the rounds that end from now on, the second started after the copies
	// were let through.
	before := 0
	if rp, err := deleteq.ReadJournal(index); err == nil {
		en, _ := queued(rp)
		before = en.Attempts
	}
	waitJournal(t, index, "a round of "+key+" while "+meta+" is being indexed", func(rp deleteq.Replay) bool {
		en, ok := queued(rp)
		return !ok || (en.Attempts >= before+2 && strings.Contains(en.LastErr, "cannot decide"))
	})
	if _, err := c.Head(ctx, key); err != nil {
		t.Fatalf("%s was applied while the _metadata referencing it was being indexed: %v", key, err)
	}
	read.Release()
	if err := <-cpDone; err != nil {
		t.Fatalf("cp %s through the mount: %v", meta, err)
	}
	waitJournal(t, index, "the queue to drain", func(rp deleteq.Replay) bool { _, ok := queued(rp); return !ok })
	kept := false
	for _, r := range p.auditRecords() {
		if r.Op == "unlink-applied" && r.Path == key && r.Decision == "keep" {
			kept = true
		}
	}
	if !kept {
		t.Errorf("no unlink-applied keep record for %s in the audit log", key)
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
	if err := os.Remove(p.m(key)); !errors.Is(err, syscall.EPERM) {
		t.Errorf("unlink %s, shown again and referenced: %v, want EPERM", key, err)
	}
	if _, err := c.Head(ctx, key); err != nil {
		t.Fatalf("%s gone after its second unlink: %v", key, err)
	}
	if out, code := p.cli("verify"); code != 0 {
		t.Errorf("verify after the keep: exit %d\n%s", code, out)
	}
}

// waitJournal waits until the delete journal in the index directory index satisfies ok (read as the
// CLI reads it, beside the running mount), failing after two minutes (a bound for a hung mount, not a
// speed assertion).
func waitJournal(t *testing.T, index, what string, ok func(deleteq.Replay) bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rp, err := deleteq.ReadJournal(index)
		if err != nil {
			t.Fatalf("delete journal: %v", err)
		}
		if ok(rp) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: journal %+v", what, rp)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
