package integration

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The pathological-case matrix of issue 29, part 3 (the rows are in docs/SEMANTICS.md, "Pathological
// store content"): each case on an --allow-other local mount with user nobody as the client.

// matrixStore is unprivStore with an unreferenced 10-day-old file elsewhere and a 1777 scratch
// folder; every folder is writable by everyone, so what nobody may not delete is refused by the
// guard, not by a folder's mode. The checkpoints stay root's (the Flink user).
func matrixStore(t *testing.T, prefix string) (base string, root string, ref string) {
	t.Helper()
	base, tr := unprivStore(t, prefix)
	if err := tr.Write("elsewhere/old-unreferenced", 100, time.Now().Add(-10*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(tr.Root, "scratch"), 0o777); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chmod", "-R", "a+rwX", tr.Root).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v %s", err, out)
	}
	if err := os.Chmod(filepath.Join(tr.Root, "scratch"), 0o1777); err != nil {
		t.Fatal(err)
	}
	return base, tr.Root, tr.Referenced()[0]
}

// elsewhereDecided checks the two facts every row shares: as nobody, the unreferenced old file
// elsewhere is deleted, the referenced file is refused.
func elsewhereDecided(t *testing.T, p *mntProc, ref, row string) {
	t.Helper()
	res := unprivAttempts(t, `
attempt("old", lambda: os.unlink(sys.argv[1]))
attempt("ref", lambda: os.unlink(sys.argv[2]))
`, p.m("elsewhere/old-unreferenced"), p.m(ref))
	if res["old"] != "OK" || res["ref"] != errnoOf(syscall.EPERM) {
		t.Errorf("%s: as nobody, unlink of the unreferenced old file elsewhere %s (want OK), of the referenced %s %s (want EPERM)\n%s",
			row, res["old"], ref, res["ref"], p.logText())
	}
}

