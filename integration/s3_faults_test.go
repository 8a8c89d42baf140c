package integration

import (
	"fmt"
	"github.com/ckguard/ckguard/s3backend/deleteq"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// bigIncident is IncidentOne with n extra unreferenced, old files in the purged job's leftover checkpoint
// folder, so a cleanup of it takes long enough to be interrupted.
func bigIncident(t *testing.T, e *s3env, n int) *treegen.Tree {
	t.Helper()
	now := time.Now()
	tr, err := treegen.IncidentOne(filepath.Join(t.TempDir(), "tree"), now, treegen.Options{URIPrefix: s3Root})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := tr.Write(fmt.Sprintf("%s/chk-100270/extra-%04d", tr.Purge, i), 16, now.Add(-30*24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	e.upload(t, tr)
	return tr
}

func rmRf() cleanup { return mntCleanups[0] }

// TestS3ServerKilledDuringRmRf: the S3 server is killed (SIGKILL) in the middle of rm -rf through the mount.
// rm gets EIO, no referenced object is deleted; after the server restarts and the mount is remounted on
// the same index, the same rm -rf completes the cleanup exactly, and verify is green.
func TestS3ServerKilledDuringRmRf(t *testing.T) {
	e := s3Start(t)
	tr := bigIncident(t, e, 400)
	e.proxy.SetLatency(3 * time.Millisecond) // stretch the cleanup over a second or two
	index := filepath.Join(t.TempDir(), "index")
	p := mntStart(t, s3Root, index, e.mountArgs("--s3-max-attempts", "2", "--s3-timeout", "5s")...)
	rm := exec.Command("rm", "-rf", p.m(tr.Purge))
	var out strings.Builder
	rm.Stdout, rm.Stderr = &out, &out
	if err := rm.Start(); err != nil {
		t.Fatal(err)
	}
	before := len(e.dataKeys(t))
	deadline := time.Now().Add(30 * time.Second)
	for len(e.dataKeys(t)) > before-50 { // kill after the first 50 deletions
		if time.Now().After(deadline) {
			t.Fatalf("rm -rf made no progress: %s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.srv.Kill()
	err := rm.Wait()
	if err == nil || !strings.Contains(out.String(), "Input/output error") {
		t.Errorf("rm -rf with the server killed: %v, want EIO errors; output:\n%s", err, firstLines(out.String(), 5))
	}
	mid := e.dataKeys(t)
	want := expectedAfter(tr, rmRf(), treegen.DefaultPolicy)
	has := map[string]bool{}
	for _, k := range mid {
		has[k] = true
	}
	for _, k := range want {
		if !has[k] {
			t.Errorf("%s deleted although it must survive (server killed mid-cleanup)", k)
		}
	}
	if len(mid) == len(want) {
		t.Fatalf("the cleanup finished before the kill; the test did not interrupt it")
	}
	t.Logf("rm -rf interrupted: %d objects before, %d after the kill, %d must survive", before, len(mid), len(want))

	p.stop()
	if err := e.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	e.proxy.SetLatency(0)
	p2 := mntStart(t, s3Root, index, e.mountArgs()...)
	mntRun(t, "", "rm", "-rf", p2.m(tr.Purge))
	p2.stop()
	mntSameSet(t, "bucket after restart, remount and a second rm -rf", e.keys(t), want)
	if ok, broken := e.verify(t, index); !ok {
		t.Errorf("verify red after the interrupted cleanup: %s", broken)
	}
}

// TestS3Flaky503: a proxy fails 10% of all requests with 503 SlowDown. The bounded retries absorb them: the
// index syncs, rm -rf and find -delete through the mount do exactly what they do on a healthy server.
func TestS3Flaky503(t *testing.T) {
	for _, cl := range []cleanup{mntCleanups[0], mntCleanups[1]} {
		t.Run(cl.name, func(t *testing.T) {
			e := s3Start(t)
			tr := bigIncident(t, e, 100)
			e.proxy.SetFailRate(0.10)
			index := filepath.Join(t.TempDir(), "index")
			t0 := time.Now()
			p := mntStart(t, s3Root, index, e.mountArgs()...)
			t1 := time.Now()
			cl.run(t, p.mnt, tr.Purge)
			t2 := time.Now()
			p.stop()
			t.Logf("mount %v, %s %v, unmount %v", t1.Sub(t0), cl.name, t2.Sub(t1), time.Since(t2))
			reqs, failed := e.proxy.Stats()
			if failed == 0 || reqs == 0 {
				t.Fatalf("proxy injected no failures (%d of %d)", failed, reqs)
			}
			t.Logf("proxy: %d requests, %d failed with 503", reqs, failed)
			e.proxy.SetFailRate(0)
			mntSameSet(t, "bucket after "+cl.name+" behind a 10% 503 proxy", e.keys(t), expectedAfter(tr, cl, treegen.DefaultPolicy))
			if ok, broken := e.verify(t, index); !ok {
				t.Errorf("verify red: %s", broken)
			}
		})
	}
}

// TestS3SlowResponses: with 50 ms per request the mount is slow but correct; a server slower than
// --s3-timeout turns operations into EIO within the bound instead of hanging, and nothing is deleted.
func TestS3SlowResponses(t *testing.T) {
	e := s3Start(t)
	tr := e.tree(t, incident{"IncidentTwo", treegen.IncidentTwo}, s3Root)
	e.proxy.SetLatency(50 * time.Millisecond)
	index := filepath.Join(t.TempDir(), "index")
	p := mntStart(t, s3Root, index, e.mountArgs("--s3-timeout", "2s", "--s3-max-attempts", "2")...)
	mntRun(t, "", "rm", "-rf", p.m(tr.Purge))
	// rm returns once every deletion is acknowledged; the mount applies them from its queue afterwards.
	waitQueueApplied(t, index)
	mntSameSet(t, "bucket after rm -rf with 50 ms latency", e.keys(t), expectedAfter(tr, rmRf(), treegen.DefaultPolicy))

	// A hung server: every request takes 10 s, the bound is 2 s.
	victim := ""
	for _, k := range tr.AllFiles() {
		if strings.HasPrefix(k, "checkpoints/job_d29e1b63/taskowned") || strings.Contains(k, "job_d29e1b63/shared/") {
			victim = k
		}
	}
	if victim == "" {
		t.Fatal("no file to probe")
	}
	time.Sleep(3 * time.Second) // let the stat cache and the kernel's attribute cache expire
	e.proxy.SetLatency(10 * time.Second)
	start := time.Now()
	_, err := statErr(p.m(victim))
	// Go's runtime signals (preemption) can interrupt the blocked stat: the kernel then aborts the FUSE
	// request with EINTR. Retry it as libc callers do; the bound still counts from the first attempt.
	for err == syscall.EINTR && time.Since(start) < 8*time.Second {
		_, err = statErr(p.m(victim))
	}
	if took := time.Since(start); err != syscall.EIO || took > 8*time.Second {
		t.Errorf("stat against a hung server: %v after %v, want EIO within the 2s bound (plus retries)", err, took)
	}
	e.proxy.SetLatency(0)
	p.stop()
	found := false
	for _, k := range e.keys(t) {
		found = found || k == victim
	}
	if !found {
		t.Errorf("%s disappeared", victim)
	}
}

// waitQueueApplied waits until the S3 mount whose index is in dir has applied every deletion it
// acknowledged (its journal holds none pending); it fails the test if that takes longer than a minute.
func waitQueueApplied(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		rp, err := deleteq.ReadJournal(dir)
		if err != nil {
			t.Fatalf("reading the delete journal in %s: %v", dir, err)
		}
		if len(rp.Pending) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d acknowledged deletions still pending after a minute", len(rp.Pending))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func statErr(p string) (syscall.Stat_t, error) {
	var st syscall.Stat_t
	err := syscall.Stat(p, &st)
	if errno, ok := err.(syscall.Errno); ok {
		return st, errno
	}
	return st, err
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
