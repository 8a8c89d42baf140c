package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
	"github.com/ckguard/ckguard/refindex/treegen"
	"golang.org/x/sys/unix"
)

// TestMountLaunderingFromPrecreatedJobFolder: a job folder's name can be known before the job runs
// (application mode without HA gives every job the id 000…0; a resubmitted job keeps its id). A user who
// can write in the checkpoint base folder creates it first, so it is theirs; Flink's JobManager then
// writes its checkpoints into it. A throw-away `_metadata` of that user's, anywhere in the job folder,
// names the young files of the checkpoint Flink is writing and is deleted again: those files must keep
// --grace.
func TestMountLaunderingFromPrecreatedJobFolder(t *testing.T) {
	mntRequire(t)
	base, err := os.MkdirTemp("", "ckguard-policy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	tr, inflight := policyTree(t, filepath.Join(base, "store"), time.Now())
	// The job folder was created by uid 65534 before the job started; everything in it is Flink's.
	if err := os.Lchown(filepath.Join(tr.Root, policyJob), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	src := foreignMetadata(t, tr.Root, 1, inflight)
	p := sharedMount(t, base, tr.Root)
	laundry := policyJob + "/laundry"
	for _, argv := range [][]string{
		{"mkdir", "-p", p.m(laundry)},
		{"cp", src, p.m(laundry + "/_metadata")},
		{"rm", p.m(laundry + "/_metadata")},
		{"rmdir", p.m(laundry)},
	} {
		if out, code := asNobody(t, argv[0], argv[1:]...); code != 0 {
			t.Fatalf("uid %s: %v: %s", nobodyUID, argv, out)
		}
	}
	for _, k := range inflight {
		if out, code := mntRun(t, "", "rm", "-f", p.m(k)); code == 0 {
			t.Errorf("rm of in-flight %s succeeded after the laundering from a job folder the launderer owns", k)
		} else if !strings.Contains(out, "Operation not permitted") {
			t.Errorf("rm %s: %s, want EPERM", k, out)
		}
	}
	mustExist(t, tr.Root, inflight...)
	p.stop()
}

// savepointStore is the savepoint tree of TestMountSavepointsSurviveFindDelete below base: job 4f1a2b's
// savepoints in savepoints/ (40 and 30 days old, the 30-day one its newest) and job abcdef's beside its
// checkpoints (60 and 10 days old).
func savepointStore(t *testing.T, root string, now time.Time) *treegen.Tree {
	t.Helper()
	day := 24 * time.Hour
	tr, err := treegen.SavepointsRelative(root, now)
	if err != nil {
		t.Fatal(err)
	}
	job2 := "flink/abcdef0123456789abcdef0123456789"
	for _, sp := range []struct {
		dir string
		age time.Duration
	}{
		{job2 + "/savepoint-abcdef-111111111111", 60 * day},
		{job2 + "/savepoint-abcdef-222222222222", 10 * day},
	} {
		c, err := tr.Checkpoint(treegen.Spec{Dir: sp.dir, ID: 7, Savepoint: true, Completed: now.Add(-sp.age),
			Private: []string{flinkmeta.UUID(sp.dir + "/a"), flinkmeta.UUID(sp.dir + "/b")}})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Data(c, now.Add(-sp.age-time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

// TestMountForgedNewerSavepoint: another user puts a name for a newer savepoint `_metadata` of the
// Flink user (job abcdef's 10-day-old one) into a savepoint-4f1a2b-… folder of its own beside job 4f1a2b's
// savepoints: by a hard link (the kernel allows it for a file the user may write: Flink run with umask 0)
// or by a symlink. Job 4f1a2b's real newest savepoint (30 days, beyond --savepoint-retention) must stay
// its newest: `find -mtime +7 -delete` keeps it and its files.
func TestMountForgedNewerSavepoint(t *testing.T) {
	mntRequire(t)
	real := "savepoints/savepoint-4f1a2b-9f8e7d6c5b4a/_metadata"
	donor := "flink/abcdef0123456789abcdef0123456789/savepoint-abcdef-222222222222/_metadata"
	forged := "savepoints/savepoint-4f1a2b-ffffffffffff"
	for _, how := range []string{"hardlink-0644", "hardlink-0666", "symlink"} {
		t.Run(how, func(t *testing.T) {
			base, err := os.MkdirTemp("", "ckguard-policy-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			tr := savepointStore(t, filepath.Join(base, "store"), time.Now())
			if err := os.Chmod(filepath.Join(tr.Root, "savepoints"), 0o777); err != nil {
				t.Fatal(err)
			}
			if how == "hardlink-0666" {
				if err := os.Chmod(filepath.Join(tr.Root, donor), 0o666); err != nil {
					t.Fatal(err)
				}
			}
			p := sharedMount(t, base, tr.Root)
			if out, code := asNobody(t, "mkdir", p.m(forged)); code != 0 {
				t.Fatalf("mkdir: %s", out)
			}
			var argv []string
			if how == "symlink" {
				argv = []string{"ln", "-s", "../../" + donor, p.m(forged + "/_metadata")}
			} else {
				argv = []string{"ln", p.m(donor), p.m(forged + "/_metadata")}
			}
			out, code := asNobody(t, argv[0], argv[1:]...)
			t.Logf("%v: exit %d %s", argv, code, out)
			if code == 0 && how != "symlink" {
				// A link named _metadata is indexed before it returns.
				waitIndexed(t, p, forged+"/_metadata")
			}
			waitSyncAfter(t, p, time.Now())
			for _, r := range p.auditRecords() {
				t.Logf("audit: %s %s %s %s", r.Decision, r.Reason, r.Op, r.Path)
			}
			mntRun(t, "", "find", p.mnt, "-mtime", "+7", "-delete")
			why, _ := p.cli("why", real)
			p.stop()
			mustExist(t, tr.Root, real)
			mustExist(t, tr.Root, tr.Live[real].Refs...)
			if t.Failed() {
				t.Logf("why %s:\n%s", real, why)
			}
		})
	}
}

// waitSyncAfter waits until a sync of the mount's index that started after since has completed.
func waitSyncAfter(t *testing.T, p *mntProc, since time.Time) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := p.cli("stats", "--json")
		var s struct {
			LastSync time.Time `json:"last_sync"`
		}
		if err := json.Unmarshal([]byte(out), &s); err == nil && s.LastSync.After(since) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sync after %s within 30s:\n%s", since, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestMountSavepointsOfJobsSharingPrefix: every job submitted in application mode without HA has the job
// id 00000000000000000000000000000000, so all their savepoints in a common state.savepoints.dir are named
// savepoint-000000-…. Each job's only savepoint (35 and 40 days old, beyond --savepoint-retention) is
// the one someone would restore that job from; `find -mtime +7 -delete` must keep both.
func TestMountSavepointsOfJobsSharingPrefix(t *testing.T) {
	mntRequire(t)
	now := time.Now()
	day := 24 * time.Hour
	tr, err := treegen.YoungOrphan(filepath.Join(t.TempDir(), "store"), now)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, sp := range []struct {
		dir string
		age time.Duration
	}{
		{"savepoints/savepoint-000000-aaaaaaaaaaaa", 40 * day}, // job "orders", its only savepoint
		{"savepoints/savepoint-000000-bbbbbbbbbbbb", 35 * day}, // job "payments", its only savepoint
	} {
		c, err := tr.Checkpoint(treegen.Spec{Dir: sp.dir, ID: 3, Savepoint: true, Completed: now.Add(-sp.age),
			Private: []string{flinkmeta.UUID(sp.dir + "/a")}})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Data(c, now.Add(-sp.age-time.Minute)); err != nil {
			t.Fatal(err)
		}
		keep = append(keep, c.Metadata)
		keep = append(keep, c.Refs...)
	}
	p := mntStart(t, tr.Root, "")
	mntRun(t, "", "find", p.mnt, "-mtime", "+7", "-delete")
	p.stop()
	mustExist(t, tr.Root, keep...)
}

// flinkUID is the Flink user of TestMountUnprivilegedDaemon: it owns the store and runs the mount.
const flinkUID = 1000

// TestMountUnprivilegedDaemon: the mount run by the Flink user itself (an unprivileged mount with
// --allow-other and user_allow_other, as documented), not by root. Another user (uid 65534) writes through
// the mount into a job folder it may write: a fake chk-<newest+1>/_metadata, and a throw-away `_metadata`
// naming the young files of the checkpoint Flink is writing, then deleted. The owner rules must still
// tell that user's files from the Flink user's: the real newest checkpoint stays protected and the
// in-flight files keep --grace.
func TestMountUnprivilegedDaemon(t *testing.T) {
	mntRequire(t)
	for _, tc := range []struct{ attack, how string }{
		{"fake-newest", "create"}, {"fake-newest", "rename"}, {"fake-newest", "link"},
		{"laundering", "create"}, {"laundering", "rename"},
	} {
		attack, how := tc.attack, tc.how
		t.Run(attack+"-"+how, func(t *testing.T) {
			base, err := os.MkdirTemp("", "ckguard-policy-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			tr, inflight := policyTree(t, filepath.Join(base, "store"), time.Now())
			if out, code := mntRun(t, "", "chown", "-R", "1000:1000", base); code != 0 {
				t.Fatal(out)
			}
			if err := os.Chmod(base, 0o700); err != nil {
				t.Fatal(err)
			}
			// The daemon's binary must be reachable for the Flink user.
			if err := os.Chmod(filepath.Dir(mntBinary(t)), 0o755); err != nil {
				t.Fatal(err)
			}
			mdir := readableDir(t)
			p := &mntProc{t: t, store: tr.Root, index: filepath.Join(base, "index"), mnt: filepath.Join(mdir, "mnt"),
				log: filepath.Join(mdir, "mount.log"), cred: &syscall.Credential{Uid: flinkUID, Gid: flinkUID},
				// fusermount3 cannot open /dev/fuse in this container: the daemon mounts itself (CAP_SYS_ADMIN)
				// and opens /dev/fuse (CAP_DAC_OVERRIDE), but runs as the Flink user like an unprivileged mount.
				caps: []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_DAC_OVERRIDE}}
			p.audit, p.sock = filepath.Join(p.index, "audit.jsonl"), filepath.Join(p.index, "ckguard.sock")
			if err := os.Mkdir(p.mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(p.mnt, flinkUID, flinkUID); err != nil {
				t.Fatal(err)
			}
			p.start("--allow-other")
			real := policyJob + "/chk-78/_metadata"
			// put writes src as dst through the mount as uid 65534: by creating it, or by creating a file of
			// another name and renaming it (mv), or hard-linking it (ln), onto the name.
			put := func(src, dst string) {
				var steps [][]string
				switch how {
				case "create":
					steps = [][]string{{"cp", src, p.m(dst)}}
				case "rename":
					steps = [][]string{{"cp", src, p.m(dst + ".tmp")}, {"mv", p.m(dst + ".tmp"), p.m(dst)}}
				case "link":
					steps = [][]string{{"cp", src, p.m(dst + ".tmp")}, {"ln", p.m(dst + ".tmp"), p.m(dst)}, {"rm", p.m(dst + ".tmp")}}
				}
				for _, argv := range steps {
					out, code := asNobody(t, argv[0], argv[1:]...)
					t.Logf("uid %s: %v: exit %d %s", nobodyUID, argv, code, out)
				}
			}
			switch attack {
			case "fake-newest":
				put(foreignMetadata(t, tr.Root, 79, nil), policyJob+"/chk-79/_metadata")
				if out, code := mntRun(t, "", "rm", "-rf", p.m(policyJob+"/chk-78")); code == 0 {
					t.Errorf("rm -rf of the real newest checkpoint's folder succeeded: %s", out)
				}
				mustExist(t, tr.Root, real)
				mustExist(t, tr.Root, tr.Live[real].Refs...)
			case "laundering":
				// A folder uid 65534 makes through this mount is the Flink user's, 0755: it cannot write
				// there. chk-79 is writable by everyone.
				laundry := policyJob + "/chk-79/_metadata"
				put(foreignMetadata(t, tr.Root, 1, inflight), laundry)
				if out, code := asNobody(t, "rm", p.m(laundry)); code == 0 {
					t.Logf("uid %s removed %s: %s", nobodyUID, laundry, out)
				}
				for _, k := range inflight {
					if _, code := mntRun(t, "", "rm", "-f", p.m(k)); code == 0 {
						t.Errorf("rm of in-flight %s succeeded after the laundering", k)
					}
				}
				mustExist(t, tr.Root, inflight...)
			}
			// The Flink user itself still writes a _metadata through the mount.
			own := policyJob + "/chk-80/_metadata"
			if out, code := mntRun(t, "", "setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--", "sh", "-c",
				"mkdir "+p.m(policyJob+"/chk-80")+" && cp "+foreignMetadata(t, tr.Root, 80, nil)+" "+p.m(own)); code != 0 {
				t.Errorf("the Flink user writing %s through its own mount: %s", own, out)
			}
			p.stop()
		})
	}
}
