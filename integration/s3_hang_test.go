package integration

import (
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestS3ListingHangsMidWalk (issue 29, a store that stops answering mid-walk): on an S3 mount, every
// ListObjectsV2 of one prefix (scratch/) is parked by the fault proxy, neither answered nor refused, as
// a hung server or a black-holed connection leaves it. Outcome: the sync's descent gives up on that
// prefix after --s3-timeout (per attempt, --s3-max-attempts 2) and records it as an unknown subtree
// naming the listing and the timeout; the sync itself succeeds, so the rest of the bucket is decided as
// usual (an unreferenced old object elsewhere is deleted, a referenced one refused) and only deletions
// in the hung prefix are refused (unknown-subtree); once the prefix answers again the next sync clears
// it with no restart, and its old object is deleted.
func TestS3ListingHangsMidWalk(t *testing.T) {
	e := s3Start(t)
	now := time.Now()
	tr, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "tree"), now, treegen.Options{URIPrefix: s3Root})
	if err != nil {
		t.Fatal(err)
	}
	old := now.Add(-10 * 24 * time.Hour)
	for _, k := range []string{"elsewhere/old-unreferenced", "scratch/held/old-a", "scratch/held/old-b"} {
		if err := tr.Write(k, 100, old); err != nil {
			t.Fatal(err)
		}
	}
	e.upload(t, tr)
	p := mntStart(t, s3Root, filepath.Join(t.TempDir(), "index"), e.mountArgs("--s3-timeout", "2s", "--s3-max-attempts", "2")...)
	ref := tr.Referenced()[0]

	h := e.proxy.Hold("ListObjectsV2", func(r *http.Request) bool {
		return strings.HasPrefix(r.URL.Query().Get("prefix"), s3Prefix+"/scratch/")
	})
	t0 := time.Now()
	waitSyncAfter(t, p, t0)
	waitSyncAfter(t, p, time.Now())
	if h.Arrived() == 0 {
		t.Fatalf("no listing of scratch/ reached the proxy during two syncs\n%s", p.logText())
	}
	s := p.stats()
	if s.SyncError != "" || len(s.UnknownSubtrees) != 1 || s.UnknownSubtrees[0].Key != "scratch" {
		t.Fatalf("with scratch/ hanging: sync error %q, unknown %+v; want scratch unknown, the sync itself fine\n%s", s.SyncError, s.UnknownSubtrees, p.logText())
	}
	t.Logf("hung listing recorded after %s: %s", time.Since(t0).Round(time.Millisecond), s.UnknownSubtrees[0].Cause)
	if c := s.UnknownSubtrees[0].Cause; !strings.Contains(c, "scratch") {
		t.Errorf("the cause does not name the prefix: %s", c)
	}
	// As the mount's owner (on S3 only it may write through the mount; other users get EACCES).
	script := `
attempt("old", lambda: os.unlink(sys.argv[1]))
attempt("ref", lambda: os.unlink(sys.argv[2]))
attempt("held", lambda: os.unlink(sys.argv[3]))
`
	out, code := mntRun(t, "", "/usr/bin/python3", "-c", unprivPrelude+script, p.m("elsewhere/old-unreferenced"), p.m(ref), p.m("scratch/held/old-a"))
	if code != 0 {
		t.Fatalf("python: exit %d\n%s", code, out)
	}
	res := parseAttempts(out)
	// The mount's own lookup of scratch/held lists the hung prefix too: EIO after --s3-timeout (the
	// guard is not even asked); were the name resolved, the decision is unknown-subtree (why).
	if res["old"] != "OK" || res["ref"] != errnoOf(syscall.EPERM) || (res["held"] != errnoOf(syscall.EPERM) && res["held"] != errnoOf(syscall.EIO)) {
		t.Errorf("with scratch/ hanging: unlink old elsewhere %s (want OK), referenced %s (want EPERM), old object in scratch %s (want EIO or EPERM)\n%s",
			res["old"], res["ref"], res["held"], p.logText())
	}
	if out, _ := p.cli("why", "scratch/held/old-a"); !strings.Contains(out, "unknown-subtree") && !strings.Contains(out, "could not read") {
		t.Errorf("why scratch/held/old-a with scratch/ hanging: want the unknown subtree named\n%s", out)
	}
	if ks := e.keys(t); !hasKey(ks, "scratch/held/old-a") && !hasKey(ks, s3Prefix+"/scratch/held/old-a") {
		t.Errorf("scratch/held/old-a deleted while its prefix hung")
	}
	// The server answers again: the next sync clears it, no restart.
	h.Release()
	waitSyncAfter(t, p, time.Now())
	waitSyncAfter(t, p, time.Now())
	if s := p.stats(); s.SyncError != "" || len(s.UnknownSubtrees) != 0 {
		t.Fatalf("after the listing answers again: sync error %q, unknown %+v\n%s", s.SyncError, s.UnknownSubtrees, p.logText())
	}
	if out, code := mntRun(t, "", "rm", p.m("scratch/held/old-b")); code != 0 {
		t.Errorf("rm of the old object in scratch once listed again: exit %d\n%s", code, out)
	}
	if out, code := mntRun(t, "", "/usr/bin/python3", "-c", unprivPrelude+`attempt("ref", lambda: os.unlink(sys.argv[1]))`, p.m(ref)); !strings.Contains(out, "ref "+errnoOf(syscall.EPERM)) {
		t.Errorf("referenced %s after recovery: %s (exit %d)", ref, out, code)
	}
}

func hasKey(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}
