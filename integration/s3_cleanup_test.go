package integration

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestS3IncidentCleanups: both incident trees uploaded to a real S3 server; each real cleanup tool run once
// through `ckguard mount --store s3://…` leaves exactly the objects the tree's ground truth says survive,
// and every live checkpoint is complete afterwards (verify green). References are written as s3:// and, for
// one run per incident, as s3a:// (the same objects).
func TestS3IncidentCleanups(t *testing.T) {
	mntRequire(t)
	for _, inc := range mntIncidents {
		for _, cl := range mntCleanups {
			schemes := []string{"s3"}
			if cl.name == "rm-rf" {
				schemes = append(schemes, "s3a")
			}
			for _, scheme := range schemes {
				t.Run(inc.name+"/"+cl.name+"/"+scheme, func(t *testing.T) {
					e := s3Start(t)
					tr := e.tree(t, inc, scheme+"://"+s3Bucket+"/"+s3Prefix)
					dir := t.TempDir()
					p := mntStart(t, s3Root, filepath.Join(dir, "index"), e.mountArgs()...)
					cl.run(t, p.mnt, tr.Purge)
					p.stop()
					want := expectedAfter(tr, cl, treegen.DefaultPolicy)
					mntSameSet(t, "bucket after "+cl.name+" through the S3 guard", e.keys(t), want)
					if ok, broken := e.verify(t, p.index); !ok {
						t.Errorf("live checkpoints broken after a guarded cleanup on S3: %s", broken)
					}
					if ok, ran, out := e.cliVerify(t, p.index); ran && !ok {
						t.Errorf("ckguard verify red after a guarded cleanup on S3:\n%s", out)
					} else if !ran {
						t.Logf("ckguard verify does not take s3:// stores yet: %s", firstLine(out))
					}
					var refusals int
					for _, r := range p.auditRecords() {
						if r.Decision == "refuse" {
							refusals++
						}
					}
					if refusals == 0 {
						t.Errorf("no refusal in the audit log; the incident tree has referenced objects in the cleanup's way")
					}
				})
			}
		}
	}
}

// TestS3IncidentControl: the unguarded cleanup (`aws s3 rm --recursive` of the old job's prefix) breaks
// a live checkpoint, and verify says so: the incident, reproduced on S3.
func TestS3IncidentControl(t *testing.T) {
	mntRequire(t)
	for _, inc := range mntIncidents {
		t.Run(inc.name, func(t *testing.T) {
			e := s3Start(t)
			tr := e.tree(t, inc, s3Root)
			index := filepath.Join(t.TempDir(), "index")
			if ok, broken := e.verify(t, index); !ok {
				t.Fatalf("verify red before any cleanup: %s", broken)
			}
			out := mntMust(t, "/usr/bin/aws", "--endpoint-url", e.srv.Endpoint, "s3", "rm", "--recursive", "--only-show-errors", s3Root+"/"+tr.Purge+"/")
			_ = out
			ok, broken := e.verify(t, index)
			if ok {
				t.Fatalf("verify green after an unguarded aws s3 rm --recursive of %s", tr.Purge)
			}
			t.Logf("unguarded: %s", broken)
			if ok, ran, out := e.cliVerify(t, index); ran && ok {
				t.Errorf("ckguard verify green after the unguarded cleanup:\n%s", out)
			}
		})
	}
}

func mntMust(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, code := mntRun(t, "", name, args...)
	if code != 0 {
		t.Fatalf("%s %s: exit %d\n%s", name, strings.Join(args, " "), code, out)
	}
	return out
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// TestS3QueriesWhileMounted: while the S3 mount holds the index, `ckguard why` answers through its control
// socket, and the user.ckguard.* extended attributes explain a file where the user stands.
func TestS3QueriesWhileMounted(t *testing.T) {
	e := s3Start(t)
	tr := e.tree(t, incident{"IncidentOne", treegen.IncidentOne}, s3Root)
	p := mntStart(t, s3Root, filepath.Join(t.TempDir(), "index"), e.mountArgs()...)
	ref := tr.Referenced()[0]
	out, code := p.cli(append(append([]string{"why"}, e.mountArgs()...), ref)...)
	if code != 1 || !strings.Contains(out, "referenced") {
		t.Errorf("ckguard why %s while mounted: exit %d\n%s", ref, code, out)
	}
	out, code = mntRun(t, "", "getfattr", "--absolute-names", "--only-values", "-n", "user.ckguard.state", p.m(ref))
	if code != 0 || strings.TrimSpace(out) != "referenced" {
		t.Errorf("getfattr user.ckguard.state %s: exit %d %q", ref, code, out)
	}
	out, code = mntRun(t, "", "getfattr", "--absolute-names", "--only-values", "-n", "user.ckguard.refs", p.m(ref))
	if code != 0 || !strings.Contains(out, "/_metadata") {
		t.Errorf("getfattr user.ckguard.refs %s: exit %d %q", ref, code, out)
	}
}
