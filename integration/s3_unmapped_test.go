package integration

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestS3UnmappedReferences: a bucket whose _metadata name its objects by another bucket, or by an
// s3a://host/bucket/… alias that does not match the store, mounted without --map. Where the bucket
// holds every referenced object at the same relative place, the mapping is inferred and rm -rf of the old
// job leaves exactly what the ground truth says; with one referenced object lost before the mount, every
// object that could be referenced is refused, the refusal names the --map, and verify exits 3.
func TestS3UnmappedReferences(t *testing.T) {
	mntRequire(t)
	inc := incident{"IncidentTwo", treegen.IncidentTwo}
	rmrf := mntCleanups[0]
	for _, tc := range []struct {
		name, uriPrefix, fix string
		lose                 bool
	}{
		{name: "another bucket", uriPrefix: "s3a://other-bucket/flink", fix: "s3://other-bucket/flink/checkpoints=checkpoints"},
		{name: "host alias", uriPrefix: "s3a://rgw.example.internal:8443/ckpt/flink", fix: "s3://rgw.example.internal:8443/ckpt/flink/checkpoints=checkpoints"},
		{name: "another bucket, one object lost", uriPrefix: "s3a://other-bucket/flink", fix: "--map s3://other-bucket/flink=", lose: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := s3Start(t)
			tr := e.tree(t, inc, tc.uriPrefix)
			var lost string
			if tc.lose {
				// A file of the old job that a checkpoint of the restored job needs.
				for _, c := range tr.Live {
					for _, r := range c.Refs {
						if !strings.HasPrefix(c.Metadata, tr.Purge+"/") && strings.HasPrefix(r, tr.Purge+"/") {
							lost = r
						}
					}
				}
				if lost == "" {
					t.Fatal("the incident has no cross-job reference")
				}
				mntMust(t, "/usr/bin/aws", "--endpoint-url", e.srv.Endpoint, "s3", "rm", "--only-show-errors", s3Root+"/"+lost)
			}
			p := mntStart(t, s3Root, filepath.Join(t.TempDir(), "index"), e.mountArgs()...)
			if !strings.Contains(p.logText(), tc.fix) {
				t.Errorf("the mount log does not name %s:\n%s", tc.fix, p.logText())
			}
			rmrf.run(t, p.mnt, tr.Purge)
			var named bool
			for _, r := range p.auditRecords() {
				named = named || r.Decision == "refuse" && r.Reason == "unmapped-references" && strings.Contains(r.Message, tc.fix)
			}
			p.stop()
			keys := e.keys(t)
			if !tc.lose {
				mntSameSet(t, "bucket after rm -rf through the S3 guard without --map", keys, expectedAfter(tr, rmrf, treegen.DefaultPolicy))
				if ok, ran, out := e.cliVerify(t, p.index); ran && !ok {
					t.Errorf("ckguard verify not green on an inferred mapping:\n%s", out)
				}
				return
			}
			have := map[string]bool{}
			for _, k := range keys {
				have[k] = true
			}
			for _, r := range expectedAfter(tr, rmrf, treegen.DefaultPolicy) {
				if r != lost && !have[r] {
					t.Errorf("%s deleted while the references were unmapped", r)
				}
			}
			if !named {
				t.Errorf("no refusal names %s", tc.fix)
			}
			args := append([]string{"verify", "--store", s3Root, "--index", p.index}, e.mountArgs()...)
			if out, code := mntRun(t, "", mntBinary(t), args...); code != 3 || !strings.Contains(out, tc.fix) {
				t.Errorf("ckguard verify with unmapped references: exit %d, want 3 naming %s\n%s", code, tc.fix, out)
			}
		})
	}
}
