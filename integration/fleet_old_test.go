package integration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestFleetNamesOutdatedMounts (issue 32, part 5): a live mount of the store whose registry record is
// of an older shared protocol (written by a version before restore claims and shared holds: no
// protocol field) is named by a current mount in its log, in `ckguard fleet` and in `ckguard stats`;
// a current record, and a stopped old one, are not.
func TestFleetNamesOutdatedMounts(t *testing.T) {
	mntRequire(t)
	tr, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	area, err := shared.NewLocal(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now().UTC()
	for _, m := range []shared.Mount{
		{ID: "old-bastion-0123456789ab", Host: "old-bastion", Version: "v0.17.0", Layout: shared.Version, SyncInterval: 3600, Started: now, Heartbeat: now},
		{ID: "gone-bastion-0123456789ab", Host: "gone-bastion", Version: "v0.16.0", Layout: shared.Version, SyncInterval: 3600, Started: now, Heartbeat: now, Stopped: true},
		{ID: "new-bastion-0123456789ab", Host: "new-bastion", Version: "v0.18.0", Layout: shared.Version, Protocol: shared.Protocol, SyncInterval: 3600, Started: now, Heartbeat: now},
	} {
		if _, err := shared.Heartbeat(ctx, area, m); err != nil {
			t.Fatal(err)
		}
	}
	p := mntStart(t, tr.Root, "", "--shared", "--sync-interval", "1s")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.logText(), "an outdated ckguard mount works on this store") {
		if time.Now().After(deadline) {
			t.Fatalf("the mount does not name the outdated mount within 30 s:\n%s", p.logText())
		}
		time.Sleep(100 * time.Millisecond)
	}
	log := p.logText()
	if !strings.Contains(log, "old-bastion") || strings.Contains(log, "new-bastion") || strings.Contains(log, "gone-bastion") {
		t.Errorf("the log names the wrong mounts (want old-bastion only):\n%s", log)
	}
	out, code := p.cli("fleet")
	if code != 0 || !strings.Contains(out, "OUTDATED: old-bastion (old-bastion-0123456789ab, ckguard v0.17.0): it speaks shared protocol 1") ||
		strings.Contains(out, "OUTDATED: new-bastion") || strings.Contains(out, "OUTDATED: gone-bastion") {
		t.Errorf("ckguard fleet: exit %d, want old-bastion (only) named outdated:\n%s", code, out)
	}
	out, code = p.cli("stats")
	if code != 0 || !strings.Contains(out, "OUTDATED MOUNT") || !strings.Contains(out, "old-bastion (old-bastion-0123456789ab) runs ckguard v0.17.0") {
		t.Errorf("ckguard stats: exit %d, want the outdated mount named:\n%s", code, out)
	}
}
