package guardd_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/internal/fusetest"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestMountQuarantine runs rm -rf of the live job through a mount with a wrong policy (no grace, no
// active window) and a quarantine: every file it let go is staged, not destroyed, and hidden from the
// mount; a purge before the TTL is refused with the time left; a restored _metadata is indexed at once
// (its files are referenced again), and those files are never purged, even past the TTL, while the
// rest is.
func TestMountQuarantine(t *testing.T) {
	fusetest.Require(t)
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	tr, err := treegen.IncidentOne(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	clk := guarddtest.NewClock(time.Now())
	pol := guarddtest.ReferencesOnly()
	var ctlSock string
	runDaemon(t, guardd.Config{StoreDir: tr.Root, IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
		Policy: pol, SyncInterval: 100 * time.Millisecond, Quarantine: 24 * time.Hour, QuarantineNow: clk.Now,
		Ready: func(m *guardd.Mounted) { ctlSock = m.ControlSocket }})
	job := "flink-checkpoints/" + treegen.IncidentOneNewJob
	before := storeFiles(t, tr.Root)
	if out, err := exec.Command("rm", "-rf", filepath.Join(mnt, job)).CombinedOutput(); err != nil {
		t.Fatalf("rm -rf %s through the mount: %v\n%s", job, err, out)
	}
	after := storeFiles(t, tr.Root)
	q, err := control.DialQuarantine(guardd.QuarantineSocket(ctlSock))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	l, err := q.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	staged := map[string]quarantine.Entry{}
	for _, e := range l.Entries {
		staged[e.Path] = e
	}
	for k, size := range before {
		_, kept := after[k]
		e, inQ := staged[k]
		switch {
		case kept && inQ:
			t.Errorf("%s both at its path and in quarantine", k)
		case !kept && !inQ:
			t.Errorf("%s deleted, not staged", k)
		case inQ && e.Size != size:
			t.Errorf("%s staged with size %d, was %d", k, e.Size, size)
		}
	}
	if len(staged) == 0 || len(staged) != len(before)-len(after) {
		t.Fatalf("%d entries for %d files gone", len(staged), len(before)-len(after))
	}

	// The folder cannot be seen or touched through the mount.
	ents, _ := os.ReadDir(mnt)
	for _, e := range ents {
		if e.Name() == store.QuarantineDir {
			t.Errorf("the mount lists %s", store.QuarantineDir)
		}
	}
	area := filepath.Join(mnt, store.QuarantineDir)
	for _, tc := range []struct {
		what string
		err  error
		want syscall.Errno
	}{
		{"lstat", func() error { _, err := os.Lstat(area); return err }(), syscall.ENOENT},
		{"lstat below", func() error { _, err := os.Lstat(filepath.Join(area, l.Entries[0].ID)); return err }(), syscall.ENOENT},
		{"mkdir", os.Mkdir(area, 0o755), syscall.EPERM},
		{"create", func() error { _, err := os.Create(area); return err }(), syscall.EPERM},
		{"symlink", os.Symlink("/", area), syscall.EPERM},
		{"rename onto", os.Rename(filepath.Join(mnt, "flink-checkpoints"), area), syscall.EPERM},
		{"unlink", os.Remove(area), syscall.ENOENT},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s %s through the mount: %v, want %v", tc.what, store.QuarantineDir, tc.err, tc.want)
		}
	}

	// Young entries are never purged; the refusal says how long they have left.
	r, err := q.Purge(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Purged) != 0 || len(r.Kept) != len(staged) || r.Kept[0].Reason != "young" || time.Duration(r.Kept[0].Left) <= 23*time.Hour {
		t.Fatalf("purge before the TTL: %+v", r)
	}

	// Restore one checkpoint's _metadata: it is live again at once, so the files it references, still
	// staged, are referenced again.
	entries := make([]quarantine.Entry, 0, len(staged))
	for _, e := range staged {
		entries = append(entries, e)
	}
	_, referenced := guarddtest.RestoreMetadataLive(t, ctx, q, ctlSock, entries, "/chk-100274/_metadata")
	// The loss check after the next sync names a missing file, and that it is in quarantine and how to
	// restore it.
	var lossMsg string
	for deadline := time.Now().Add(60 * time.Second); lossMsg == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		recs, _ := audit.ReadFile(filepath.Join(dir, "index", "audit.jsonl"))
		for _, r := range recs {
			if r.Op == "loss-check" && referenced[r.Path] {
				lossMsg = r.Message
			}
		}
	}
	if !strings.Contains(lossMsg, "in quarantine since") || !strings.Contains(lossMsg, "ckguard quarantine restore") {
		t.Errorf("loss check record for a staged file: %q, want it to say it is in quarantine and how to restore it", lossMsg)
	}

	// Past the TTL the background purge takes everything else, never what the restored checkpoint
	// references.
	clk.Add(25 * time.Hour)
	deadline := time.Now().Add(60 * time.Second)
	for {
		l, err = q.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Entries) <= len(referenced) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(l.Entries) != len(referenced) {
		t.Fatalf("after the TTL %d entries left, want the %d the restored checkpoint references", len(l.Entries), len(referenced))
	}
	for _, e := range l.Entries {
		if !referenced[e.Path] {
			t.Errorf("%s left in quarantine past the TTL, unreferenced", e.Path)
		}
	}
	r, err = q.Purge(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Purged) != 0 || len(r.Kept) == 0 || r.Kept[0].Reason != "referenced" {
		t.Fatalf("purge of referenced entries: %+v", r)
	}
}

// storeFiles maps every file of the store (outside the quarantine folder) to its size.
func storeFiles(t *testing.T, root string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && rel == store.QuarantineDir {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			out[filepath.ToSlash(rel)] = fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
