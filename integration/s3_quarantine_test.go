package integration

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
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
