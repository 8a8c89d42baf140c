package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// s3aFlinkVersions are the Flink profiles the optional `s3a` Maven profile (flink-hadoop-fs + Hadoop
// S3A 3.3.6) has been verified with.
var s3aFlinkVersions = map[string]bool{"1.20": true}

// TestE2ES3A is scenario (vi) with Flink writing to the S3 server through its OWN file system stack:
// `s3a://` checkpoint dirs served by Flink's Hadoop fallback file system and Hadoop's S3A (Maven
// Central as reachable here serves neither flink-s3-fs-hadoop nor flink-s3-fs-presto; see
// integration/flink/README.md). The _metadata therefore holds s3a://bucket/… URIs, and ckguard mounts
// the same bucket as s3://bucket/…: the references must resolve to the store's keys without any --map
// (s3:// and s3a:// alias, safety rule 5).
//
//   - guarded/CLAIM: A checkpoints to the bucket, B restores from A's latest checkpoint (CLAIM) and
//     references A's SSTs; `ckguard why` names B; the ops cleanup (rm -rf of A's folder, find -mtime
//     +7 -delete) through the S3 mount refuses exactly what live checkpoints reference and deletes the
//     rest of A in one pass; a task failure in B restores; `ckguard verify` is green.
//   - unguarded/CLAIM: the control: `aws s3 rm --recursive` of A's folder, then the task failure in B →
//     B's restore fails with S3A's missing-object error naming A's file.
func TestE2ES3A(t *testing.T) {
	e2eRequire(t)
	for _, v := range flinkVersions() {
		for _, guarded := range []bool{true, false} {
			name := v + "/unguarded/CLAIM"
			if guarded {
				name = v + "/guarded/CLAIM"
			}
			t.Run(name, func(t *testing.T) {
				if !s3aFlinkVersions[v] {
					t.Skipf("the s3a Maven profile is verified with Flink 1.20 only (not %s)", v)
				}
				s := startS3AEnv(t, v)
				s3aScenario(t, s, guarded)
			})
		}
	}
}

// s3aEnv is one S3 server with a bucket that Flink writes to as s3a://bucket/ck.
type s3aEnv struct {
	srv     *s3server.Server
	version string // run.sh profile: "1.20+s3a"
	flink   string // the plain profile, for Flink's loader (ListReferences reads local _metadata)
	bucket  string
	uri     string // s3a://bucket/ck
	local   string // the same prefix in the server's posix backend folder
	flags   []string
	// live, when set, says whether a _metadata of the posix folder is current in the bucket (checked as
	// refs copies it): on a versioned bucket versitygw keeps a deleted object's file there.
	live func(path string) bool
}

func startS3AEnv(t *testing.T, version string) *s3aEnv {
	t.Helper()
	return startS3AEnvVariant(t, version, "s3a")
}

// startS3AEnvVariant is startS3AEnv with the Maven variants to build: "s3a", or "s3a,forst" for ForSt
// on S3A.
func startS3AEnvVariant(t *testing.T, version, variant string) *s3aEnv {
	t.Helper()
	srv := s3server.Start(t)
	return s3aEnvOn(t, version, variant, srv, srv.Bucket(t, "checkpoints"))
}

