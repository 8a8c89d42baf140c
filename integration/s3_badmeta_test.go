package integration

import (
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestS3BadMetadataProtectsOnlyItself (issue 29 part 2 on S3): a `_metadata` Flink could not load
// (random bytes, empty, a real Flink 1.20 one cut in half) is put into the bucket beside the mount (on
// S3 only the mount's owner may write through the mount; anyone with the bucket's credentials may
// write beside it). After two syncs: an unreferenced old object elsewhere is deleted through the mount,
// a referenced one is refused, stats lists it as damaged, refusing only itself; once past --grace it
// is deleted through the mount and the next sync forgets it.
func TestS3BadMetadataProtectsOnlyItself(t *testing.T) {
	real := realFlinkMetadata(t)
	random := make([]byte, 100)
	rand.New(rand.NewSource(29)).Read(random)
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"random", random},
		{"empty", nil},
		{"truncated", real[:len(real)/2]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := s3Start(t)
			now := time.Now()
			tr, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "tree"), now, treegen.Options{URIPrefix: s3Root})
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Write("elsewhere/old-unreferenced", 100, now.Add(-10*24*time.Hour)); err != nil {
				t.Fatal(err)
			}
			e.upload(t, tr)
			p := mntStart(t, s3Root, filepath.Join(t.TempDir(), "index"), e.mountArgs()...)
			bad := "scratch/job/chk-9/_metadata"
			f := filepath.Join(t.TempDir(), "_metadata")
			if err := os.WriteFile(f, tc.body, 0o644); err != nil {
				t.Fatal(err)
			}
			mntMust(t, "/usr/bin/aws", "--endpoint-url", e.srv.Endpoint, "s3", "cp", "--only-show-errors", f, s3Root+"/"+bad)
			damagedAfterTwoSyncs(t, p, bad)
			ref := tr.Referenced()[0]
			res := s3Attempts(t, `
attempt("old", lambda: os.unlink(sys.argv[1]))
attempt("ref", lambda: os.unlink(sys.argv[2]))
attempt("bad_young", lambda: os.unlink(sys.argv[3]))
`, p.m("elsewhere/old-unreferenced"), p.m(ref), p.m(bad))
			if res["old"] != "OK" || res["ref"] != errnoOf(syscall.EPERM) || res["bad_young"] != errnoOf(syscall.EPERM) {
				t.Errorf("with %s in the bucket: unlink old unreferenced %s (want OK), referenced %s (want EPERM), the young bad object %s (want EPERM: within --grace)\n%s",
					bad, res["old"], res["ref"], res["bad_young"], p.logText())
			}
			// Past --grace (the posix backend's Last-Modified is the file's mtime).
			old := now.Add(-10 * 24 * time.Hour)
			if err := os.Chtimes(filepath.Join(e.srv.DataDir, s3Bucket, s3Prefix, filepath.FromSlash(bad)), old, old); err != nil {
				t.Fatal(err)
			}
			waitSyncAfter(t, p, time.Now().Add(11*time.Second)) // the mount's attribute cache: StatTTL 10 s
			if out, code := mntRun(t, "", "rm", "-rf", p.m("scratch/job")); code != 0 {
				t.Errorf("rm -rf of the bad checkpoint folder past --grace: exit %d\n%s\n%s", code, out, p.logText())
			}
			waitSyncAfter(t, p, time.Now())
			if s := p.stats(); s.DamagedMetadata != 0 || len(s.BadMetadata) != 0 {
				t.Errorf("after its removal: damaged %d, listed %+v", s.DamagedMetadata, s.BadMetadata)
			}
			if ks := e.keys(t); hasKey(ks, bad) || hasKey(ks, s3Prefix+"/"+bad) || !(hasKey(ks, ref) || hasKey(ks, s3Prefix+"/"+ref)) {
				t.Errorf("bucket after the removal: %s gone, %s kept? %v", bad, ref, strings.Join(ks, " "))
			}
		})
	}
}

// s3Attempts runs an attempt script as the mount's owner (root): on S3 only it may write through the
// mount.
func s3Attempts(t *testing.T, script string, args ...string) map[string]string {
	t.Helper()
	out, code := mntRun(t, "", "/usr/bin/python3", append([]string{"-c", unprivPrelude + script}, args...)...)
	if code != 0 {
		t.Fatalf("python: exit %d\n%s", code, out)
	}
	return parseAttempts(out)
}
