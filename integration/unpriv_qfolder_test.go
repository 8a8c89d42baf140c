package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ckguard/ckguard/refindex/store"
)

// TestUnprivPlantedQuarantineFolder: the Flink user owns the store root (as Flink's checkpoint
// directory usually is) and makes the quarantine folder before root's first mount, with an entry whose
// record names another job's folder. The mount must refuse to start on it (it would stage every
// deletion into a folder that user controls, and restore as root what the user's records say), and so
// must the quarantine commands without a mount; nothing of the planted entry reaches the other job.
// Once the operator moved the folder out, the mount makes its own and stages into it.
func TestUnprivPlantedQuarantineFolder(t *testing.T) {
	mntRequire(t)
	base, tr := unprivStore(t, "ckguard-unpriv-qfolder-")
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(tr.Root, "victimjob")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	nobodyOwns(t, tr.Root)
	if err := os.Chown(victim, 0, 0); err != nil { // another user's job: the Flink user cannot write it
		t.Fatal(err)
	}
	q := filepath.Join(tr.Root, store.QuarantineDir)
	script := `set -e; mkdir -m 0700 "$1"; echo planted > "$1/1-a"; printf '%s\n' '{"id":"1-a","path":"victimjob/chk-1/_metadata","size":8}' > "$1/entries.jsonl"`
	if out, code := asNobody(t, "sh", "-c", script, "sh", q); code != 0 {
		t.Fatalf("planting the folder as uid %s: exit %d\n%s", nobodyUID, code, out)
	}
	mnt := filepath.Join(base, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(base, "index")
	out, code := mntRun(t, "", mntBinary(t), "mount", "--store", tr.Root, "--index", index, "--allow-other", "--quarantine", "24h", mnt)
	if code == 0 {
		_, _ = mntRun(t, "", mntBinary(t), "umount", mnt)
		t.Fatalf("the mount started on a quarantine folder the Flink user made:\n%s", out)
	}
	if !strings.Contains(out, store.QuarantineDir) || !strings.Contains(out, "owned by uid "+nobodyUID) {
		t.Errorf("the refusal does not name the folder and its owner:\n%s", out)
	}
	for _, args := range [][]string{{"list"}, {"restore", "victimjob/chk-1/_metadata"}} {
		out, code := mntRun(t, "", mntBinary(t), append(append([]string{"quarantine"}, args...), "--store", tr.Root, "--index", index)...)
		if code == 0 {
			t.Errorf("quarantine %v on the planted folder succeeded:\n%s", args, out)
		}
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Fatalf("the planted entry reached the other job's folder: %v", ents)
	}
	// The operator moves it out; the mount then makes its own folder and stages into it.
	if err := os.Rename(q, filepath.Join(base, "planted")); err != nil {
		t.Fatal(err)
	}
	p := sharedMount(t, base, tr.Root, "--quarantine", "24h", "--grace", "0s")
	mntRun(t, "", "rm", "-rf", p.m(tr.Purge))
	fi, err := os.Stat(q)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 || fi.Mode().Perm() != 0o700 {
		t.Errorf("the mount's folder: mode %v, %+v; want root's, 0700", fi.Mode(), fi.Sys())
	}
	if len(qList(t, p)) == 0 {
		t.Errorf("nothing staged by rm -rf %s", tr.Purge)
	}
}
