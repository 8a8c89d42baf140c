package integration

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestQuarantineMaxBytesEveryBackend: --quarantine-max-bytes bounds the quarantine on every store, S3
// (copies in the area, or delete markers on a versioned bucket) as the local one: with a bound of one
// byte, what rm -rf staged is purged at the next syncs, oldest first, before its 24 h TTL, each purge
// audited with cause space, until at most one entry is left; nothing comes back into the store.
func TestQuarantineMaxBytesEveryBackend(t *testing.T) {
	forEachQBackend(t, func(t *testing.T, s *qStore) {
		before := s.contents(t)
		p := mntStart(t, s.root, filepath.Join(t.TempDir(), "index"), append(append([]string(nil), s.wrongPolicy...), "--quarantine-max-bytes", "1")...)
		for _, d := range []string{"flink-checkpoints/" + treegen.IncidentOneNewJob, "flink-checkpoints"} {
			if out, code := mntRun(t, "", "rm", "-rf", p.m(d)); code != 0 {
				t.Fatalf("rm -rf %s through the mount: exit %d\n%s", d, code, out)
			}
		}
		deadline := time.Now().Add(2 * time.Minute)
		var left, purged int
		for {
			left, purged = len(qList(t, p)), 0
			for _, r := range p.auditRecords() {
				if r.Op != "quarantine-purge" {
					continue
				}
				purged++
				if r.Reason != "quarantine-purge-space" {
					t.Fatalf("purge of %s audited as %q, want quarantine-purge-space (24 h TTL)", r.Path, r.Reason)
				}
			}
			if left <= 1 && left+purged == len(before) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("two minutes after rm -rf of %d files under --quarantine-max-bytes 1: %d entries left, %d purges audited", len(before), left, purged)
			}
			time.Sleep(300 * time.Millisecond)
		}
		if got := s.contents(t); len(got) != 0 {
			t.Errorf("%d files back in the store after the early purges", len(got))
		}
	})
}
