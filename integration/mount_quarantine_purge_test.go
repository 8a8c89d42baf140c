package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestMountQuarantinePurgeEarly: a full disk must not wait for the TTL. Deletions staged by a running
// mount (TTL 24 h) are purged without a remount by `quarantine purge --older-than` and `--all --yes`
// over its socket; `--all` without --yes and without a terminal to ask purges nothing; every purge is
// in the mount's audit log with its cause and the requesting process.
func TestMountQuarantinePurgeEarly(t *testing.T) {
	mntRequire(t)
	base, tr := incidentOneStore(t, "ckguard-qpurge-")
	p := sharedMount(t, base, tr.Root, "--quarantine", "24h")
	garbage := "flink-checkpoints/" + treegen.IncidentOneOldJob + "/chk-100270"
	if out, code := mntRun(t, "", "rm", "-rf", p.m(garbage)); code != 0 {
		t.Fatalf("rm -rf %s: exit %d\n%s", garbage, code, out)
	}
	es := qList(t, p)
	if len(es) < 2 {
		t.Fatalf("staged %d entries, want at least 2", len(es))
	}

	if out, code := qcli(p, "purge"); code != 1 || len(qList(t, p)) != len(es) {
		t.Fatalf("purge within the TTL: exit %d (want 1), %d entries left of %d\n%s", code, len(qList(t, p)), len(es), out)
	}
	if out, code := qcli(p, "purge", "--all"); code != 2 || !strings.Contains(out, "--yes") || len(qList(t, p)) != len(es) {
		t.Fatalf("purge --all without --yes and no terminal: exit %d (want 2 naming --yes), %d entries left of %d\n%s", code, len(qList(t, p)), len(es), out)
	}
	time.Sleep(1100 * time.Millisecond)
	first := filepath.Join(tr.Root, filepath.FromSlash(es[0].Key()))
	if out, code := qcli(p, "purge", "--older-than", "1s", first); code != 0 {
		t.Fatalf("purge --older-than 1s %s: exit %d\n%s", es[0].Key(), code, out)
	}
	if n := len(qList(t, p)); n != len(es)-1 {
		t.Fatalf("after purging one entry early: %d entries, want %d", n, len(es)-1)
	}
	if out, code := qcli(p, "purge", "--all", "--yes"); code != 0 {
		t.Fatalf("purge --all --yes: exit %d\n%s", code, out)
	}
	if n := len(qList(t, p)); n != 0 {
		t.Fatalf("after purge --all --yes: %d entries left", n)
	}
	purged := map[string]bool{}
	for _, r := range p.auditRecords() {
		if r.Op != "quarantine-purge" {
			continue
		}
		if r.Reason != "quarantine-purge-operator" || r.UID != uint32(os.Getuid()) || r.PID == 0 || r.Comm == "" {
			t.Errorf("audit record of an operator's purge: %+v", r)
		}
		purged[r.Path] = true
	}
	for _, e := range es {
		if !purged[e.Key()] {
			t.Errorf("no audit record of the purge of %s", e.Key())
		}
	}
	if !strings.Contains(p.logText(), "purged from quarantine") {
		t.Errorf("the purges are not in the mount's log:\n%s", p.logText())
	}
}

// TestMountQuarantineSpaceBound: a quarantine over --quarantine-max-bytes is purged, oldest first,
// before its TTL at the next sync, each purge audited with cause space and logged.
func TestMountQuarantineSpaceBound(t *testing.T) {
	mntRequire(t)
	base, tr := incidentOneStore(t, "ckguard-qbound-")
	p := sharedMount(t, base, tr.Root, "--quarantine", "24h", "--quarantine-max-bytes", "1")
	garbage := "flink-checkpoints/" + treegen.IncidentOneOldJob + "/chk-100270"
	if out, code := mntRun(t, "", "rm", "-rf", p.m(garbage)); code != 0 {
		t.Fatalf("rm -rf %s: exit %d\n%s", garbage, code, out)
	}
	waitSyncAfter(t, p, time.Now())
	waitSyncAfter(t, p, time.Now())
	if es := qList(t, p); len(es) > 1 {
		t.Fatalf("quarantine over --quarantine-max-bytes 1 after two syncs: %d entries left, want at most 1 (the sweep stops once within the bound)", len(es))
	}
	n := 0
	for _, r := range p.auditRecords() {
		if r.Op == "quarantine-purge" {
			if r.Reason != "quarantine-purge-space" {
				t.Errorf("audit record of an early purge: reason %q, want quarantine-purge-space", r.Reason)
			}
			n++
		}
	}
	if n == 0 {
		t.Errorf("no audit record of the early purges")
	}
	if !strings.Contains(p.logText(), "over its space bound") {
		t.Errorf("the early purge is not logged:\n%s", p.logText())
	}
	if _, err := os.Stat(filepath.Join(tr.Root, filepath.FromSlash(garbage))); !os.IsNotExist(err) {
		t.Errorf("%s is back: %v", garbage, err)
	}
}

// incidentOneStore generates IncidentOne in <base>/store, base a fresh folder below the system's temp
// folder (removed at the end).
func incidentOneStore(t *testing.T, prefix string) (string, *treegen.Tree) {
	t.Helper()
	base, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	tr, err := treegen.IncidentOne(filepath.Join(base, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return base, tr
}
