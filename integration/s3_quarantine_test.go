package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// s3Contents reads every object below the prefix outside the quarantine area, straight from the server.
func s3Contents(t *testing.T, c *s3client.Client) map[string]string {
	t.Helper()
	out := map[string]string{}
	ctx := context.Background()
	err := c.Walk(ctx, "", func(o s3client.Object) error {
		if o.IsDir || store.InQuarantine(o.Key) {
			return nil
		}
		b := make([]byte, o.Size)
		n, err := c.ReadAt(ctx, o.Key, b, 0, "")
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted (staged) by the mount between the listing and the read
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		out[o.Key] = string(b[:n])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitEntries waits (bounded) until the mount's delete queue has staged n entries: rm returns once a
// deletion is acknowledged, the staging follows in the queue's rounds.
func waitEntries(t *testing.T, p *mntProc, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got := len(qList(t, p))
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d entries in quarantine after 2 minutes, want %d", got, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestS3QuarantineRestoreAfterWrongPolicy: on S3, with a wrong policy (no grace, no active window)
// rm -rf through the mount takes every job. With --quarantine nothing is lost: every object is staged
// in the area (not listed by the mount), a purge is refused (too young), and restoring everything gives
// back the bucket byte for byte (S3 sets a new Last-Modified on the copy back) with verify green.
func TestS3QuarantineRestoreAfterWrongPolicy(t *testing.T) {
	e := s3Start(t)
	e.tree(t, incident{"IncidentOne", treegen.IncidentOne}, s3Root)
	c := e.client(t, e.srv.Endpoint)
	before := s3Contents(t, c)
	index := filepath.Join(t.TempDir(), "index")
	p := mntStart(t, s3Root, index, e.mountArgs("--grace", "0s", "--active-window", "0s", "--savepoint-keep-newest=false", "--quarantine", "24h")...)
	for _, d := range []string{"flink-checkpoints/" + treegen.IncidentOneNewJob, "flink-checkpoints"} {
		if out, code := mntRun(t, "", "rm", "-rf", p.m(d)); code != 0 {
			t.Fatalf("rm -rf %s through the S3 mount: exit %d\n%s", d, code, out)
		}
	}
	waitEntries(t, p, len(before))
	if left := s3Contents(t, c); len(left) != 0 {
		t.Fatalf("the wrong policy should have let rm take everything; left: %v", left)
	}
	if out, code := mntRun(t, "", "ls", "-a", p.mnt); strings.Contains(out, store.QuarantineDir) {
		t.Fatalf("the mount lists the quarantine area (exit %d):\n%s", code, out)
	}
	if out, code := mntRun(t, "", "stat", p.m(store.QuarantineDir)); code == 0 {
		t.Fatalf("the quarantine area is reachable through the mount:\n%s", out)
	}
	if out, code := mntRun(t, "", "touch", p.m(store.QuarantineDir+"/planted")); code == 0 {
		t.Fatalf("a user created a file in the quarantine area through the mount:\n%s", out)
	}
	out, code := qcli(p, "purge")
	if code != 1 || !strings.Contains(out, "younger than the TTL") || !strings.Contains(out, "purged 0 entries") {
		t.Fatalf("purge before the TTL: exit %d, want 1 and every entry refused\n%s", code, out)
	}
	if out, code := qcli(p, "restore", "--since", "1h"); code != 0 {
		t.Fatalf("restore --since 1h: exit %d\n%s", code, out)
	}
	if es := qList(t, p); len(es) != 0 {
		t.Errorf("%d entries left in quarantine", len(es))
	}
	p.stop()
	after := s3Contents(t, c)
	for k, v := range before {
		g, ok := after[k]
		switch {
		case !ok:
			t.Errorf("%s not restored", k)
		case g != v:
			t.Errorf("%s restored with other content", k)
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d objects after the restore, %d before", len(after), len(before))
	}
	if ok, broken := e.verify(t, index); !ok {
		t.Errorf("live checkpoints broken after the restore: %s", broken)
	}
	if ok, ran, out := e.cliVerify(t, index); ran && !ok {
		t.Errorf("ckguard verify red after the restore:\n%s", out)
	}
}

// TestS3QuarantineKill9DuringRm kills the S3 mount with SIGKILL while rm -rf runs with --quarantine,
// then mounts again: no object is ever lost (at its key or staged), and once the replayed queue has
// applied what was acknowledged none is both at its key and staged (a copy made just before the kill
// is completed or removed), nor staged twice; rm -rf after the remount stages the rest.
func TestS3QuarantineKill9DuringRm(t *testing.T) { s3QuarantineKill9(t, false) }

// s3QuarantineKill9 is TestS3QuarantineKill9DuringRm on a bucket with versioning enabled or not.
func s3QuarantineKill9(t *testing.T, versioned bool) {
	e := s3StartWith(t, versioned)
	tr := e.tree(t, incident{"IncidentOne", treegen.IncidentOne}, s3Root)
	c := e.client(t, e.srv.Endpoint)
	ctx := context.Background()
	for i := range 1500 {
		k := fmt.Sprintf("%s/chk-100270/leftover-%05d", tr.Purge, i)
		if _, err := c.Put(ctx, k, strings.NewReader(k), int64(len(k)), s3client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := s3Contents(t, c)
	args := e.mountArgs("--grace", "0s", "--active-window", "0s", "--savepoint-keep-newest=false", "--quarantine", "24h")
	p := mntStart(t, s3Root, filepath.Join(t.TempDir(), "index"), args...)
	rm := exec.Command("rm", "-rf", p.m(tr.Purge))
	var rmOut bytes.Buffer
	rm.Stdout, rm.Stderr = &rmOut, &rmOut
	if err := rm.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		recs, _ := os.ReadFile(p.audit)
		if strings.Count(string(recs), `"decision":"allow"`) > 500 || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	p.kill9()
	_ = rm.Wait()

	// check counts the objects lost, both at their key and staged, and staged twice.
	check := func(when string) (lost, both, dup int) {
		t.Helper()
		now := s3Contents(t, c)
		full := append([]string{"quarantine", "list", "--json", "--store", p.store, "--index", p.index}, e.mountArgs()...)
		out, code := mntRun(t, "", mntBinary(t), full...)
		if code != 0 {
			t.Fatalf("%s: quarantine list: exit %d\n%s", when, code, out)
		}
		var r quarantine.ListResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: %v\n%s", when, err, out)
		}
		staged := map[string]int{}
		for _, e := range r.Entries {
			staged[e.Path]++
		}
		for k := range before {
			_, there := now[k]
			switch {
			case there && staged[k] > 0:
				both++
			case !there && staged[k] == 0:
				lost++
			case staged[k] > 1:
				dup++
			}
		}
		if len(r.Problems) != 0 {
			t.Errorf("%s: problems in the area: %+v", when, r.Problems)
		}
		t.Logf("%s: %d objects at their key, %d staged, %d both", when, len(now), len(r.Entries), both)
		return lost, both, dup
	}
	if lost, _, dup := check("after kill -9"); lost+dup != 0 {
		t.Fatalf("after kill -9: %d objects lost, %d staged twice", lost, dup)
	}
	p.start(args...)
	// The remount replays the journal of acknowledged deletions; wait (bounded) until it has applied
	// them, losing nothing at any point.
	deadline = time.Now().Add(2 * time.Minute)
	for {
		lost, both, dup := check("after the remount")
		if lost+dup != 0 {
			t.Fatalf("after the remount: %d objects lost, %d staged twice", lost, dup)
		}
		if both == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the remount: %d objects both at their key and staged after 2 minutes", both)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The live job still references some of the old job's shared SSTs: those are refused.
	if out, code := mntRun(t, "", "rm", "-rf", p.m(tr.Purge)); code != 1 || !strings.Contains(out, "Operation not permitted") {
		t.Fatalf("rm -rf after the remount: exit %d, want 1 (the referenced SSTs are refused)\n%s", code, out)
	}
	p.stop() // drains the queue
	if lost, both, dup := check("after rm -rf again"); lost+both+dup != 0 {
		t.Fatalf("after rm -rf again: %d lost, %d both, %d staged twice", lost, both, dup)
	}
}
