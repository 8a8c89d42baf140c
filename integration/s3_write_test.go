package integration

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestS3WriteThroughMountIndexedOnClose: a checkpoint written through the S3 mount as Flink writes it (data
// files first, `_metadata` last) is protected as soon as the `_metadata` close returns: the mount uploads it
// and the index parses it synchronously, with no periodic sync in between (--sync-interval 1h). With
// --grace 0s the only thing protecting the files is the reference, so the refusal proves the indexing.
func TestS3WriteThroughMountIndexedOnClose(t *testing.T) {
	e := s3Start(t)
	src := filepath.Join(t.TempDir(), "tree")
	tr, err := treegen.IncidentTwo(src, time.Now(), treegen.Options{URIPrefix: s3Root})
	if err != nil {
		t.Fatal(err)
	}
	p := mntStart(t, s3Root, filepath.Join(t.TempDir(), "index"), e.mountArgs("--sync-interval", "1h", "--max-staleness", "3h", "--grace", "0s")...)
	var metas, data []string
	for _, k := range tr.AllFiles() {
		if filepath.Base(k) == "_metadata" {
			metas = append(metas, k)
		} else {
			data = append(data, k)
		}
	}
	sort.Strings(metas)
	cp := func(k string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p.m(k)), 0o755); err != nil {
			t.Fatal(err)
		}
		mntMust(t, "cp", filepath.Join(src, filepath.FromSlash(k)), p.m(k))
	}
	for _, k := range data {
		cp(k)
	}
	// A file nothing references, written like the others: deletable (grace 0s) before and after.
	if err := os.WriteFile(p.m("checkpoints/job_d29e1b63/shared/orphan"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range metas {
		cp(k)
	}
	ref := tr.Referenced()
	if len(ref) == 0 {
		t.Fatal("tree has no referenced files")
	}
	for _, k := range ref {
		if err := os.Remove(p.m(k)); err == nil {
			t.Errorf("%s deleted right after its checkpoint's _metadata was written through the mount", k)
		} else if !strings.Contains(err.Error(), "operation not permitted") {
			t.Errorf("unlink %s: %v, want EPERM", k, err)
		}
	}
	refused := 0
	for _, r := range p.auditRecords() {
		if r.Decision == "refuse" && r.Reason == "referenced" {
			refused++
		}
	}
	if refused < len(ref) {
		t.Errorf("%d refusals for reason referenced, want %d (one per referenced file)", refused, len(ref))
	}
	if err := os.Remove(p.m("checkpoints/job_d29e1b63/shared/orphan")); err != nil {
		t.Errorf("unreferenced file written through the mount: %v", err)
	}
	// Byte-identical round trip through the mount and aws-cli.
	got := filepath.Join(t.TempDir(), "back")
	awsCLI(t, e, "s3", "cp", "--recursive", "--only-show-errors", s3Root+"/", got)
	for _, k := range tr.AllFiles() {
		a, _ := os.ReadFile(filepath.Join(src, filepath.FromSlash(k)))
		b, err := os.ReadFile(filepath.Join(got, filepath.FromSlash(k)))
		if err != nil || string(a) != string(b) {
			t.Errorf("%s differs after the round trip through the mount: %v", k, err)
		}
	}
}

func awsCLI(t *testing.T, e *s3env, args ...string) {
	t.Helper()
	mntMust(t, "/usr/bin/aws", append([]string{"--endpoint-url", e.srv.Endpoint}, args...)...)
}