// s3aEnvOn is startS3AEnvVariant on a server and bucket the caller made (a versioned or Object Lock
// bucket).
func s3aEnvOn(t *testing.T, version, variant string, srv *s3server.Server, bucket string) *s3aEnv {
	t.Helper()
	s := &s3aEnv{srv: srv, version: version + "+" + variant, flink: version, bucket: bucket,
		uri: "s3a://" + bucket + "/ck", local: filepath.Join(srv.DataDir, bucket, "ck")}
	buildFlinkVariant(t, version, variant)
	// Hadoop options reach S3A through Flink's configuration (flink.hadoop. prefix); the job
	// initializes Flink's file system registry with them (a local environment does not).
	hadoop := map[string]string{
		"fs.s3a.endpoint":                 srv.Endpoint,
		"fs.s3a.endpoint.region":          s3server.Region,
		"fs.s3a.path.style.access":        "true",
		"fs.s3a.connection.ssl.enabled":   "false",
		"fs.s3a.access.key":               s3server.AccessKey,
		"fs.s3a.secret.key":               s3server.SecretKey,
		"fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
		// By default S3A deletes the parent "directory marker" objects after each write; versitygw's
		// posix backend refuses to delete a marker of a non-empty folder (ErrDirectoryNotEmpty) and
		// S3A retried until every checkpoint expired. Real S3 has no such folders; keeping markers
		// is S3A's recommended mode anyway.
		"fs.s3a.directory.marker.retention": "keep",
		"fs.s3a.buffer.dir":                 t.TempDir(),
	}
	keys := make([]string, 0, len(hadoop))
	for k := range hadoop {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// The last --checkpoint-dir wins over the file:// one startJob puts first.
	s.flags = []string{"--checkpoint-dir", s.uri, "-Dfs.allowed-fallback-filesystems=s3a",
		"-Dclassloader.check-leaked-classloader=false"}
	for _, k := range keys {
		s.flags = append(s.flags, "-Dflink.hadoop."+k+"="+hadoop[k])
	}
	for k, val := range map[string]string{"AWS_ACCESS_KEY_ID": s3server.AccessKey,
		"AWS_SECRET_ACCESS_KEY": s3server.SecretKey, "AWS_REGION": s3server.Region,
		"AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
		"AWS_EC2_METADATA_DISABLED": "true"} {
		t.Setenv(k, val)
	}
	return s
}

// buildFlinkVariant builds a Flink profile combined with an optional dependency profile (pom.xml)
// into its own output folder, once per test binary, and registers it under the name run.sh takes
// ("1.20+s3a"), so startJob's own build step finds it done.
func buildFlinkVariant(t *testing.T, version, variant string) {
	t.Helper()
	v, _ := flinkBuildOnce.LoadOrStore(version+"+"+variant, &flinkBuildResult{})
	br := v.(*flinkBuildResult)
	br.once.Do(func() {
		cmd := exec.Command("mvn", "-o", "-q", "-B", "-P", "flink-"+version+","+variant, "package", "dependency:build-classpath")
		cmd.Dir = filepath.Join(e2eRepoRoot(t), "integration", "flink")
		out, err := cmd.CombinedOutput()
		if err != nil {
			br.err = fmt.Errorf("mvn -o package -P flink-%s,%s (run integration/flink/prefetch.sh first): %v\n%s", version, variant, err, out)
		}
	})
	if br.err != nil {
		t.Fatal(br.err)
	}
}

// toLocal maps an s3a:// URI of the bucket to the object's file in the server's posix folder.
func (s *s3aEnv) toLocal(uri string) string {
	if strings.HasPrefix(uri, s.uri) {
		return s.local + strings.TrimPrefix(uri, s.uri)
	}
	return uri
}

// refs is Flink's own listing of every live _metadata below under, as local paths of the objects
// mapped to the _metadata needing them. The _metadata are copied first (same relative layout, so
// relative handles resolve alike): a running job subsumes a checkpoint every second, faster than
// the loader's JVM starts, and would leave it nothing to read.
func (s *s3aEnv) refs(t *testing.T, under string) map[string][]string {
	t.Helper()
	snap := t.TempDir()
	var copies []string
	for _, m := range e2eLiveMetadata(t, under) {
		b, err := os.ReadFile(m)
		if err != nil || (s.live != nil && !s.live(m)) {
			continue // subsumed meanwhile
		}
		c := filepath.Join(snap, strings.TrimPrefix(m, s.local))
		if err := os.MkdirAll(filepath.Dir(c), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(c, b, 0o644); err != nil {
			t.Fatal(err)
		}
		copies = append(copies, c)
	}
	res := map[string][]string{}
	for p, by := range referencedFiles(listReferences(t, s.flink, copies...), s.uri, s.local) {
		p = strings.Replace(p, snap, s.local, 1)
		for _, m := range by {
			res[p] = append(res[p], strings.Replace(m, snap, s.local, 1))
		}
	}
	return res
}

// assertNothingReferencedMissing fails when an object a live checkpoint needs is gone.
func (s *s3aEnv) assertNothingReferencedMissing(t *testing.T) map[string][]string {
	t.Helper()
	refs := s.refs(t, s.local)
	if missing := missingReferenced(refs); len(missing) > 0 {
		t.Fatalf("%d objects referenced by live checkpoints are gone: %v", len(missing), e2eHead(missing))
	}
	t.Logf("%d referenced objects of the live checkpoints, all present", len(refs))
	return refs
}

func s3aScenario(t *testing.T, s *s3aEnv, guarded bool) {
	o := jobOpts{Extra: s.flags}
	aID, aChk := runSourceJob(t, s.version, s.local, o)
	if !strings.HasPrefix(aChk, s.uri+"/") {
		t.Fatalf("A's checkpoint %s is not under %s: Flink did not write through s3a", aChk, s.uri)
	}
	if _, err := os.Stat(filepath.Join(s.toLocal(aChk), "_metadata")); err != nil {
		t.Fatalf("A's %s/_metadata is not an object of the bucket: %v", aChk, err)
	}
	b, bLast := startRestored(t, s.version, "B", s.local, aChk, "CLAIM", 3, o)
	aDir := filepath.Join(s.local, aID)
	bDir := filepath.Join(s.local, b.jobID())
	var cross []string
	bRefs := s.refs(t, bDir)
	for p := range bRefs {
		if strings.HasPrefix(p, aDir+"/") {
			cross = append(cross, p)
		}
	}
	sort.Strings(cross)
	if len(cross) == 0 {
		t.Fatalf("B's checkpoints (%s; live %v) reference nothing under A's folder %s; they reference %v", bLast.Fields["path"], e2eLiveMetadata(t, bDir), aDir, e2eHead(keysOf(bRefs)))
	}
	t.Logf("B's retained checkpoints (latest %s) reference %d objects under A's folder", bLast.Fields["path"], len(cross))

	if !guarded {
		// The control: the ops cleanup straight on the bucket, no guard.
		out := s3server.AWS(t, s.srv.Endpoint, "s3", "rm", "--recursive", "s3://"+s.bucket+"/ck/"+aID+"/")
		t.Logf("aws s3 rm --recursive s3://%s/ck/%s/: %d objects deleted", s.bucket, aID, strings.Count(out, "delete:"))
		ev := restoreAfterFailure(t, b)
		if ev.Name != "restore-failed" {
			t.Fatalf("B restored after A's objects were deleted without the guard: the control did not reproduce the incident (%s)", ev.Line)
		}
		cause := missingFileCause(b, ev, aID)
		if cause == "" {
			t.Fatalf("B failed to restore, but not with the missing-object error: %s", ev.Fields["cause"])
		}
		if !strings.Contains(cause, aID) {
			t.Errorf("the missing object is not one of A's (%s): %s", aID, cause)
		}
		t.Logf("B's restore failed as in the incident: %s", e2eTruncate(cause, 300))
		return
	}

	// The guard: ckguard mounts the bucket as s3://; Flink wrote s3a:// URIs. No --map for them (the
	// one startGuardMountOn adds maps file: URIs of the posix folder, which this job never writes).
	flags := []string{"--s3-endpoint", s.srv.Endpoint, "--s3-path-style", "--s3-region", s3server.Region}
	g := startGuardMountOn(t, s.local, "s3://"+s.bucket+"/ck", flags, true)
	g.settle()
	key := strings.TrimPrefix(cross[0], s.local+"/")
	out, code := g.cli("why", key)
	if code != 1 {
		t.Fatalf("ckguard why %s: exit %d, want 1 (refused): the s3a:// reference did not resolve to the s3:// store's key\n%s", key, code, out)
	}
	if !strings.Contains(out, b.jobID()) {
		t.Fatalf("ckguard why %s does not name B's checkpoints (job %s):\n%s", key, b.jobID(), out)
	}
	t.Logf("ckguard why %s:\n%s", key, e2eTruncate(out, 800))

	before := e2eFilesUnder(t, aDir)
	e2eBackdate(t, aDir, cleanupAge)
	g.settle()
	out = e2eOpsCleanup(t, g.mnt, g.inMount(aDir))
	after := e2eFilesUnder(t, aDir)
	refs := s.assertNothingReferencedMissing(t)
	t.Logf("cleanup through the S3 mount: %d objects of A before, %d left, %d refusals reported by rm/find; audit %v",
		len(before), len(after), strings.Count(out, "Operation not permitted"), g.auditCounts())
	t.Logf("refusals of the cleanup by reason: %v", auditToolReasons(t, g))
	for _, f := range cross {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s, referenced by B, was deleted by the cleanup: %v", f, err)
		}
	}
	for _, f := range after {
		if _, ok := refs[f]; ok || filepath.Base(f) == "_metadata" {
			continue
		}
		t.Errorf("cleanup left %s although no live checkpoint references it (one pass should delete it)", f)
	}

	ev := restoreAfterFailure(t, b)
	if ev.Name != "restored" {
		t.Fatalf("B could not restore after the guarded cleanup: %s", ev.Fields["cause"])
	}
	t.Logf("B restored after the task failure (%s)", ev.Line)
	_, _ = b.waitCheckpoints(b.mark(), 2, flinkStepTimeout)
	b.stop()
	g.settle()
	s.assertNothingReferencedMissing(t)
	if out, code := g.cli("verify"); code != 0 {
		t.Fatalf("ckguard verify after the cleanup: exit %d\n%s", code, out)
	} else {
		t.Logf("ckguard verify: %s", e2eTruncate(out, 400))
	}

	// What the first pass left of A is A's newest checkpoint (protected: its job completed it
	// seconds ago, --active-window) and what it references. Once the ops engineer declares A gone for
	// good (--active-window 0s), the same rm -rf retires A's _metadata and deletes every object of A
	// that B does not need, in one pass; B's references stay, and a job C restores from B's latest.
	g.remount("--active-window", "0s")
	out = e2eOpsCleanup(t, g.mnt, g.inMount(aDir))
	after = e2eFilesUnder(t, aDir)
	refs = s.assertNothingReferencedMissing(t)
	t.Logf("second pass (--active-window 0s): %d objects of A left (B references %d), %d refusals reported by rm/find; refusals so far by reason %v",
		len(after), len(cross), strings.Count(out, "Operation not permitted"), auditToolReasons(t, g))
	for _, m := range e2eLiveMetadata(t, aDir) {
		t.Errorf("second pass left A's %s (not protected with --active-window 0s)", m)
	}
	for _, f := range after {
		if _, ok := refs[f]; !ok {
			t.Errorf("second pass left %s although no live checkpoint references it", f)
		}
	}
	for _, f := range cross {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s, referenced by B, was deleted by the second pass: %v", f, err)
		}
	}
	bLast, _ = b.lastCheckpoint()
	c, _ := startRestored(t, s.version, "C", s.local, bLast.Fields["path"], "LEGACY", 2, o)
	c.stop()
	g.settle()
	if out, code := g.cli("verify"); code != 0 {
		t.Fatalf("ckguard verify at the end: exit %d\n%s", code, out)
	}
}

func keysOf(m map[string][]string) []string {
	res := make([]string, 0, len(m))
	for k := range m {
		res = append(res, k)
	}
	sort.Strings(res)
	return res
}

// auditToolReasons counts the cleanup tools' (rm, find) refused operations in the mount's audit log
// by reason.
func auditToolReasons(t *testing.T, g *guardMount) map[string]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(g.index, "audit.jsonl"))
	if err != nil {
		t.Logf("audit log: %v", err)
		return nil
	}
	res := map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		var r struct{ Op, Decision, Comm, Reason string }
		if json.Unmarshal([]byte(l), &r) != nil || (r.Comm != "rm" && r.Comm != "find") || r.Decision == "allow" {
			continue
		}
		res[r.Op+"/"+r.Reason]++
	}
	return res
}
