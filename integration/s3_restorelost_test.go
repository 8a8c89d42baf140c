package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/fs/lostfound"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestS3RestoreLostFromVersions: on a versioned bucket without --hold, the first incident's purge of
// the old job with `aws s3 rm --recursive` beside the mount. verify names the restorable version of
// every missing object; `ckguard restore-lost` (a dry run) lists exactly the referenced objects and
// changes nothing; `--apply` brings each back as its very version (delete markers removed), audits
// each, leaves the old job's garbage and its retired `_metadata` deleted, and verify is green. The same
// again with the mount stopped (the index opened by the command).
func TestS3RestoreLostFromVersions(t *testing.T) {
	e := s3StartWith(t, true)
	tr := e.tree(t, incident{"IncidentOne", treegen.IncidentOne}, s3Root)
	c := e.client(t, e.srv.Endpoint)
	ctx := context.Background()
	oldJob := "flink-checkpoints/" + treegen.IncidentOneOldJob
	newJob := "flink-checkpoints/" + treegen.IncidentOneNewJob
	// What the new job references in the old job's folder (lost by the purge), and the rest (garbage).
	refd := map[string]bool{}
	for m, ck := range tr.Live {
		if strings.HasPrefix(m, newJob+"/") {
			for _, r := range ck.Refs {
				if strings.HasPrefix(r, oldJob+"/") {
					refd[r] = true
				}
			}
		}
	}
	var garbage []string
	for k := range tr.Files {
		if strings.HasPrefix(k, oldJob+"/") && !refd[k] {
			garbage = append(garbage, k)
		}
	}
	if len(refd) == 0 || len(garbage) == 0 {
		t.Fatalf("scenario: %d referenced and %d garbage objects in the old job", len(refd), len(garbage))
	}
	versions := map[string]string{}
	for k := range refd {
		o, err := c.Head(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		versions[k] = o.VersionID
	}
	purge := func() {
		t.Helper()
		s3server.AWS(t, e.srv.Endpoint, "s3", "rm", "--recursive", "--only-show-errors", s3Root+"/"+oldJob+"/")
		for k := range refd {
			if _, err := c.Head(ctx, k); err == nil {
				t.Fatalf("%s still reads after aws s3 rm", k)
			}
		}
	}
	check := func(p *mntProc, cli func(args ...string) (string, int)) {
		t.Helper()
		out, code := cli("verify")
		if code != 1 || strings.Count(out, ": restorable from version ") < len(refd) || !strings.Contains(out, "restore-lost --apply") {
			t.Fatalf("verify after the purge: exit %d, want 1 naming the restorable version of each of %d objects\n%s", code, len(refd), out)
		}
		out, code = cli("restore-lost")
		if code != 0 || strings.Count(out, "would restore version ") != len(refd) || !strings.Contains(out, "dry run") {
			t.Fatalf("restore-lost (dry run): exit %d, want 0 listing %d objects\n%s", code, len(refd), out)
		}
		for k := range refd {
			if !strings.Contains(out, k+": would restore version "+versions[k]) {
				t.Errorf("the dry run does not name %s at version %s", k, versions[k])
			}
			if _, err := c.Head(ctx, k); err == nil {
				t.Errorf("%s reads again after a dry run", k)
			}
		}
		for _, g := range garbage {
			if strings.Contains(out, g) {
				t.Errorf("the dry run lists garbage %s", g)
			}
		}
		recsBefore := len(p.auditRecords())
		out, code = cli("restore-lost", "--apply")
		if code != 0 || !strings.Contains(out, "verify after the restore: OK") {
			t.Fatalf("restore-lost --apply: exit %d\n%s", code, out)
		}
		t.Logf("restore-lost --apply:\n%s", out)
		for k, v := range versions {
			o, err := c.Head(ctx, k)
			if err != nil {
				t.Errorf("%s not restored: %v", k, err)
				continue
			}
			if o.VersionID != v {
				t.Errorf("%s restored as version %s, want the original %s", k, o.VersionID, v)
			}
		}
		for _, g := range garbage {
			if _, err := c.Head(ctx, g); err == nil {
				t.Errorf("garbage %s of the old job reads again after restore-lost", g)
			}
		}
		n := 0
		for _, r := range p.auditRecords()[recsBefore:] {
			if r.Op == lostfound.AuditOp && r.Decision == lostfound.AuditRestored && refd[r.Path] && len(r.Referencing) > 0 {
				n++
			}
		}
		if n != len(refd) {
			t.Errorf("%d %s audit records, want %d", n, lostfound.AuditOp, len(refd))
		}
		if out, code := cli("verify"); code != 0 {
			t.Errorf("verify after restore-lost: exit %d\n%s", code, out)
		}
	}

	p := mntStart(t, s3Root, "", e.mountArgs("--grace", "0s")...)
	purge()
	withMount := func(args ...string) (string, int) {
		return p.cli(append(args, e.mountArgs()...)...)
	}
	check(p, withMount)

	// Without a mount: the command opens the index and syncs it itself.
	p.stop()
	purge()
	check(p, withMount)
	// Nothing left to restore.
	if out, code := withMount("restore-lost"); code != 0 || !strings.Contains(out, "no referenced object is missing") {
		t.Errorf("restore-lost with nothing missing: exit %d\n%s", code, out)
	}
}

// TestS3RestoreLostNotSettled: a mount whose index has not synced since a checkpoint's referenced
// object and then its `_metadata` were deleted beside it (the index lags a job that checkpoints faster
// than --sync-interval: here an hour). Verify finds the checkpoint broken, and retired by the time it
// looks at the `_metadata` again, so it reports nothing missing. restore-lost must not say so: it
// checks again, then says NOT SETTLED naming the checkpoint and exits 1 (it said "no referenced object
// is missing", exit 0, before).
func TestS3RestoreLostNotSettled(t *testing.T) {
	e := s3StartWith(t, true)
	tr := e.tree(t, incident{"IncidentOne", treegen.IncidentOne}, s3Root)
	// A checkpoint and an object only it references.
	refs := map[string]int{}
	for _, ck := range tr.Live {
		for _, r := range ck.Refs {
			refs[r]++
		}
	}
	var meta, only string
	for m, ck := range tr.Live {
		for _, r := range ck.Refs {
			if _, ok := tr.Files[r]; ok && refs[r] == 1 {
				meta, only = m, r
				break
			}
		}
		if meta != "" {
			break
		}
	}
	if meta == "" {
		t.Fatal("scenario: no object only one checkpoint references")
	}
	p := mntStart(t, s3Root, "", e.mountArgs("--grace", "0s", "--sync-interval", "1h", "--max-staleness", "3h")...)
	for _, k := range []string{only, meta} {
		s3server.AWS(t, e.srv.Endpoint, "s3", "rm", "--only-show-errors", s3Root+"/"+k)
	}
	out, code := p.cli(append([]string{"restore-lost"}, e.mountArgs()...)...)
	if code != 1 || !strings.Contains(out, "NOT SETTLED") || !strings.Contains(out, meta) || strings.Contains(out, "no referenced object is missing") {
		t.Fatalf("restore-lost with the index behind the store: exit %d, want 1 saying NOT SETTLED and naming %s\n%s", code, meta, out)
	}
	t.Logf("restore-lost:\n%s", out)
}
