package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
)

// TestQuarantinePurgeWithoutMountAudited: `ckguard quarantine purge` on a store no mount holds destroys
// data for good as the mount's purge does, so it writes the same audit records into the mount's audit
// log (INDEX/audit.jsonl, or --audit-log): op quarantine-purge, reason quarantine-purge-ttl for one past
// --ttl, quarantine-purge-operator for --older-than and --all, and the process that asked. A purge that
// cannot be audited (an --audit-log that cannot be opened) purges nothing.
func TestQuarantinePurgeWithoutMountAudited(t *testing.T) {
	forEachQBackend(t, func(t *testing.T, s *qStore) {
		p, _, es := wipeWithWrongPolicy(t, s, nil)
		p.stop()
		if _, err := os.Stat(p.sock); !os.IsNotExist(err) {
			t.Fatalf("the mount's socket is still there after it stopped (%v): the CLI would purge through it", err)
		}
		if len(es) < 4 {
			t.Fatalf("staged %d entries, want at least 4", len(es))
		}
		before := len(p.auditRecords())
		args := func(a ...string) []string { return append(a, s.storeArgs...) }
		nameOf := func(key string) string { return key } // a store key, relative to --store

		// Unwritable audit log: refused, nothing purged.
		notDir := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(notDir, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		out, code := qcli(p, "purge", args("--all", "--yes", "--audit-log", filepath.Join(notDir, "audit.jsonl"))...)
		if code == 0 || !strings.Contains(out, "--audit-log") {
			t.Fatalf("purge --all with an audit log that cannot be opened: exit %d, want a failure naming --audit-log\n%s", code, out)
		}
		if n := len(qListResult(t, p, s.storeArgs...).Entries); n != len(es) {
			t.Fatalf("a purge that could not be audited destroyed %d entries", len(es)-n)
		}

		time.Sleep(1100 * time.Millisecond)
		if out, code := qcli(p, "purge", args("--ttl", "1s", nameOf(es[0].Key()))...); code != 0 {
			t.Fatalf("purge --ttl 1s %s without a mount: exit %d\n%s", es[0].Key(), code, out)
		}
		if out, code := qcli(p, "purge", args("--older-than", "1s", nameOf(es[1].Key()))...); code != 0 {
			t.Fatalf("purge --older-than 1s %s without a mount: exit %d\n%s", es[1].Key(), code, out)
		}
		if out, code := qcli(p, "purge", args("--all", "--yes")...); code != 0 {
			t.Fatalf("purge --all --yes without a mount: exit %d\n%s", code, out)
		}
		if n := len(qListResult(t, p, s.storeArgs...).Entries); n != 0 {
			t.Fatalf("after purge --all --yes: %d entries left", n)
		}

		recs := p.auditRecords()[before:]
		byPath := map[string]audit.Record{}
		for _, r := range recs {
			if r.Op != "quarantine-purge" {
				t.Errorf("unexpected audit record from the CLI: %+v", r)
				continue
			}
			if _, dup := byPath[r.Path]; dup {
				t.Errorf("two purge records for %s", r.Path)
			}
			byPath[r.Path] = r
			if r.Decision != "allow" || r.UID != uint32(os.Getuid()) || r.PID == 0 || r.Comm == "" || !strings.Contains(r.Message, "purged for good") {
				t.Errorf("audit record of a purge without a mount does not name what and who: %+v", r)
			}
		}
		for i, e := range es {
			r, ok := byPath[e.Key()]
			if !ok {
				t.Errorf("no audit record of the purge of %s", e.Key())
				continue
			}
			want := "quarantine-purge-operator"
			if i == 0 {
				want = "quarantine-purge-ttl"
			}
			if r.Reason != want {
				t.Errorf("purge of %s audited with reason %q, want %q", e.Key(), r.Reason, want)
			}
		}
	})
}