// backdate sets the mtime of root/keys (no symlink followed) ten days back, beside the mount.
func backdate(t *testing.T, root string, keys ...string) {
	t.Helper()
	old := time.Now().Add(-10 * 24 * time.Hour)
	ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
	for _, k := range keys {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(root, k), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUnprivSpecialFilesNamedLikeCheckpoints: FIFOs, a unix socket (made by nobody through the mount)
// and character devices (made by root beside the mount: a user cannot make one) named `_metadata` and
// chk-N. Outcome: none is a checkpoint (no sync opens one for reading, so none can hang it: the walk
// lists only regular `_metadata`, the store opens with O_NONBLOCK and refuses what is not a regular
// file); no sync error, no unknown subtree, no bad `_metadata`; the rest of the store is decided as
// usual; each is protected by --grace while young like any new file, and removable by rm -rf once past
// it; `verify` exits 0 (nothing skipped).
func TestUnprivSpecialFilesNamedLikeCheckpoints(t *testing.T) {
	mntRequire(t)
	base, root, ref := matrixStore(t, "ckguard-matrix-special-")
	// Root's devices in a folder of nobody's (so nobody may remove them: the folder's mode decides).
	devDir := filepath.Join(root, "scratch", "dev", "chk-8")
	if err := os.MkdirAll(devDir, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"scratch/dev/chk-8/_metadata", "scratch/dev/chk-9"} {
		if err := unix.Mknod(filepath.Join(root, k), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatalf("mknod %s: %v", k, err)
		}
	}
	if out, err := exec.Command("chown", "-R", nobodyUID+":"+nobodyUID, filepath.Join(root, "scratch", "dev")).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	for _, k := range []string{"scratch/dev/chk-8/_metadata", "scratch/dev/chk-9"} {
		if err := os.Lchown(filepath.Join(root, k), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	p := sharedMount(t, base, root)
	got := unprivAttempts(t, `
import socket
os.makedirs(sys.argv[1] + "/scratch/fifo/chk-5")
os.makedirs(sys.argv[1] + "/scratch/sock/chk-6")
attempt("fifo_meta", lambda: os.mkfifo(sys.argv[1] + "/scratch/fifo/chk-5/_metadata"))
attempt("fifo_chk", lambda: os.mkfifo(sys.argv[1] + "/scratch/fifo/chk-7"))
s = socket.socket(socket.AF_UNIX)
attempt("sock_meta", lambda: s.bind(sys.argv[1] + "/scratch/sock/chk-6/_metadata"))
`, p.mnt)
	for _, k := range []string{"fifo_meta", "fifo_chk", "sock_meta"} {
		if got[k] != "OK" {
			t.Fatalf("making %s through the mount as nobody: %s\n%s", k, got[k], p.logText())
		}
	}
	specials := []string{"scratch/fifo/chk-5/_metadata", "scratch/fifo/chk-7", "scratch/sock/chk-6/_metadata",
		"scratch/dev/chk-8/_metadata", "scratch/dev/chk-9"}
	for _, k := range specials {
		if st, err := os.Lstat(filepath.Join(root, k)); err != nil || st.Mode().IsRegular() {
			t.Fatalf("%s in the store: %v %v", k, err, st)
		}
	}
	// waitSyncAfter fails after 30 s without a sync: a sync that opened a FIFO for reading would hang.
	waitSyncAfter(t, p, time.Now())
	waitSyncAfter(t, p, time.Now())
	s := p.stats()
	if s.SyncError != "" || len(s.UnknownSubtrees) != 0 || len(s.BadMetadata) != 0 || s.DamagedMetadata != 0 {
		t.Fatalf("stats with special files named _metadata/chk-N: sync error %q, unknown %+v, bad %+v\n%s",
			s.SyncError, s.UnknownSubtrees, s.BadMetadata, p.logText())
	}
	elsewhereDecided(t, p, ref, "special files")
	res := unprivAttempts(t, `attempt("young_fifo", lambda: os.unlink(sys.argv[1]))`, p.m("scratch/fifo/chk-5/_metadata"))
	if res["young_fifo"] != errnoOf(syscall.EPERM) {
		t.Errorf("unlink of the young FIFO named _metadata: %s, want EPERM (within --grace)", res["young_fifo"])
	}
	if out, code := p.cli("verify"); code != 0 {
		t.Errorf("verify with special files named _metadata: exit %d, want 0\n%s", code, out)
	}
	backdate(t, root, append(specials, "scratch/fifo/chk-5", "scratch/sock/chk-6", "scratch/dev/chk-8", "scratch/fifo", "scratch/sock", "scratch/dev")...)
	for _, d := range []string{"scratch/fifo", "scratch/sock", "scratch/dev"} {
		if out, code := asNobody(t, "rm", "-rf", p.m(d)); code != 0 {
			t.Errorf("rm -rf %s past --grace as nobody: exit %d\n%s\n%s", d, code, out, p.logText())
		}
		if _, err := os.Lstat(filepath.Join(root, d)); !os.IsNotExist(err) {
			t.Errorf("%s still in the store after rm -rf: %v", d, err)
		}
	}
	mustExist(t, root, ref)
}

// TestUnprivUnjudgeableMetadataScope: a `_metadata` ckguard cannot judge although a Flink might load
// it (over 128 MiB, sparse: never read; a format version newer than the parser's). Written by nobody,
// who owns no job folder, through the mount into the scratch folder: it refuses only deletions in its
// own folder (its old neighbour), stats lists it with scope "folder", the rest is decided as usual;
// nobody removes it through the mount (the cause is always removable) and the next sync clears it.
// Written by the job folder's owner (root, beside the mount, into the job's folder): the documented
// exception, every deletion in the store is refused (scope "store").
func TestUnprivUnjudgeableMetadataScope(t *testing.T) {
	mntRequire(t)
	newer := []byte("\x49\x60\x67\x2d\x00\x00\x00\x09\x00\x00\x00\x00\x00\x00\x00\x01")
	for _, tc := range []struct {
		name, class string
		size        int64  // sparse file of this size, else body
		body        []byte //
		owner       bool   // written by the job folder's owner beside the mount
	}{
		{name: "huge-nobody", class: "too-large", size: 200 << 20},
		{name: "newer-nobody", class: "newer-format", body: newer},
		{name: "huge-owner", class: "too-large", size: 200 << 20, owner: true},
		{name: "newer-owner", class: "newer-format", body: newer, owner: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, root, ref := matrixStore(t, "ckguard-matrix-scope-")
			p := sharedMount(t, base, root)
			bad, neighbour := "scratch/job/chk-3/_metadata", "scratch/job/chk-3/old-neighbour"
			if tc.owner {
				job := jobOf(ref)
				bad, neighbour = job+"/chk-999999/_metadata", job+"/chk-999999/old-neighbour"
			}
			if tc.owner {
				if err := os.MkdirAll(filepath.Join(root, filepath.Dir(bad)), 0o777); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(filepath.Join(root, filepath.Dir(bad)), 0o777); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, neighbour), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
				f, err := os.Create(filepath.Join(root, bad))
				if err != nil {
					t.Fatal(err)
				}
				f.Write(tc.body)
				if tc.size > 0 {
					f.Truncate(tc.size)
				}
				f.Close()
			} else if out, code := asNobody(t, "/usr/bin/python3", "-c", `
import os, sys
os.makedirs(os.path.dirname(sys.argv[2]))
open(sys.argv[4], "w").close()
with open(sys.argv[2], "wb") as dst:
    dst.write(bytes.fromhex(sys.argv[1]))
    if int(sys.argv[3]):  # sparse: one byte at the end (a growing truncate of a young file is refused)
        dst.seek(int(sys.argv[3]) - 1)
        dst.write(b"\0")
`, hex.EncodeToString(tc.body), p.m(bad), itoa(tc.size), p.m(neighbour)); code != 0 {
				t.Fatalf("writing %s as nobody: exit %d\n%s", bad, code, out)
			}
			backdate(t, root, neighbour)
			waitSyncAfter(t, p, time.Now())
			waitSyncAfter(t, p, time.Now())
			s := p.stats()
			scope := "folder"
			if tc.owner {
				scope = "store"
			}
			if len(s.BadMetadata) != 1 || s.BadMetadata[0].Metadata != bad || s.BadMetadata[0].Class != tc.class || s.BadMetadata[0].Scope != scope {
				t.Fatalf("stats: bad %+v, want %s of class %s refusing %s\n%s", s.BadMetadata, bad, tc.class, scope, p.logText())
			}
			res := unprivAttempts(t, `
attempt("old", lambda: os.unlink(sys.argv[1]))
attempt("ref", lambda: os.unlink(sys.argv[2]))
attempt("neighbour", lambda: os.unlink(sys.argv[3]))
`, p.m("elsewhere/old-unreferenced"), p.m(ref), p.m(neighbour))
			wantOld := "OK"
			if tc.owner {
				wantOld = errnoOf(syscall.EPERM)
			}
			if res["old"] != wantOld || res["ref"] != errnoOf(syscall.EPERM) || res["neighbour"] != errnoOf(syscall.EPERM) {
				t.Errorf("as nobody with %s (%s): unlink old elsewhere %s (want %s), referenced %s (want EPERM), its old neighbour %s (want EPERM)\n%s",
					bad, tc.class, res["old"], wantOld, res["ref"], res["neighbour"], p.logText())
			}
			if tc.owner {
				return // the owner's file refuses store-wide until removed beside the mount: the documented exception
			}
			backdate(t, root, bad)
			if out, code := asNobody(t, "rm", p.m(bad)); code != 0 {
				t.Fatalf("rm of its own unjudgeable %s as nobody: exit %d\n%s\n%s", bad, code, out, p.logText())
			}
			waitSyncAfter(t, p, time.Now())
			if s := p.stats(); len(s.BadMetadata) != 0 || s.ConfinedMetadata != 0 {
				t.Errorf("after its removal: bad %+v", s.BadMetadata)
			}
			if out, code := asNobody(t, "rm", "-rf", p.m("scratch/job")); code != 0 {
				t.Errorf("rm -rf of its folder once the cause is gone: exit %d\n%s", code, out)
			}
			mustExist(t, root, ref)
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// jobOf is the job folder of a file key by Flink's layout (above its last chk-N, shared or taskowned).
func jobOf(key string) string {
	segs := strings.Split(key, "/")
	for i := len(segs) - 1; i > 0; i-- {
		if s := segs[i]; s == "shared" || s == "taskowned" || strings.HasPrefix(s, "chk-") {
			return strings.Join(segs[:i], "/")
		}
	}
	return path.Dir(key)
}

// TestUnprivMetadataRewrittenWhileSyncing: nobody rewrites a `_metadata` in place through the mount,
// through one open descriptor, in a loop (a real Flink 1.20 one and as many zero bytes, alternately,
// written over each other in small pieces) for several syncs, so that syncs read it while it changes.
// (Truncating it is refused through the mount while it is young, --grace: shrinking mid-read is made
// beside the mount in refindex TestMetadataChangingWhileRead, which has the exact interleavings.)
// Outcome: no sync fails; a read during which it changed is discarded and read again; once the loop
// stops on the zeros it is listed as damaged (refusing only itself), the rest of the store is decided
// as usual, and its removal clears it at the next sync.
func TestUnprivMetadataRewrittenWhileSyncing(t *testing.T) {
	mntRequire(t)
	real := realFlinkMetadata(t)
	base, root, ref := matrixStore(t, "ckguard-matrix-changing-")
	p := sharedMount(t, base, root)
	bad := "scratch/job/chk-4/_metadata"
	done := make(chan struct{})
	var out string
	var code int
	go func() {
		defer close(done)
		out, code = asNobody(t, "/usr/bin/python3", "-c", `
import os, sys, time
full = bytes.fromhex(sys.argv[1]); junk = bytes(len(full))
os.makedirs(os.path.dirname(sys.argv[2]))
end = time.time() + float(sys.argv[3])
n = 0
with open(sys.argv[2], "wb") as f:
    while time.time() < end:
        for b in (full, junk):
            f.seek(0)
            for i in range(0, len(b), 512):
                f.write(b[i:i+512]); f.flush()
            os.fsync(f.fileno())
            n += 1
print("rewrites", n)
`, hex.EncodeToString(real), p.m(bad), "5")
	}()
	deadline := time.Now().Add(60 * time.Second)
	syncs := 0
	last := time.Time{}
loop:
	for {
		select {
		case <-done:
			break loop
		default:
		}
		s := p.stats()
		if s.SyncError != "" {
			t.Errorf("a sync failed while %s was rewritten: %s", bad, s.SyncError)
		}
		if s.LastSync.After(last) {
			syncs++
			last = s.LastSync
		}
		if time.Now().After(deadline) {
			t.Fatal("the rewrite loop did not end")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != 0 {
		t.Fatalf("the rewrite loop as nobody: exit %d\n%s\n%s", code, out, p.logText())
	}
	t.Logf("%s; %d syncs seen during the loop", strings.TrimSpace(out), syncs)
	if syncs < 3 {
		t.Errorf("only %d syncs during the rewrite loop", syncs)
	}
	waitSyncAfter(t, p, time.Now())
	waitSyncAfter(t, p, time.Now())
	s := p.stats()
	if s.SyncError != "" || len(s.BadMetadata) != 1 || s.BadMetadata[0].Metadata != bad || s.BadMetadata[0].Scope != "itself" {
		t.Fatalf("after the loop stopped on the zeros: sync error %q, bad %+v\n%s", s.SyncError, s.BadMetadata, p.logText())
	}
	elsewhereDecided(t, p, ref, "after the rewrite loop")
	backdate(t, root, bad)
	if out, code := asNobody(t, "rm", "-rf", p.m("scratch/job")); code != 0 {
		t.Errorf("rm -rf of the rewritten checkpoint folder as nobody: exit %d\n%s", code, out)
	}
	waitSyncAfter(t, p, time.Now())
	if s := p.stats(); len(s.BadMetadata) != 0 {
		t.Errorf("after its removal: bad %+v", s.BadMetadata)
	}
}
