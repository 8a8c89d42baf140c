//go:build hdfs

package integration

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
)

// hdfsFlinkVersions are the Flink profiles the optional `hdfs` Maven profile (flink-hadoop-fs with
// Hadoop's shaded client 3.5.0) is prefetched for (scripts/setup.sh hdfs).
var hdfsFlinkVersions = map[string]bool{"1.20": true, "2.2": true}

// TestE2EHDFSIncidentWithoutGuard is the HDFS incident, reproduced with real Flink and no guard: job
// A writes RocksDB incremental checkpoints to hdfs:// on a MiniDFSCluster through Flink's own Hadoop
// file system, job B is restored from A's latest checkpoint (CLAIM, LEGACY) and references A's SSTs;
// the ops cleanup `hdfs dfs -rm -r -skipTrash` of A's job folder then deletes them, B's next
// failover cannot restore (the missing-file error names A's file), and `ckguard verify` (once the
// store speaks hdfs://) is red.
func TestE2EHDFSIncidentWithoutGuard(t *testing.T) {
	e2eRequire(t)
	for _, v := range flinkVersions() {
		for _, mode := range flinkClaimModes {
			t.Run(v+"/"+mode, func(t *testing.T) {
				if !hdfsFlinkVersions[v] {
					t.Skipf("the hdfs Maven profile is prefetched for Flink 1.20 and 2.2 (not %s)", v)
				}
				s := startHDFSScenario(t, v, mode)
				out, err := s.env.c.DFS(t, "-rm", "-r", "-skipTrash", s.aDir)
				if err != nil {
					t.Fatalf("the ops cleanup: %v", err)
				}
				t.Logf("hdfs dfs -rm -r -skipTrash %s: %s", s.aDir, strings.TrimSpace(out))
				if gone := s.crossMissing(t); len(gone) != len(s.cross) {
					t.Fatalf("after the unguarded cleanup %d of B's %d SSTs under A's folder are gone, want all", len(gone), len(s.cross))
				}
				// B's failover comes right after the cleanup, before verify: B checkpoints every
				// second, and once compaction has rewritten A's SSTs into B's own, B's retained
				// checkpoints no longer need A's files and the control can no longer show the incident.
				// After B's restore has failed B takes no more checkpoints, so verify reads the same
				// broken ones.
				s.expectRestoreFails(t)
				s.verifyRed(t)
			})
		}
	}
}

// TestE2EHDFSIncidentGuarded is the same incident with the ops cleanup through the guard's HDFS mount
// (`ckguard mount --store hdfs://…`; Flink writes to the cluster directly): `rm -rf` of A's folder and
// an age-based `find -delete` leave every SST of A that B references, and B's failover restores.
// Skipped until the mount's --store takes hdfs:// (its usage says so).
func TestE2EHDFSIncidentGuarded(t *testing.T) {
	e2eRequire(t)
	if help, _ := e2eCkguardRun(t, "mount", "--help"); !storeFlagTakesHDFS(help) {
		t.Skip("ckguard mount --store does not take hdfs:// yet")
	}
	for _, v := range flinkVersions() {
		for _, mode := range flinkClaimModes {
			t.Run(v+"/"+mode, func(t *testing.T) {
				if !hdfsFlinkVersions[v] {
					t.Skipf("the hdfs Maven profile is prefetched for Flink 1.20 and 2.2 (not %s)", v)
				}
				s := startHDFSScenario(t, v, mode)
				// The store is the URI itself: no local view, so no file: --map either.
				g := startGuardMountOn(t, s.storeURI(), s.storeURI(), nil, true)
				g.settle()
				s.backdate(t, s.aDir)
				aInMount := filepath.Join(g.mnt, strings.TrimPrefix(s.aDir, s.env.dir+"/"))
				out1, code1 := e2eRun(context.Background(), g.mnt, "rm", "-rf", aInMount)
				out2, code2 := e2eRun(context.Background(), g.mnt, "find", g.mnt, "-type", "f", "-mtime", "+7", "-delete")
				t.Logf("cleanup through the HDFS mount: rm -rf → exit %d, find -mtime +7 -delete → exit %d; %d refusals",
					code1, code2, strings.Count(out1+out2, "Operation not permitted"))
				if gone := s.crossMissing(t); len(gone) > 0 {
					t.Fatalf("the guarded cleanup deleted %d SSTs B references: %v", len(gone), e2eHead(gone))
				}
				if out, code := g.cli("verify"); code != 0 {
					t.Errorf("ckguard verify after the guarded cleanup: exit %d\n%s", code, out)
				}
				s.expectRestores(t)
			})
		}
	}
}

