package integration

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestUnprivS3NewerFormatCannotBlockStore (issue 29 part 3, the S3 newer-format case): on S3 a
// newer-format `_metadata` refuses every deletion whoever wrote it (S3 has no owners). Could any local
// user of an --allow-other S3 mount cause that global refusal? No: the mount shows every object and
// folder as its owner's (0644/0755) and the kernel checks callers against those (default_permissions),
// so nobody's creates fail with EACCES and nothing reaches the bucket; the store keeps being decided
// as usual. Only the mount's owner (or root) writes through the mount, and beside the mount only who
// holds the bucket's credentials: both are writers the store trusts.
func TestUnprivS3NewerFormatCannotBlockStore(t *testing.T) {
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
	base, err := os.MkdirTemp("", "ckguard-unpriv-s3-newer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	p := sharedMount(t, base, s3Root, e.mountArgs()...)
	job := jobOf(tr.Referenced()[0])
	got := unprivAttempts(t, `
newer = bytes.fromhex("4960672d000000090000000000000001")
def write(p):
    with open(p, "wb") as f:
        f.write(newer)
attempt("in_job", lambda: write(os.path.join(sys.argv[1], sys.argv[2], "chk-999999", "_metadata")))
attempt("mkdir_in_job", lambda: os.mkdir(os.path.join(sys.argv[1], sys.argv[2], "chk-999999")))
attempt("at_root", lambda: os.makedirs(os.path.join(sys.argv[1], "scratch", "chk-1")))
attempt("file_at_root", lambda: write(os.path.join(sys.argv[1], "_metadata")))
`, p.mnt, job)
	for _, k := range []string{"in_job", "mkdir_in_job", "at_root", "file_at_root"} {
		if got[k] != errnoOf(syscall.EACCES) && got[k] != errnoOf(syscall.ENOENT) {
			t.Errorf("%s as nobody on the --allow-other S3 mount: %s, want EACCES (or ENOENT for a file in a folder it could not make)", k, got[k])
		}
	}
	waitSyncAfter(t, p, time.Now())
	waitSyncAfter(t, p, time.Now())
	if s := p.stats(); s.SyncError != "" || len(s.BadMetadata) != 0 || s.BlockingMetadata != 0 {
		t.Fatalf("after nobody's attempts: sync error %q, bad %+v\n%s", s.SyncError, s.BadMetadata, p.logText())
	}
	for _, k := range e.keys(t) {
		if filepath.Base(k) == "_metadata" && filepath.Base(filepath.Dir(k)) == "chk-999999" {
			t.Errorf("nobody's _metadata reached the bucket: %s", k)
		}
	}
	res := s3Attempts(t, `
attempt("old", lambda: os.unlink(sys.argv[1]))
attempt("ref", lambda: os.unlink(sys.argv[2]))
`, p.m("elsewhere/old-unreferenced"), p.m(tr.Referenced()[0]))
	if res["old"] != "OK" || res["ref"] != errnoOf(syscall.EPERM) {
		t.Errorf("as the mount's owner after nobody's attempts: unlink old %s (want OK), referenced %s (want EPERM)", res["old"], res["ref"])
	}
}
