package integration

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// sharedMount mounts store with --allow-other where uid 65534 can reach it: the store and the index
// lie below a 0700 folder of root's, the mountpoint below a 0755 one. Returns the mount.
func sharedMount(t *testing.T, base, store string, extra ...string) *mntProc {
	t.Helper()
	p := sharedProc(t, base, store)
	p.start(append([]string{"--allow-other"}, extra...)...)
	return p
}

// sharedProc is sharedMount's mount before it starts (base made 0700, the mountpoint made below a
// 0755 folder), for a test that changes how the daemon runs (mntProc.wrap) before p.start.
func sharedProc(t *testing.T, base, store string) *mntProc {
	t.Helper()
	if err := os.Chmod(base, 0o700); err != nil {
		t.Fatal(err)
	}
	p := &mntProc{t: t, store: store, index: filepath.Join(base, "index"), mnt: filepath.Join(readableDir(t), "mnt"),
		log: filepath.Join(base, "mount.log")}
	p.audit, p.sock = filepath.Join(p.index, "audit.jsonl"), filepath.Join(p.index, "ckguard.sock")
	if err := os.Mkdir(p.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// policyJob is the job the attack tests use: chk-77 (8 days old), chk-78 (completed 10 minutes ago,
// reusing chk-77's SSTs, with a private file of its own) and the files of chk-79, which Flink is
// writing (2 minutes old, no _metadata yet). Everything is root's (the Flink user); the job folder is
// writable by everyone, as a shared checkpoint folder often is.
const policyJob = "flink/fedcba9876543210fedcba9876543210"

func policyTree(t *testing.T, store string, now time.Time, opts ...treegen.Options) (tr *treegen.Tree, inflight []string) {
	t.Helper()
	tr, err := treegen.YoungOrphan(store, now, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c77 := tr.Live[policyJob+"/chk-77/_metadata"]
	var shared []string
	for _, r := range c77.Refs {
		if strings.Contains(r, "/shared/") {
			shared = append(shared, r)
		}
	}
	c78, err := tr.Checkpoint(treegen.Spec{Dir: policyJob + "/chk-78", ID: 78, Completed: now.Add(-10 * time.Minute),
		Shared: shared, Private: []string{flinkmeta.UUID("policy/chk-78")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Data(c78, now.Add(-11*time.Minute)); err != nil {
		t.Fatal(err)
	}
	inflight = []string{policyJob + "/shared/" + flinkmeta.UUID("policy/inflight/sst"), policyJob + "/chk-79/" + flinkmeta.UUID("policy/inflight/priv")}
	for _, k := range inflight {
		if err := tr.Write(k, 4096, now.Add(-2*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{policyJob, policyJob + "/chk-79"} {
		if err := os.Chmod(filepath.Join(tr.Root, d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return tr, inflight
}

// foreignMetadata encodes, with the real encoder, a valid checkpoint `_metadata` with the given id that
// names the store keys refs by absolute URIs of the store root (a directory, or s3://…), and leaves it
// in a file uid 65534 can read.
func foreignMetadata(t *testing.T, root string, id int64, refs []string) string {
	t.Helper()
	scratch := readableDir(t)
	tr, err := treegen.YoungOrphan(filepath.Join(scratch, "gen"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, k := range refs {
		if strings.HasPrefix(root, "s3://") {
			uris = append(uris, root+"/"+k)
		} else {
			uris = append(uris, "file:"+root+"/"+k)
		}
	}
	c, err := tr.Checkpoint(treegen.Spec{Dir: "x/chk-" + strconv.FormatInt(id, 10), ID: id, Completed: time.Now(), Shared: uris})
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(tr.Root, c.Metadata)
}

// rewriteID copies the `_metadata` src with its checkpoint id replaced, as an attacker would with the
// encoder: the copy is a valid file for the new id.
func rewriteID(t *testing.T, src string, id int64) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	m, err := flinkmeta.Parse(bytes.NewReader(b), int64(len(b)), src, flinkmeta.Options{KeepInline: true})
	if err != nil {
		t.Fatal(err)
	}
	m.CheckpointID = id
	out, err := flinkmeta.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(readableDir(t), "_metadata")
	if err := os.WriteFile(dst, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// readableDir returns a fresh folder every user can read (t.TempDir's parent is root's only): uid 65534
// reaches what lies in it (a file, a mountpoint, a socket).
func readableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ckguard-readable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mustExist(t *testing.T, root string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, err := os.Lstat(filepath.Join(root, k)); err != nil {
			t.Errorf("%s is gone: %v", k, err)
		}
	}
}

func mustBeGone(t *testing.T, root string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, err := os.Lstat(filepath.Join(root, k)); err == nil {
			t.Errorf("%s is still there", k)
		}
	}
}

// TestMountFakeNewestCheckpoint: another user who can write in a job folder creates
// chk-<newest+1>/_metadata through the mount, a valid file with that id (an empty checkpoint, or a copy of
// the real newest with its id rewritten). The real newest checkpoint keeps its "newest of an active job"
// protection: `rm -rf` of its folder leaves its _metadata and its files.
func TestMountFakeNewestCheckpoint(t *testing.T) {
	mntRequire(t)
	for _, fake := range []string{"empty", "copy-with-rewritten-id"} {
		t.Run(fake, func(t *testing.T) {
			base, err := os.MkdirTemp("", "ckguard-policy-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			tr, _ := policyTree(t, filepath.Join(base, "store"), time.Now())
			real := policyJob + "/chk-78/_metadata"
			src := foreignMetadata(t, tr.Root, 79, nil)
			if fake == "copy-with-rewritten-id" {
				src = rewriteID(t, filepath.Join(tr.Root, real), 79)
			}
			p := sharedMount(t, base, tr.Root)
			if out, code := asNobody(t, "cp", src, p.m(policyJob+"/chk-79/_metadata")); code != 0 {
				t.Fatalf("uid %s writing chk-79/_metadata through the mount: %s", nobodyUID, out)
			}
			if out, _ := p.cli("checkpoints", "--json"); !strings.Contains(out, "chk-79/_metadata") {
				t.Fatalf("the fake chk-79 is not indexed:\n%s", out)
			}
			out, code := mntRun(t, "", "rm", "-rf", p.m(policyJob+"/chk-78"))
			if code == 0 {
				t.Errorf("rm -rf of the real newest checkpoint's folder succeeded")
			}
			mustExist(t, tr.Root, tr.Live[real].Refs...)
			mustExist(t, tr.Root, real)
			if !strings.Contains(out, "Operation not permitted") {
				t.Errorf("rm -rf: %s, want EPERM", out)
			}
			why, _ := p.cli("why", real)
			if !strings.Contains(why, "newest checkpoint") || !strings.Contains(why, "2 owners") {
				t.Errorf("why %s does not say it is the newest checkpoint:\n%s", real, why)
			}
			// The fake is its owner's newest: protected too (it holds nothing of the job's).
			p.stop()
		})
	}
}

// TestMountTombstoneLaundering: another user writes a throw-away `_metadata` naming the young files of the
// checkpoint Flink is writing (chk-79), through the mount, then deletes it: in a folder of its own inside
// the job folder, or in a job folder of its own (whose owner it has). Those files keep --grace: deleting them through
// the mount is refused and `orphans` does not list them. Flink's own subsumption still works: once chk-79
// completes, deleting chk-78's _metadata makes its young private file deletable at once, also when a
// TaskManager running as another user than the JobManager wrote that file.
func TestMountTombstoneLaundering(t *testing.T) {
	mntRequire(t)
	for _, laundry := range []string{policyJob + "/laundry", "flink/00000000000000000000000000a77ac4/own-job-laundry"} {
		t.Run(path.Base(laundry), func(t *testing.T) {
			base, err := os.MkdirTemp("", "ckguard-policy-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			now := time.Now()
			tr, inflight := policyTree(t, filepath.Join(base, "store"), now)
			priv78 := policyJob + "/chk-78/" + flinkmeta.UUID("policy/chk-78")
			// The TaskManager that wrote chk-78's private file runs as another user than the JobManager.
			if err := os.Lchown(filepath.Join(tr.Root, priv78), 65534, 65534); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(tr.Root, "flink"), 0o777); err != nil {
				t.Fatal(err)
			}
			src := foreignMetadata(t, tr.Root, 1, inflight)
			p := sharedMount(t, base, tr.Root)
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
			if out, _ := p.cli("orphans", "--json"); strings.Contains(out, path.Base(inflight[0])) || strings.Contains(out, path.Base(inflight[1])) {
				t.Errorf("orphans lists the in-flight files after the laundering:\n%s", out)
			}
			for _, k := range inflight {
				out, code := mntRun(t, "", "rm", "-f", p.m(k))
				if code == 0 {
					t.Errorf("rm of in-flight %s succeeded after the laundering", k)
				} else if !strings.Contains(out, "Operation not permitted") {
					t.Errorf("rm %s: %s, want EPERM", k, out)
				}
			}
			mustExist(t, tr.Root, inflight...)
			var graceRefusals int
			for _, r := range p.auditRecords() {
				if r.Decision == "refuse" && r.Reason == "grace" {
					graceRefusals++
				}
			}
			if graceRefusals < len(inflight) {
				t.Errorf("%d grace refusals in the audit log, want at least %d", graceRefusals, len(inflight))
			}

			// Flink completes chk-79 (written to the store directly) and subsumes chk-78 through the mount.
			c79, err := tr.Checkpoint(treegen.Spec{Dir: policyJob + "/chk-79", ID: 79, Completed: time.Now(),
				Shared: []string{inflight[0]}})
			if err != nil {
				t.Fatal(err)
			}
			waitIndexed(t, p, c79.Metadata)
			for _, k := range []string{policyJob + "/chk-78/_metadata", priv78} {
				if out, code := mntRun(t, "", "rm", p.m(k)); code != 0 {
					t.Errorf("Flink's subsumption: rm %s refused: %s", k, out)
				}
			}
			mustBeGone(t, tr.Root, priv78)
			mustExist(t, tr.Root, inflight[0])
			p.stop()
		})
	}
}

// waitIndexed waits until the mount's index lists meta (its periodic sync runs every second).
func waitIndexed(t *testing.T, p *mntProc, meta string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := p.cli("checkpoints", "--json")
		if strings.Contains(out, meta) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not indexed after 30s:\n%s", meta, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestMountSavepointsSurviveFindDelete: `find MOUNT -mtime +7 -delete` over the whole mount keeps every
// job's newest savepoint (whatever its age, in a savepoints folder of its own or beside the checkpoints,
// and a savepoint in a folder whose name says no job) and savepoints within --savepoint-retention (30
// days); older savepoints that are not their job's newest go, with their files. A refusal of a savepoint's
// file gives savepoint advice. With --protect 'savepoint-*' (and the savepoint rules off) every savepoint-*
// folder at any depth is kept.
func TestMountSavepointsSurviveFindDelete(t *testing.T) {
	mntRequire(t)
	day := 24 * time.Hour
	build := func(t *testing.T) (*treegen.Tree, map[string]bool) {
		now := time.Now()
		tr, err := treegen.SavepointsRelative(filepath.Join(t.TempDir(), "store"), now)
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
			{"savepoints/before-upgrade", 90 * day},
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
		return tr, map[string]bool{
			"savepoints/savepoint-4f1a2b-0a1b2c3d4e5f": false, // 40 days, an older savepoint of 4f1a2b
			"savepoints/savepoint-4f1a2b-9f8e7d6c5b4a": true,  // 30 days, the newest of 4f1a2b
			job2 + "/savepoint-abcdef-111111111111":    false, // 60 days, an older savepoint of abcdef
			job2 + "/savepoint-abcdef-222222222222":    true,  // 10 days: newest, and within retention
			"savepoints/before-upgrade":                true,  // 90 days, no job in its name: its job's only
		}
	}
	check := func(t *testing.T, tr *treegen.Tree, keep map[string]bool) {
		for dir, kept := range keep {
			c := tr.Live[dir+"/_metadata"]
			if kept {
				mustExist(t, tr.Root, c.Metadata)
				mustExist(t, tr.Root, c.Refs...)
			} else {
				mustBeGone(t, tr.Root, c.Metadata)
				mustBeGone(t, tr.Root, c.Refs...)
			}
		}
	}
	t.Run("default", func(t *testing.T) {
		tr, keep := build(t)
		p := mntStart(t, tr.Root, "")
		mntRun(t, "", "find", p.mnt, "-mtime", "+7", "-delete")
		out, code := mntRun(t, "", "rm", p.m("savepoints/savepoint-4f1a2b-9f8e7d6c5b4a/"+tr.Live["savepoints/savepoint-4f1a2b-9f8e7d6c5b4a/_metadata"].Refs[0][len("savepoints/savepoint-4f1a2b-9f8e7d6c5b4a/"):]))
		if code == 0 {
			t.Errorf("rm of a file of the newest savepoint succeeded")
		}
		why, _ := p.cli("why", tr.Live["savepoints/savepoint-4f1a2b-9f8e7d6c5b4a/_metadata"].Refs[0])
		if !strings.Contains(why, "savepoint -d") || strings.Contains(why, "-full") {
			t.Errorf("why for a savepoint's file gives no savepoint advice:\n%s\n(rm: %s)", why, out)
		}
		why, _ = p.cli("why", "savepoints/savepoint-4f1a2b-9f8e7d6c5b4a/_metadata")
		if !strings.Contains(why, "newest savepoint") {
			t.Errorf("why for the newest savepoint's _metadata:\n%s", why)
		}
		p.stop()
		check(t, tr, keep)
		if ok, broken := verifyIndex(t, tr.Root, p.index); !ok {
			t.Errorf("live checkpoints broken after find -delete: %s", broken)
		}
	})
	t.Run("protect-glob-at-any-depth", func(t *testing.T) {
		tr, keep := build(t)
		for dir := range keep {
			keep[dir] = strings.Contains(path.Base(dir), "savepoint-")
		}
		p := mntStart(t, tr.Root, "", "--protect", "savepoint-*", "--savepoint-keep-newest=false", "--savepoint-retention", "0s")
		mntRun(t, "", "find", p.mnt, "-mtime", "+7", "-delete")
		p.stop()
		check(t, tr, keep)
	})
}

// TestS3ForeignUserCannotWriteMetadata: on S3 there are no owners to tell a job's `_metadata` from another
// user's, and the rules that compare owners cannot apply. Instead, nobody but the mount's own user can
// create anything through the S3 mount: every file and folder is the mount user's, 0644/0755, and the
// kernel checks callers against that (default_permissions). The fake newest checkpoint and the laundering
// `_metadata` are refused with EACCES before the guard is asked, nothing reaches the bucket, and the real
// newest checkpoint and the in-flight files stay protected.
func TestS3ForeignUserCannotWriteMetadata(t *testing.T) {
	e := s3Start(t)
	base, err := os.MkdirTemp("", "ckguard-policy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	tr, inflight := policyTree(t, filepath.Join(base, "src"), time.Now(), treegen.Options{URIPrefix: s3Root})
	e.upload(t, tr)
	fake := foreignMetadata(t, s3Root, 79, nil)
	laundry := foreignMetadata(t, s3Root, 5, inflight)
	p := sharedMount(t, base, s3Root, e.mountArgs()...)
	before := e.keys(t)
	for _, argv := range [][]string{
		{"cp", fake, p.m(policyJob + "/chk-79/_metadata")},
		{"mkdir", p.m(policyJob + "/laundry")},
		{"cp", laundry, p.m(policyJob + "/_metadata")},
	} {
		out, code := asNobody(t, argv[0], argv[1:]...)
		if code == 0 || !strings.Contains(out, "Permission denied") {
			t.Errorf("uid %s: %v: exit %d %q, want EACCES", nobodyUID, argv, code, out)
		}
	}
	mntSameSet(t, "bucket after the foreign user's attempts", e.keys(t), before)
	if out, code := mntRun(t, "", "rm", "-rf", p.m(policyJob+"/chk-78")); code == 0 {
		t.Errorf("rm -rf of the newest checkpoint's folder succeeded: %s", out)
	}
	for _, k := range inflight {
		if out, code := mntRun(t, "", "rm", "-f", p.m(k)); code == 0 {
			t.Errorf("rm of in-flight %s succeeded: %s", k, out)
		}
	}
	p.stop()
	keys := map[string]bool{}
	for _, k := range e.keys(t) {
		keys[k] = true
	}
	for _, k := range append([]string{policyJob + "/chk-78/_metadata"}, inflight...) {
		if !keys[s3Prefix+"/"+k] && !keys[k] {
			t.Errorf("%s is gone from the bucket", k)
		}
	}
}
