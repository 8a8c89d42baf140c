package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestUnprivRestoreMetadataFollowsNoSymlink: a checkpoint folder was deleted outside the mount (an
// `rm -rf` on the store); the index's history keeps its `_metadata`. Before the operator (root) restores
// it, an unprivileged user who owns the job folder puts a symlink at the checkpoint folder's name through
// the --allow-other mount, pointing at another job's checkpoint in flight. The restore, run by the mount
// as root, must fail and write nothing there: following the link would give that job a `_metadata` it
// never wrote (a fake newest checkpoint, and Flink's own commit of it would fail).
func TestUnprivRestoreMetadataFollowsNoSymlink(t *testing.T) {
	mntRequire(t)
	base, tr := unprivStore(t, "ckguard-unpriv-restore-")
	nobodyOwns(t, tr.Root)
	// The other job's checkpoint Flink is writing: root's, no _metadata yet.
	victim := "victimjob/chk-999"
	if err := os.MkdirAll(filepath.Join(tr.Root, victim), 0o755); err != nil {
		t.Fatal(err)
	}
	p := sharedMount(t, base, tr.Root)
	// The newest checkpoint (of any job).
	var cp *treegen.Checkpoint
	for _, c := range tr.Live {
		if !c.Savepoint && (cp == nil || c.ID > cp.ID || c.ID == cp.ID && c.Metadata > cp.Metadata) {
			cp = c
		}
	}
	chk := path.Dir(cp.Metadata)
	// Deleted outside the mount, then seen gone by a sync (the history marks it retired).
	if err := os.RemoveAll(filepath.Join(tr.Root, filepath.FromSlash(chk))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		out, code := p.cli("checkpoints", "--history", "--json")
		var r refindex.HistoryResult
		if code == 0 && json.Unmarshal([]byte(out), &r) == nil && retiredWithCopy(r, cp.Metadata) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not retired with a copy in the history after a minute:\n%s", cp.Metadata, out)
		}
		time.Sleep(300 * time.Millisecond)
	}
	// The user's symlink, made through the mount in their own job folder.
	target := strings.Repeat("../", strings.Count(chk, "/")) + victim
	if out, code := asNobody(t, "ln", "-s", target, p.m(chk)); code != 0 {
		t.Fatalf("ln -s as uid %s through the mount: exit %d\n%s", nobodyUID, code, out)
	}
	out, code := p.cli("restore-metadata", chk)
	if code == 0 {
		t.Errorf("restore-metadata through a symlinked checkpoint folder succeeded:\n%s", out)
	}
	if _, err := os.Lstat(filepath.Join(tr.Root, victim, "_metadata")); err == nil {
		t.Fatalf("restore-metadata followed the user's symlink and wrote %s/_metadata", victim)
	}
	if ents, _ := os.ReadDir(filepath.Join(tr.Root, victim)); len(ents) != 0 {
		t.Errorf("the other job's checkpoint folder holds %v after the restore", ents)
	}
	// With the symlink gone the same restore works: the refusal was the link's.
	if err := os.Remove(filepath.Join(tr.Root, filepath.FromSlash(chk))); err != nil {
		t.Fatal(err)
	}
	if out, code := p.cli("restore-metadata", chk); code != 0 {
		t.Fatalf("restore-metadata after removing the symlink: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(tr.Root, filepath.FromSlash(cp.Metadata))); err != nil {
		t.Fatalf("restored _metadata: %v", err)
	}
}

func retiredWithCopy(r refindex.HistoryResult, key string) bool {
	for _, e := range r.Entries {
		if e.Metadata == key && !e.Retired.IsZero() && e.SHA256 != "" {
			return true
		}
	}
	return false
}

// TestUnprivQuarantineRestoreFollowsNoSymlink: an unprivileged user deletes a file of their own through
// the --allow-other mount (it is staged), removes its folder and puts a symlink at the folder's name,
// pointing at another job's checkpoint in flight; then the operator (root) restores the file. The
// restore, run by the mount as root, must fail, write nothing through the link and keep the entry; once
// the link is gone the same restore puts the file back, the user's again.
func TestUnprivQuarantineRestoreFollowsNoSymlink(t *testing.T) {
	mntRequire(t)
	base, tr := unprivStore(t, "ckguard-unpriv-qrestore-")
	nobodyOwns(t, tr.Root)
	victim := "victimjob/chk-999"
	if err := os.MkdirAll(filepath.Join(tr.Root, victim), 0o755); err != nil {
		t.Fatal(err)
	}
	p := sharedMount(t, base, tr.Root, "--grace", "0s")
	var job string
	for _, c := range tr.Live {
		job = c.Job
		break
	}
	dir := path.Join(job, "scratch")
	file := path.Join(dir, "notes")
	script := `set -e; mkdir "$1"; echo mine > "$1/notes"; rm "$1/notes"; rmdir "$1"; ln -s "$2" "$1"`
	target := strings.Repeat("../", strings.Count(dir, "/")) + victim
	if out, code := asNobody(t, "sh", "-c", script, "sh", p.m(dir), target); code != 0 {
		t.Fatalf("the user's steps through the mount: exit %d\n%s", code, out)
	}
	es := qList(t, p)
	var id string
	for _, e := range es {
		if e.Path == file {
			id = e.ID
		}
	}
	if id == "" {
		t.Fatalf("%s not staged: %v", file, es)
	}
	out, code := qcli(p, "restore", file)
	t.Logf("restore through the symlink: exit %d\n%s", code, out)
	if code == 0 {
		t.Errorf("quarantine restore through a symlinked folder succeeded:\n%s", out)
	}
	if ents, _ := os.ReadDir(filepath.Join(tr.Root, victim)); len(ents) != 0 {
		t.Fatalf("the restore followed the user's symlink: %s holds %v", victim, ents)
	}
	found := false
	for _, e := range qList(t, p) {
		found = found || e.ID == id
	}
	if !found {
		t.Fatalf("entry %s gone after the refused restore", id)
	}
	if err := os.Remove(filepath.Join(tr.Root, filepath.FromSlash(dir))); err != nil {
		t.Fatal(err)
	}
	if out, code := qcli(p, "restore", file); code != 0 {
		t.Fatalf("restore after removing the symlink: exit %d\n%s", code, out)
	}
	fi, err := os.Stat(filepath.Join(tr.Root, filepath.FromSlash(file)))
	if err != nil {
		t.Fatalf("restored file: %v", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || fmt.Sprint(st.Uid) != nobodyUID {
		t.Errorf("restored %s: owner %v, want %s", file, fi.Sys(), nobodyUID)
	}
	if di, err := os.Stat(filepath.Join(tr.Root, filepath.FromSlash(dir))); err == nil {
		if st, ok := di.Sys().(*syscall.Stat_t); !ok || fmt.Sprint(st.Uid) != nobodyUID {
			t.Errorf("folder %s the restore made: owner %v, want %s", dir, di.Sys(), nobodyUID)
		}
	}
}