// hdfsEnv is a shared MiniDFSCluster with a checkpoint directory of this test's own, written by Flink
// as hdfs://127.0.0.1:PORT/t/<test>/ck.
type hdfsEnv struct {
	c       *minidfs.Cluster
	version string // run.sh profile: "1.20+hdfs"
	flink   string // the plain profile, for Flink's loader (ListReferences reads local _metadata)
	dir     string // the checkpoint directory, an absolute HDFS path
	uri     string // its hdfs:// URI
	flags   []string
}

func startHDFSEnv(t *testing.T, version string) *hdfsEnv {
	t.Helper()
	c := minidfs.Start(t, minidfs.Options{})
	buildFlinkVariant(t, version, "hdfs")
	e := &hdfsEnv{c: c, version: version + "+hdfs", flink: version, dir: c.Root() + "/ck"}
	e.uri = c.URI(e.dir)
	// The last --checkpoint-dir wins over the file:// one startJob puts first. hdfs:// needs no
	// fallback permission: Flink serves it with its Hadoop file system once Hadoop is on the classpath.
	e.flags = []string{"--checkpoint-dir", e.uri, "-Dclassloader.check-leaked-classloader=false"}
	return e
}

// hdfsPath turns a URI Flink wrote (hdfs://127.0.0.1:PORT/p) into the cluster path /p.
func (e *hdfsEnv) hdfsPath(uri string) string {
	if p, ok := strings.CutPrefix(uri, e.c.URI("")); ok {
		return p
	}
	return uri
}

func (e *hdfsEnv) exists(t *testing.T, p string) bool {
	t.Helper()
	_, err := e.c.DFS(t, "-test", "-e", p)
	return err == nil
}

// liveMetadata lists every _metadata below the HDFS directory under.
func (e *hdfsEnv) liveMetadata(t *testing.T, under string) []string {
	t.Helper()
	// A running job subsumes a checkpoint every second; `-find` fails when a folder it was about to
	// enter is gone by then, so a walk that raced with it is taken again.
	var out string
	var err error
	for range 10 {
		if out, err = e.c.DFS(t, "-find", under, "-name", "_metadata", "-print"); err == nil || !strings.Contains(err.Error(), "does not exist") {
			break
		}
	}
	if err != nil {
		t.Fatalf("list _metadata below %s: %v", under, err)
	}
	var res []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" {
			res = append(res, e.hdfsPath(l))
		}
	}
	sort.Strings(res)
	return res
}

