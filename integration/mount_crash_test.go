package integration

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestMountKill9DuringRm kills the mount daemon with SIGKILL while GNU rm -rf runs through it, then mounts
// again on the same (now stale) mountpoint: no referenced file was deleted, the index is consistent, every
// deletion that happened has its "allow" record and every refusal rm reported has its "refuse" record.
func TestMountKill9DuringRm(t *testing.T) {
	mntRequire(t)
	dir := t.TempDir()
	tr, err := treegen.IncidentOne(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Enough old garbage in the purged folder that rm is still busy when the daemon dies.
	old := time.Now().Add(-40 * 24 * time.Hour)
	for i := range 6000 {
		if err := tr.Write(fmt.Sprintf("%s/chk-100270/leftover-%05d", tr.Purge, i), 16, old); err != nil {
			t.Fatal(err)
		}
	}
	index := filepath.Join(dir, "index")
	p := mntStart(t, tr.Root, index)
	rm := exec.Command("rm", "-rf", p.m(tr.Purge))
	stderr, err := rm.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := rm.Start(); err != nil {
		t.Fatal(err)
	}
	var rmErrs []string
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			rmErrs = append(rmErrs, sc.Text())
		}
		close(done)
	}()
	// Kill once rm has deleted a good part but not all.
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs, _ := os.ReadFile(p.audit)
		if strings.Count(string(recs), `"decision":"allow"`) > 1500 || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	p.kill9()
	<-done
	_ = rm.Wait()
	if _, err := os.ReadDir(p.mnt); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("listing the mountpoint after SIGKILL: %v, want ENOTCONN (a stale mount)", err)
	}

	// Nothing referenced was deleted.
	present := map[string]bool{}
	for _, k := range mntFiles(t, tr.Root) {
		present[k] = true
	}
	// Nothing referenced by a checkpoint that is still live (its _metadata still there) was deleted, nor
	// a protected _metadata.
	for _, k := range tr.ProtectedMetadata(treegen.DefaultPolicy) {
		if !present[k] {
			t.Errorf("protected %s deleted", k)
		}
	}
	for meta, c := range tr.Live {
		if !present[meta] {
			continue // retired by rm before the kill
		}
		for _, r := range c.Refs {
			if !present[r] {
				t.Errorf("%s deleted although live %s references it", r, meta)
			}
		}
	}
	// The audit log has every decision up to the kill: each vanished file was allowed, each refusal rm
	// printed was refused.
	recs := p.auditRecords()
	allowed, refused := map[string]bool{}, map[string]bool{}
	for _, r := range recs {
		switch r.Decision {
		case "allow":
			allowed[r.Path] = true
		case "refuse":
			refused[r.Path] = true
		}
	}
	var deleted int
	for _, k := range tr.AllFiles() {
		if !present[k] {
			deleted++
			if !allowed[k] {
				t.Errorf("%s was deleted but the audit log has no allow record for it", k)
			}
		}
	}
	permRe := regexp.MustCompile(`cannot remove '(.*)': Operation not permitted`)
	var refusedByRm int
	for _, l := range rmErrs {
		if m := permRe.FindStringSubmatch(l); m != nil {
			refusedByRm++
			k := strings.TrimPrefix(strings.TrimPrefix(m[1], p.mnt), "/")
			if !refused[k] {
				t.Errorf("rm reported a refusal of %s that the audit log lacks", k)
			}
		}
	}
	t.Logf("killed after %d deletions, %d refusals seen by rm, %d audit records", deleted, refusedByRm, len(recs))
	if deleted == 0 || deleted == len(tr.Garbage(tr.Purge, treegen.DefaultPolicy)) {
		t.Logf("note: the kill did not land mid-run (deleted %d)", deleted)
	}

	// Remount on the stale mountpoint with the same index: replaced, consistent, and the cleanup finishes.
	p2 := &mntProc{t: t, store: tr.Root, index: index, mnt: p.mnt, log: p.log, audit: p.audit, sock: p.sock}
	p2.start()
	if !strings.Contains(p2.logText(), "stale") {
		t.Errorf("remount did not report replacing the stale mount:\n%s", p2.logText())
	}
	mntRun(t, "", "rm", "-rf", p2.m(tr.Purge))
	p2.stop()
	want := expectedAfter(tr, mntCleanups[0], treegen.DefaultPolicy)
	mntSameSet(t, "after remount and a second rm -rf", mntFiles(t, tr.Root), want)
	if ok, broken := verifyIndex(t, tr.Root, index); !ok {
		t.Errorf("index inconsistent after kill -9 and remount: %s", broken)
	}
}
