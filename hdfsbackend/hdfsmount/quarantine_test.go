package hdfsmount_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient/hdfsfake"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsmount"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// setupQuarantined mounts the fake with a quarantine area (and a trash, which the quarantine replaces).
func setupQuarantined(t *testing.T) (*env, *hdfsquarantine.Area) {
	t.Helper()
	if testing.Short() {
		t.Skip("FUSE mount not run in -short mode")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	e := &env{f: hdfsfake.New("flink"), ck: guardtest.New(), mnt: t.TempDir()}
	e.f.Trash = time.Hour
	if err := e.f.MkdirAll(context.Background(), dir, 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := hdfsquarantine.Open(context.Background(), e.f, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	enf, err := guard.NewEnforcer(guard.Config{Checker: e.ck})
	if err != nil {
		t.Fatal(err)
	}
	m, err := hdfsmount.Mount(context.Background(), hdfsmount.Options{FS: e.f, Dir: dir, Name: "hdfs://nn:8020" + dir, Mountpoint: e.mnt, Enforcer: enf, Quarantine: a})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			_ = exec.Command("fusermount3", "-uz", e.mnt).Run()
		}
	})
	if m.StagingArea() == nil {
		t.Fatal("the mount reports no staging area")
	}
	return e, a
}

// TestQuarantineStagesDeletions: with a quarantine, rm -rf of the old job moves every file the guard
// lets go into the area (nothing to the trash, nothing destroyed), keeps the referenced ones, and a
// truncation and an open(O_TRUNC) stage the content they replace (the area is invisible and
// unwritable through the mount: contract case ReservedFolders, TestContractQuarantined).
func TestQuarantineStagesDeletions(t *testing.T) {
	e, a := setupQuarantined(t)
	ctx := context.Background()
	e.incident(t)
	if out, err := exec.Command("rm", "-rf", filepath.Join(e.mnt, "job_7d83f2a1")).CombinedOutput(); err == nil {
		t.Errorf("rm -rf succeeded though a referenced file stays: %s", out)
	}
	if got := e.files(); !strings.Contains(got, "job_7d83f2a1/shared/sst-ref") || strings.Contains(got, "sst-gone") {
		t.Errorf("store after rm -rf: %s", got)
	}
	es, err := a.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var staged []string
	for _, en := range es {
		staged = append(staged, en.Path)
		if b, err := e.f.ReadFile(a.EntryPath(en.ID)); err != nil || string(b) != en.Path {
			t.Errorf("entry %s of %s holds %q, %v", en.ID, en.Path, b, err)
		}
		if en.Decision.Op != "unlink" {
			t.Errorf("entry %s: op %q", en.Path, en.Decision.Op)
		}
	}
	want := "job_7d83f2a1/chk-40/_metadata,job_7d83f2a1/chk-40/x,job_7d83f2a1/shared/sst-gone,job_7d83f2a1/taskowned/t"
	if got := strings.Join(slices.Sorted(slices.Values(staged)), ","); got != want {
		t.Errorf("staged %s, want %s", got, want)
	}
	for _, f := range e.f.Files() {
		if strings.Contains(f, ".Trash") {
			t.Errorf("moved to the trash despite the quarantine: %s", f)
		}
	}

	// Truncation and rewrite stage the old content.
	for _, k := range []string{"t1", "t2"} {
		if err := e.f.Put(dir+"/"+k, []byte("old "+k), time.Now().Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Truncate(filepath.Join(e.mnt, "t1"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.mnt, "t2"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	for k, body := range map[string]string{"t1": "", "t2": "new"} {
		if b, err := e.f.ReadFile(dir + "/" + k); err != nil || string(b) != body {
			t.Errorf("%s holds %q, %v; want %q", k, b, err, body)
		}
		en, ok, err := quarantine.Find(ctx, a, k)
		if err != nil || !ok || en.Decision.Op != "truncate" {
			t.Errorf("%s: entry %+v %v %v", k, en, ok, err)
			continue
		}
		if b, _ := e.f.ReadFile(a.EntryPath(en.ID)); string(b) != "old "+k {
			t.Errorf("%s: staged %q", k, b)
		}
	}
}

// TestQuarantineRefusedLeavesNoRecord: a refused unlink leaves no record in the area.
func TestQuarantineRefusedLeavesNoRecord(t *testing.T) {
	e, a := setupQuarantined(t)
	e.incident(t)
	if err := os.Remove(filepath.Join(e.mnt, "job_7d83f2a1/shared/sst-ref")); err == nil {
		t.Fatal("a referenced file was deleted")
	}
	if left := strings.Join(filesUnder(e.f, a.Dir()), ","); left != "" {
		t.Errorf("left in the area: %s", left)
	}
}

func filesUnder(f *hdfsfake.FS, d string) []string {
	var out []string
	for _, k := range f.Files() {
		if strings.HasPrefix(k, d+"/") {
			out = append(out, k)
		}
	}
	return out
}