// refs is Flink's own listing of every live _metadata below under: each referenced HDFS path mapped
// to the _metadata needing it. The _metadata are copied to a local folder of the same layout first
// (relative handles resolve alike; a running job subsumes a checkpoint every second, faster than the
// loader's JVM starts).
func (e *hdfsEnv) refs(t *testing.T, under string) map[string][]string {
	t.Helper()
	snap := t.TempDir()
	var copies []string
	for _, m := range e.liveMetadata(t, under) {
		c := filepath.Join(snap, m)
		if err := os.MkdirAll(filepath.Dir(c), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.DFS(t, "-get", m, c); err != nil {
			continue // subsumed meanwhile
		}
		copies = append(copies, c)
	}
	res := map[string][]string{}
	for p, by := range referencedFiles(listReferences(t, e.flink, copies...), "", "") {
		p = e.hdfsPath(p)
		p = strings.Replace(p, snap, "", 1)
		for _, m := range by {
			res[p] = append(res[p], strings.Replace(m, snap, "", 1))
		}
	}
	return res
}

// hdfsScenario is job A and job B restored from A's latest checkpoint, B checkpointing and
// referencing A's SSTs (cross), all on HDFS. It is the common start of the unguarded incident and
// of the guarded variant: a guarded test mounts e.uri, runs the cleanup through the mount, then
// checks crossMissing is empty and expectRestores.
type hdfsScenario struct {
	env       *hdfsEnv
	aID, aDir string // A's job id and job folder (HDFS path)
	b         *flinkJob
	bDir      string
	cross     []string // HDFS paths under aDir that B's live checkpoints reference
}

func startHDFSScenario(t *testing.T, version, mode string) *hdfsScenario {
	t.Helper()
	e := startHDFSEnv(t, version)
	o := jobOpts{Extra: e.flags}
	// CheckpointDir is the file:// default startJob writes first; the hdfs:// flag overrides it.
	local := t.TempDir()
	aID, aChk := runSourceJob(t, e.version, local, o)
	if !strings.HasPrefix(aChk, e.uri+"/") {
		t.Fatalf("A's checkpoint %s is not under %s: Flink did not write to HDFS", aChk, e.uri)
	}
	if !e.exists(t, e.hdfsPath(aChk)+"/_metadata") {
		t.Fatalf("A's %s/_metadata is not on the cluster", aChk)
	}
	b, bLast := startRestored(t, e.version, "B", local, aChk, mode, 3, o)
	s := &hdfsScenario{env: e, aID: aID, aDir: path.Join(e.dir, aID), b: b, bDir: path.Join(e.dir, b.jobID())}
	for p := range e.refs(t, s.bDir) {
		if strings.HasPrefix(p, s.aDir+"/") {
			s.cross = append(s.cross, p)
		}
	}
	sort.Strings(s.cross)
	if len(s.cross) == 0 {
		t.Fatalf("B's checkpoints (latest %s) reference nothing under A's folder %s: no cross-job reference to protect", bLast.Fields["path"], s.aDir)
	}
	t.Logf("B (%s, restored from %s in %s) references %d SSTs under A's folder %s", b.jobID(), aChk, mode, len(s.cross), s.aDir)
	return s
}

// crossMissing returns the SSTs of A that B references and that are gone.
func (s *hdfsScenario) crossMissing(t *testing.T) []string {
	t.Helper()
	var gone []string
	for _, p := range s.cross {
		if !s.env.exists(t, p) {
			gone = append(gone, p)
		}
	}
	return gone
}

// verifyRed runs `ckguard verify --store hdfs://…` and wants exit 1 naming B's broken checkpoint.
// Until ckguard's --store speaks hdfs:// (its usage says so), it logs that and leaves the evidence to
// B's failed restore.
func (s *hdfsScenario) verifyRed(t *testing.T) {
	t.Helper()
	help, _ := e2eCkguardRun(t, "verify", "--help")
	if !storeFlagTakesHDFS(help) {
		t.Logf("ckguard verify --store does not take hdfs:// yet; B's failed restore is the evidence")
		return
	}
	out, code := e2eCkguardRun(t, "verify", "--store", s.env.uri, "--index", t.TempDir())
	if code != 1 {
		t.Fatalf("ckguard verify --store %s after the unguarded cleanup: exit %d, want 1 (broken)\n%s", s.env.uri, code, out)
	}
	if !strings.Contains(out, s.b.jobID()) || !strings.Contains(out, s.aID) {
		t.Errorf("ckguard verify names neither B's checkpoint (%s) nor A's missing files (%s):\n%s", s.b.jobID(), s.aID, out)
	}
	t.Logf("ckguard verify --store %s: exit 1\n%s", s.env.uri, e2eTruncate(out, 800))
}

// storeFlagTakesHDFS reports whether a command's help describes --store with an hdfs:// form.
func storeFlagTakesHDFS(help string) bool {
	for _, l := range strings.Split(help, "\n") {
		if strings.Contains(l, "--store") && strings.Contains(l, "hdfs://") {
			return true
		}
	}
	return false
}

// expectRestoreFails makes a task of B fail and wants the restore to fail on a missing file of A.
func (s *hdfsScenario) expectRestoreFails(t *testing.T) {
	t.Helper()
	ev := restoreAfterFailure(t, s.b)
	if ev.Name != "restore-failed" {
		t.Fatalf("B restored after A's files were deleted without the guard: the control did not reproduce the incident (%s)", ev.Line)
	}
	cause := missingFileCause(s.b, ev, s.aID)
	if cause == "" {
		t.Fatalf("B failed to restore, but not with the missing-file error: %s", ev.Fields["cause"])
	}
	if !strings.Contains(cause, s.aID) {
		t.Errorf("the missing file is not one of A's (%s): %s", s.aID, cause)
	}
	t.Logf("incident reproduced on HDFS: B's restore failed: %s", e2eTruncate(cause, 300))
}

// expectRestores makes a task of B fail and wants B to restore (what the guard must preserve).
func (s *hdfsScenario) expectRestores(t *testing.T) {
	t.Helper()
	ev := restoreAfterFailure(t, s.b)
	if ev.Name != "restored" {
		t.Fatalf("B could not restore: %s\n%s", ev.Fields["cause"], s.b.tail())
	}
	s.b.waitCheckpoints(s.b.mark(), 1, flinkStepTimeout)
}

// storeURI is the scenario's checkpoint directory as `ckguard mount --store` and `ckguard verify
// --store` take it.
func (s *hdfsScenario) storeURI() string { return s.env.uri }

// backdate sets the mtime of dir and everything below it to cleanupAge ago (what a week-old job folder
// looks like to an age-based cleanup).
func (s *hdfsScenario) backdate(t *testing.T, dir string) {
	t.Helper()
	out, err := s.env.c.DFS(t, "-ls", "-R", dir)
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	old := time.Now().Add(-cleanupAge)
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, " "+dir); i >= 0 {
			s.env.c.SetTimes(t, strings.TrimSpace(l[i:]), old)
		}
	}
	s.env.c.SetTimes(t, dir, old)
}
