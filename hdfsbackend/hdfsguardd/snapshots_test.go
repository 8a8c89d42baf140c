//go:build hdfs

package hdfsguardd_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/lostfound"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsguardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfssnap"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
)

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// ckguardCLI builds the ckguard command once per test binary.
func ckguardCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ckguard-hdfssnap-bin-")
		if err != nil {
			cliErr = err
			return
		}
		cliPath = filepath.Join(dir, "ckguard")
		out, err := exec.Command("go", "build", "-o", cliPath, "github.com/ckguard/ckguard/cmd/ckguard").CombinedOutput()
		if err != nil {
			cliErr = err
			t.Logf("%s", out)
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliPath
}

// ourSnapshots lists the ckguard snapshots of dir, newest first.
func ourSnapshots(t *testing.T, cl hdfsclient.FS, dir string) []string {
	t.Helper()
	snaps, err := hdfssnap.List(context.Background(), cl, dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range snaps {
		if s.Ours {
			out = append(out, s.Name)
		}
	}
	return out
}

func waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
	}
}

// TestHDFSSnapshotsRestoreLost: --hold required on a MiniDFSCluster. The mount makes the store root
// snapshottable and takes a ckguard snapshot; `hdfs dfs -rm -skipTrash` of a referenced file beside the
// mount is found by the loss check; a new checkpoint then gets a new snapshot (without the file) while
// the older one, the only one holding it, is kept; `ckguard restore-lost` lists the file from that
// snapshot, `--apply` copies it back (audited) and the file reads through the mount byte-identical, as
// Flink reads it; verify is green; then the older snapshot, needed no more, is deleted.
func TestHDFSSnapshotsRestoreLost(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := minidfs.Start(t, minidfs.Options{})
	tr, uri := incident(t, c)
	storeDir := c.Root() + "/store"
	su, _ := c.DialSuperuser(t, storeDir)
	dir := t.TempDir()
	pol := refindex.DefaultPolicy()
	mnt, _ := guardMount(t, dir, guardd.Config{StoreDir: uri, Policy: pol, Hold: "required", SyncInterval: time.Second}, opts)
	index := filepath.Join(dir, "index")
	waitFor(t, "a first ckguard snapshot", 60*time.Second, func() bool { return len(ourSnapshots(t, su, storeDir)) == 1 })
	first := ourSnapshots(t, su, storeDir)[0]

	ref := tr.Referenced()[0]
	want, err := os.ReadFile(filepath.Join(tr.Root, filepath.FromSlash(ref)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DFS(t, "-rm", "-skipTrash", uri+"/"+ref); err != nil {
		t.Fatal(err)
	}
	auditLog := filepath.Join(index, "audit.jsonl")
	waitFor(t, "the loss check finding "+ref, 60*time.Second, func() bool {
		recs, _ := audit.ReadFile(auditLog)
		for _, r := range recs {
			if r.Op == "loss-check" && r.Path == ref {
				return true
			}
		}
		return false
	})

	// A new checkpoint (a copy of another live checkpoint's folder, its private files first): a new
	// snapshot, without ref.
	var meta string
	for m := range tr.Live {
		if filepath.Dir(m) != filepath.Dir(ref) {
			meta = m
			break
		}
	}
	copyCheckpoint(t, su, storeDir, tr, meta, "chk-999999")
	waitFor(t, "a second ckguard snapshot after the new checkpoint", 60*time.Second, func() bool { return len(ourSnapshots(t, su, storeDir)) >= 2 })
	// Several syncs and loss passes later the first snapshot, the only one holding ref, is still there.
	time.Sleep(6 * time.Second)
	if s := ourSnapshots(t, su, storeDir); s[len(s)-1] != first {
		t.Fatalf("snapshot %s, the only one holding missing %s, was deleted: %v", first, ref, s)
	}

	cli := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(ckguardCLI(t), append(args, "--store", uri, "--index", index)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return out.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), 0
	}
	out, code := cli("restore-lost")
	if code != 0 || !strings.Contains(out, ref+": would restore snapshot "+first) {
		t.Fatalf("restore-lost (dry run): exit %d, want 0 naming %s in snapshot %s\n%s", code, ref, first, out)
	}
	if _, err := su.Stat(context.Background(), hdfsclient.Join(storeDir, ref)); err == nil {
		t.Fatal("the dry run restored")
	}
	out, code = cli("restore-lost", "--apply")
	if code != 0 || !strings.Contains(out, "verify after the restore: OK") {
		t.Fatalf("restore-lost --apply: exit %d\n%s", code, out)
	}
	t.Logf("restore-lost --apply:\n%s", out)
	got, err := os.ReadFile(filepath.Join(mnt, filepath.FromSlash(ref)))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s through the mount after the restore: %d bytes, %v; want the original %d bytes", ref, len(got), err, len(want))
	}
	recs, err := audit.ReadFile(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Op == lostfound.AuditOp && r.Path == ref && r.Decision == lostfound.AuditRestored {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d restore-lost audit records for %s, want 1", n, ref)
	}
	if out, code := cli("verify"); code != 0 {
		t.Errorf("verify after the restore: exit %d\n%s", code, out)
	}
	waitFor(t, "the first snapshot deleted once nothing it holds is needed", 60*time.Second, func() bool {
		for _, s := range ourSnapshots(t, su, storeDir) {
			if s == first {
				return false
			}
		}
		return true
	})
	if s := ourSnapshots(t, su, storeDir); len(s) != 1 {
		t.Errorf("snapshots left: %v, want the newest only", s)
	}
}

// copyCheckpoint writes a new checkpoint chk (a sibling folder of meta's) with the files of meta's
// folder, its private files first and its _metadata last, as Flink completes one.
func copyCheckpoint(t *testing.T, su *hdfsclient.Client, storeDir string, tr *treegen.Tree, meta, chk string) {
	t.Helper()
	src := filepath.ToSlash(filepath.Dir(meta))
	dst := filepath.ToSlash(filepath.Join(filepath.Dir(src), chk))
	var files []string
	for k := range tr.Files {
		if strings.HasPrefix(k, src+"/") && k != meta {
			files = append(files, k)
		}
	}
	for _, k := range append(files, meta) {
		r, err := su.Open(context.Background(), hdfsclient.Join(storeDir, k))
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, r.Size())
		if _, err := r.ReadAt(b, 0); err != nil && len(b) > 0 {
			t.Fatal(err)
		}
		r.Close()
		minidfs.WriteFile(t, su, hdfsclient.Join(storeDir, dst+strings.TrimPrefix(k, src)), string(b))
	}
}

// TestHDFSHoldRequiredRefusesWithoutSnapshots: a mount whose user can neither make the store root
// snapshottable nor snapshot it (not the superuser, not the owner) refuses --hold required, naming
// the administrator's command.
func TestHDFSHoldRequiredRefusesWithoutSnapshots(t *testing.T) {
	c := minidfs.Start(t, minidfs.Options{})
	_, uri := incident(t, c)
	t.Setenv("HADOOP_USER_NAME", minidfs.Other)
	dir := t.TempDir()
	cfg := guardd.Config{StoreDir: uri, IndexDir: filepath.Join(dir, "index"), Mountpoint: filepath.Join(dir, "mnt"),
		Policy: refindex.DefaultPolicy(), Hold: "required"}
	if err := os.Mkdir(cfg.Mountpoint, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := hdfsguardd.Run(ctx, cfg, opts)
	if err == nil || !strings.Contains(err.Error(), "--hold required") || !strings.Contains(err.Error(), "dfsadmin -allowSnapshot") {
		t.Fatalf("--hold required without snapshot rights: %v; want a refusal naming hdfs dfsadmin -allowSnapshot", err)
	}
	t.Logf("refused: %v", err)
}
