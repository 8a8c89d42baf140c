package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/refindex/flinkrest"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestE2EFlinkRESTMore: the checks of issue 30 beyond TestE2EFlinkREST, each against a real Flink 2.2
// MiniCluster with its REST endpoint on 127.0.0.1 (only 2.2: what they add does not change between
// the 2.x versions, and CI time is short):
//   - forst-failover-after-cleanup: a ForSt job (default primary dir) that restarted once has the
//     working folder of its current attempt (its checkpoints reference its files) and an older attempt
//     folder; with every file backdated by 10 days, `find -mtime +7 -delete` and `rm -rf` of the older
//     attempt folders through a --flink-rest mount delete nothing of the job; the job takes its next
//     checkpoint, fails over, restores from that checkpoint or a newer one (latest.restored) and keeps
//     checkpointing;
//   - forst-control-without-guard: the same cleanup run on the store itself loses the job: its next
//     checkpoint fails on a deleted file of the current working folder and none completes after (the
//     incident the guard prevents; the Flink error is logged);
//   - forst-s3-failover-after-cleanup: the guarded cleanup and failover on S3 (versitygw): Flink writes
//     s3a:// through Hadoop's S3A, its ForSt working folders are objects of the bucket, the guard
//     mounts it as s3://;
//   - failing-checkpoints-past-active-window: a RUNNING job whose checkpoints fail for longer than
//     --active-window keeps its newest completed checkpoint and its working folder with --flink-rest,
//     while a mount of the same store without it allows deleting that _metadata;
//   - in-flight-past-grace: files of a checkpoint held IN_PROGRESS (RocksDB) for longer than --grace
//     are refused with --flink-rest while a mount without it allows them; once the checkpoint
//     completes its _metadata references them.
func TestE2EFlinkRESTMore(t *testing.T) {
	e2eRequire(t)
	mntRequire(t)
	if !contains(flinkVersions(), "2.2") {
		t.Skip("CKGUARD_E2E_FLINK does not include 2.2")
	}
	t.Run("forst-failover-after-cleanup", func(t *testing.T) { e2eForStCleanup(t, true) })
	t.Run("forst-control-without-guard", func(t *testing.T) { e2eForStCleanup(t, false) })
	t.Run("forst-s3-failover-after-cleanup", e2eForStS3Cleanup)
	t.Run("failing-checkpoints-past-active-window", e2eFailingCheckpoints)
	t.Run("in-flight-past-grace", e2eInFlightPastGrace)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// restEndpoint is a free 127.0.0.1 address for a MiniCluster's REST endpoint and the Job flags that
// bind it there.
func restEndpoint(t *testing.T) (string, []string) {
	t.Helper()
	addr := freePort(t)
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	return "http://" + addr, []string{"-Drest.port=" + port, "-Drest.bind-port=" + port, "-Drest.address=127.0.0.1", "-Drest.bind-address=127.0.0.1"}
}

// restJob is a running job with its REST endpoint.
type restJob struct {
	*flinkJob
	id       string
	endpoint string
	cl       *flinkrest.Client
}

// startRESTJob starts a job (version "2.2" or "2.2+forst") with its REST endpoint on 127.0.0.1 and
// waits until the endpoint reports it RUNNING.
func startRESTJob(t *testing.T, version, name string, o jobOpts) restJob {
	t.Helper()
	endpoint, flags := restEndpoint(t)
	o.Extra = append(append([]string{}, o.Extra...), flags...)
	j := startJob(t, version, name, o)
	id := j.jobID()
	cl, err := flinkrest.New(flinkrest.Config{URL: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	waitREST(t, cl, id)
	return restJob{flinkJob: j, id: id, endpoint: endpoint, cl: cl}
}

// stats reads the job's checkpoint statistics (nil while the endpoint does not answer).
func (r restJob) stats() *flinkrest.CheckpointStats {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := r.cl.Checkpoints(ctx, r.id)
	if err != nil {
		return nil
	}
	return &st
}

// state is the job's state in the endpoint's overview ("" when unknown or unreachable).
func (r restJob) state() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ov, err := r.cl.Overview(ctx)
	if err != nil {
		return ""
	}
	for _, j := range ov {
		if j.ID == r.id {
			return j.State
		}
	}
	return ""
}

var forstAttemptName = regexp.MustCompile(`^op_(.+)_attempt_(\d+)$`)

// forstAttempts splits the ForSt working folders op_<op>_attempt_<n> below root into the newest
// attempt of each operator and the older ones.
func forstAttempts(t *testing.T, root string) (newest, older []string) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(root, "op_*_attempt_*"))
	best := map[string]int{}
	for _, d := range dirs {
		m := forstAttemptName.FindStringSubmatch(filepath.Base(d))
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		if b, ok := best[m[1]]; !ok || n > b {
			best[m[1]] = n
		}
	}
	for _, d := range dirs {
		m := forstAttemptName.FindStringSubmatch(filepath.Base(d))
		if m == nil {
			continue
		}
		if n, _ := strconv.Atoi(m[2]); n == best[m[1]] {
			newest = append(newest, d)
		} else {
			older = append(older, d)
		}
	}
	sort.Strings(newest)
	sort.Strings(older)
	return newest, older
}

// failover makes the job's subtask 0 throw once and waits until the endpoint reports the job
// RUNNING again, restored from a checkpoint with an id of at least minID; it returns that id.
func (r restJob) failover(t *testing.T, minID int64) int64 {
	t.Helper()
	mark := r.mark()
	r.fail()
	r.waitFor(mark, 2*time.Minute, eventNamed("induced-failure"))
	var restored int64
	mntWaitFor(t, 2*time.Minute, "job "+r.id+" RUNNING again, restored from checkpoint "+strconv.FormatInt(minID, 10)+" or newer", func() bool {
		if r.state() != "RUNNING" {
			return false
		}
		st := r.stats()
		if st == nil || st.Latest.Restored == nil || st.Latest.Restored.ID < minID {
			return false
		}
		restored = st.Latest.Restored.ID
		return true
	})
	return restored
}

// e2eForStCleanup: a ForSt job that restarted once (so that an older attempt folder exists), every
// file backdated by 10 days, then `find -mtime +7 -delete` and `rm -rf` of the older attempt folders:
// through a --flink-rest mount (guarded) the job checkpoints, fails over, restores and keeps running;
// on the store itself (the control) the job is lost.
func e2eForStCleanup(t *testing.T, guarded bool) {
	buildFlinkVariant(t, "2.2", "forst")
	store := filepath.Join(t.TempDir(), "store")
	ck := filepath.Join(store, "ck")
	if err := os.MkdirAll(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	j := startRESTJob(t, "2.2+forst", "F", jobOpts{CheckpointDir: ck, Extra: []string{"--async-state", "-Dstate.backend.type=forst"}})
	_, i := j.waitCheckpoints(0, 3, 2*time.Minute)
	first, _ := j.lastCheckpoint()
	firstID, _ := strconv.ParseInt(first.Fields["id"], 10, 64)
	// One restart: the new attempt's database links files of the older attempt's folder.
	j.failover(t, firstID)
	j.waitCheckpoints(i, 2, 2*time.Minute)
	jobFolder := filepath.Join(ck, j.id)
	newest, older := forstAttempts(t, filepath.Join(jobFolder, "shared"))
	if len(older) == 0 {
		t.Fatalf("no older ForSt attempt folder after a restart; working folders: %v", newest)
	}
	olderFiles := 0
	for _, d := range older {
		olderFiles += len(e2eFilesUnder(t, d))
	}
	t.Logf("ForSt working folders: newest %v, older %v (%d files)", rels(store, newest), rels(store, older), olderFiles)
	if latest, ok := j.lastCheckpoint(); ok {
		if n := refsBelow(t, filepath.Join(flinkCheckpointDir(latest), "_metadata"), older); n >= 0 {
			t.Logf("the latest checkpoint %s references %d files below the older attempt folders", latest.Fields["id"], n)
		}
	}

	e2eBackdate(t, store, 10*24*time.Hour)
	mark := j.mark()
	if !guarded {
		// The control: the same cleanup on the store itself.
		out, code := mntRun(t, "", "find", store, "-mtime", "+7", "-delete")
		t.Logf("find %s -mtime +7 -delete: exit %d %s", store, code, oneLine(out, 3))
		for _, d := range older {
			out, code := mntRun(t, "", "rm", "-rf", d)
			t.Logf("rm -rf %s: exit %d %s", d, code, oneLine(out, 3))
		}
		// The incident: the next checkpoint of the running job fails on a file of its working folder
		// the cleanup deleted (measured on 2.2.0: "Could not materialize checkpoint N …
		// FileNotFoundException: File …/shared/op_…_attempt_1/db/<uuid> does not exist"), the failover
		// that follows hangs in ForSt's dispose and no checkpoint completes any more.
		missing := regexp.MustCompile(`FileNotFoundException: File file:\S*` + regexp.QuoteMeta(jobFolder) + `/shared/op_[^/ ]+/db/\S+ does not exist`)
		var seen string
		mntWaitFor(t, 2*time.Minute, "the job failing on a deleted file of its working folder", func() bool {
			b, _ := os.ReadFile(j.log)
			seen = missing.FindString(string(b))
			return seen != ""
		})
		t.Logf("control: %s", seen)
		// Past the failure, no checkpoint completes (the job is lost); 10 s are 10 checkpoint intervals.
		_, _, err := j.tryWaitFor(mark, 10*time.Second, eventNamed("checkpoint-completed"))
		if err == nil {
			t.Errorf("without the guard, a checkpoint completed after the cleanup deleted the working folder's files: the job was not lost\n%s", j.tail())
		}
		if st := j.stats(); st != nil && st.Latest.Completed != nil {
			t.Logf("control: REST state %q, latest completed checkpoint %d, %d failed", j.state(), st.Latest.Completed.ID, st.Counts.Failed)
		}
		return
	}

	p := mntStart(t, store, "", "--flink-rest", j.endpoint, "--active-window", "1h", "--grace", "10m")
	rel := func(f string) string { r, _ := filepath.Rel(store, f); return filepath.ToSlash(r) }
	mntRun(t, "", "find", p.mnt, "-mtime", "+7", "-delete")
	for _, d := range older {
		if out, code := mntRun(t, "", "rm", "-rf", p.m(rel(d))); code == 0 {
			t.Errorf("rm -rf of the running job's older ForSt attempt folder %s: exit 0 (%s)", rel(d), out)
		}
	}
	prefix := rel(jobFolder) + "/"
	refused := 0
	for _, r := range p.auditRecords() {
		if !strings.HasPrefix(r.Path+"/", prefix) {
			continue
		}
		if r.Decision == "allow" {
			t.Errorf("the mount allowed %s %s in the running job's folder", r.Op, r.Path)
		} else if r.Reason == "flink-running" {
			refused++
		}
	}
	if refused == 0 {
		t.Errorf("no refusal with reason flink-running in %s", prefix)
	}
	t.Logf("%d refusals (flink-running) in the job folder", refused)
	for _, d := range older {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("older attempt folder %s: %v", rel(d), err)
		}
	}

	// The next checkpoint, then a failover restoring from it (or a newer one), then more checkpoints.
	next, k := j.waitCheckpoints(mark, 1, 2*time.Minute)
	nextID, _ := strconv.ParseInt(next.Fields["id"], 10, 64)
	restored := j.failover(t, nextID)
	j.waitCheckpoints(k, 2, 2*time.Minute)
	if st := j.state(); st != "RUNNING" {
		t.Errorf("job state after the restore: %q", st)
	}
	t.Logf("after the cleanup: checkpoint %d completed, the failover restored checkpoint %d (latest.restored), 2 more checkpoints completed", nextID, restored)
}

// e2eForStS3Cleanup is the guarded half of e2eForStCleanup with the checkpoints and the ForSt
// working folders in an S3 bucket (Flink 2.2 with Hadoop's S3A, the Maven variants s3a,forst); files
// are backdated in the server's posix folder (its objects' LastModified).
func e2eForStS3Cleanup(t *testing.T) {
	e2eRequireFUSE(t)
	s := startS3AEnvVariant(t, "2.2", "s3a,forst")
	j := startRESTJob(t, s.version, "S", jobOpts{CheckpointDir: s.local, Extra: append(append([]string{}, s.flags...), "--async-state", "-Dstate.backend.type=forst", "--interval", "3s")})
	_, i := j.waitCheckpoints(0, 3, 2*time.Minute)
	first, _ := j.lastCheckpoint()
	if !strings.HasPrefix(first.Fields["path"], s.uri+"/") {
		t.Fatalf("checkpoint %s is not under %s: Flink did not write through s3a", first.Fields["path"], s.uri)
	}
	firstID, _ := strconv.ParseInt(first.Fields["id"], 10, 64)
	j.failover(t, firstID)
	j.waitCheckpoints(i, 2, 2*time.Minute)
	jobFolder := filepath.Join(s.local, j.id)
	newest, older := forstAttempts(t, filepath.Join(jobFolder, "shared"))
	if len(newest) == 0 || len(older) == 0 {
		t.Fatalf("ForSt working folders in the bucket: newest %v, older %v; want both", newest, older)
	}
	working := 0
	for _, d := range append(append([]string{}, newest...), older...) {
		working += len(e2eFilesUnder(t, d))
	}
	t.Logf("ForSt working folders in the bucket: newest %v, older %v, %d objects", rels(s.local, newest), rels(s.local, older), working)

	mark := j.mark()
	g := startGuardMountOn(t, s.local, "s3://"+s.bucket+"/ck", []string{"--s3-endpoint", s.srv.Endpoint, "--s3-path-style", "--s3-region", s3server.Region}, true,
		"--flink-rest", j.endpoint, "--active-window", "1h", "--grace", "10m")
	g.settle()
	// On S3 ForSt replaces its working files within seconds (measured on 2.2.0 with 1 s checkpoints:
	// every object of the job's folder younger than 6 s; hence 3 s checkpoints here), so the objects
	// are backdated once the mount is up and the cleanup through it is repeated until it has tried to
	// delete a file of the job's folder.
	prefix := j.id + "/"
	refused := map[string]int{}
	scan := func() {
		b, err := os.ReadFile(filepath.Join(g.index, "audit.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		clear(refused)
		for _, l := range strings.Split(string(b), "\n") {
			var r audit.Record
			if json.Unmarshal([]byte(l), &r) != nil || !strings.Contains(r.Path+"/", prefix) {
				continue
			}
			if r.Decision == "allow" {
				t.Fatalf("the S3 mount allowed %s %s in the running job's folder", r.Op, r.Path)
			} else if r.Reason == "flink-running" {
				refused[r.Op]++
			}
		}
	}
	rounds := 0
	mntWaitFor(t, 90*time.Second, "find -mtime +7 -delete through the S3 mount trying a file of the job's folder", func() bool {
		rounds++
		e2eBackdate(t, s.local, 10*24*time.Hour)
		time.Sleep(2500 * time.Millisecond) // a sync (--sync-interval 2s) of the mount; retried when slower
		mntRun(t, "", "find", g.mnt, "-mtime", "+7", "-delete")
		scan()
		return refused["unlink"] > 0
	})
	for _, d := range older {
		if out, code := mntRun(t, "", "rm", "-rf", g.inMount(d)); code == 0 {
			t.Errorf("rm -rf of the running job's older ForSt attempt folder %s through the S3 mount: exit 0 (%s)", d, out)
		}
	}
	scan()
	t.Logf("cleanup rounds through the S3 mount: %d; refusals (flink-running) in the job folder by op: %v", rounds, refused)
	next, k := j.waitCheckpoints(mark, 1, 2*time.Minute)
	nextID, _ := strconv.ParseInt(next.Fields["id"], 10, 64)
	restored := j.failover(t, nextID)
	j.waitCheckpoints(k, 2, 2*time.Minute)
	t.Logf("on S3, after the cleanup: checkpoint %d completed, the failover restored checkpoint %d (latest.restored), 2 more checkpoints completed", nextID, restored)
}

// refsBelow is how many of the files Flink's loader reports for metadata lie below one of dirs
// (-1 when the _metadata is gone, e.g. subsumed meanwhile).
func refsBelow(t *testing.T, metadata string, dirs []string) int {
	t.Helper()
	if _, err := os.Stat(metadata); err != nil {
		return -1
	}
	refs := listReferences(t, "2.2+forst", metadata)
	if len(refs) == 0 {
		return -1
	}
	n := 0
	for p := range referencedFiles(refs, "", "") {
		for _, d := range dirs {
			if strings.HasPrefix(p, d+"/") {
				n++
				break
			}
		}
	}
	return n
}

// e2eFailingCheckpoints: a ForSt job whose checkpoints fail for longer than --active-window and which
// stays RUNNING: the control operator holds a snapshot, so that checkpoint and the ones queued behind
// it expire after the 5 s checkpoint timeout, which the job tolerates.
func e2eFailingCheckpoints(t *testing.T) {
	buildFlinkVariant(t, "2.2", "forst")
	store := filepath.Join(t.TempDir(), "store")
	ck := filepath.Join(store, "ck")
	if err := os.MkdirAll(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	hold := filepath.Join(t.TempDir(), "hold")
	j := startRESTJob(t, "2.2+forst", "D", jobOpts{CheckpointDir: ck, Extra: []string{"--async-state", "-Dstate.backend.type=forst",
		"--hold-checkpoints-file", hold, "-Dexecution.checkpointing.timeout=5s", "-Dexecution.checkpointing.tolerable-failed-checkpoints=1000000"}})
	j.waitCheckpoints(0, 3, 2*time.Minute)
	mark := j.mark()
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(hold)
	j.waitFor(mark, 2*time.Minute, eventNamed("checkpoint-held"))
	// The newest completed checkpoint: none completes while the snapshot is held.
	st := j.stats()
	if st == nil || st.Latest.Completed == nil {
		t.Fatalf("the endpoint reports no completed checkpoint: %+v", st)
	}
	lastID, failed0 := st.Latest.Completed.ID, st.Counts.Failed
	meta := filepath.Join(flinkLocalPath(st.Latest.Completed.ExternalPath), "_metadata")
	fi, err := os.Stat(meta)
	if err != nil {
		t.Fatalf("the newest completed checkpoint's _metadata: %v", err)
	}
	rel := func(f string) string { r, _ := filepath.Rel(store, f); return filepath.ToSlash(r) }
	const window = 5 * time.Second
	flags := []string{"--active-window", window.String(), "--grace", "1s"}
	withREST := mntStart(t, store, "", append([]string{"--flink-rest", j.endpoint}, flags...)...)
	storeOnly := mntStart(t, store, "", flags...)

	// Checkpoints keep failing for longer than the window (plus two syncs), the job stays RUNNING.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		s := j.stats()
		if s != nil && s.Latest.Completed != nil && s.Latest.Completed.ID != lastID {
			t.Fatalf("checkpoint %d completed while the control operator holds its snapshot:\n%s", s.Latest.Completed.ID, j.tail())
		}
		if time.Since(fi.ModTime()) > window+2*time.Second && s != nil && s.Counts.Failed >= failed0+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for checkpoints failing for longer than --active-window: stats %+v, state %q\n%s", s, j.state(), j.tail())
		}
	}
	if s := j.state(); s != "RUNNING" {
		t.Fatalf("job state while its checkpoints fail: %q", s)
	}
	s := j.stats()
	t.Logf("checkpoint %d completed %s ago, %d checkpoints failed since", lastID, time.Since(fi.ModTime()).Round(time.Second), s.Counts.Failed-failed0)

	// Without the REST endpoint the store's rules let the restore point go: the incident.
	out, code := storeOnly.cli("why", rel(meta))
	if code != 0 {
		t.Errorf("without --flink-rest, why %s: exit %d; want 0 (allowed: the job's newest checkpoint is past --active-window):\n%s", rel(meta), code, out)
	}
	out, code = withREST.cli("why", rel(meta))
	if code != 1 || !strings.Contains(out, "flink-running") || !strings.Contains(out, "is RUNNING on "+j.endpoint) {
		t.Errorf("with --flink-rest, why %s: exit %d; want refused naming flink-running and the endpoint:\n%s", rel(meta), code, out)
	}
	if out, code := mntRun(t, "", "rm", withREST.m(rel(meta))); code == 0 {
		t.Errorf("rm of the running job's newest checkpoint through the --flink-rest mount: exit 0 (%s)", out)
	}
	if _, err := os.Stat(meta); err != nil {
		t.Errorf("the newest checkpoint's _metadata: %v", err)
	}
	// Its working folder: what the database wrote after the newest completed checkpoint is referenced
	// by no _metadata (ForSt's checkpoints reference the working folder's files themselves), yet live.
	newest, _ := forstAttempts(t, filepath.Join(ck, j.id, "shared"))
	if len(newest) == 0 {
		t.Fatal("no ForSt working folder")
	}
	var unref []string
	for _, d := range newest {
		for _, f := range e2eFilesUnder(t, d) {
			if fi2, err := os.Stat(f); err == nil && fi2.ModTime().After(fi.ModTime()) {
				unref = append(unref, f)
			}
		}
	}
	if len(unref) == 0 {
		t.Fatalf("no file of the ForSt working folders %v written after checkpoint %d", rels(store, newest), lastID)
	}
	t.Logf("%d files of the working folders written after checkpoint %d", len(unref), lastID)
	running := 0
	for i, f := range unref {
		// A file changed after the checkpoint may still be one it references (refused for that).
		out, code := withREST.cli("why", rel(f))
		if code != 1 {
			t.Errorf("with --flink-rest, why %s (ForSt working folder, written after the newest checkpoint): exit %d; want refused:\n%s", rel(f), code, out)
		}
		if strings.Contains(out, "reason: flink-running") {
			running++
		}
		if i == 0 {
			// Without the endpoint the layout rule keeps it while the folder has recent files.
			outStore, codeStore := storeOnly.cli("why", rel(f))
			t.Logf("without --flink-rest, why %s: exit %d, %s", rel(f), codeStore, oneLine(outStore, 2))
		}
	}
	if running == 0 {
		t.Errorf("none of the %d working-folder files written after checkpoint %d is refused for flink-running", len(unref), lastID)
	}
	t.Logf("%d of them refused for flink-running (the job is RUNNING on the endpoint)", running)
	for _, d := range newest {
		if out, code := mntRun(t, "", "rm", "-rf", withREST.m(rel(d))); code == 0 {
			t.Errorf("rm -rf of the ForSt working folder %s through the --flink-rest mount: exit 0 (%s)", rel(d), out)
		}
	}
	for _, r := range withREST.auditRecords() {
		if r.Decision == "allow" && strings.HasPrefix(r.Path+"/", rel(filepath.Join(ck, j.id))+"/") {
			t.Errorf("the --flink-rest mount allowed %s %s in the running job's folder", r.Op, r.Path)
		}
	}
	// Checkpoints succeed again once the marker is gone: the job needed nothing that was refused.
	mark = j.mark()
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	j.waitCheckpoints(mark, 1, 2*time.Minute)
}

// e2eInFlightPastGrace: a RocksDB job's checkpoint held IN_PROGRESS (the control operator's snapshot
// waits; the stateful operator upstream has uploaded its new SSTs) for longer than --grace.
func e2eInFlightPastGrace(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	ck := filepath.Join(store, "ck")
	if err := os.MkdirAll(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	hold := filepath.Join(t.TempDir(), "hold")
	// Every checkpoint is retained: the held one is never subsumed, so its _metadata names its files for
	// as long as the job runs (a later checkpoint need not: RocksDB compacts them away).
	j := startRESTJob(t, "2.2", "H", jobOpts{CheckpointDir: ck, Extra: []string{"--hold-checkpoints-file", hold,
		"-Dexecution.checkpointing.num-retained=1000"}})
	j.waitCheckpoints(0, 3, 2*time.Minute)
	const grace = 2 * time.Second
	flags := []string{"--active-window", "1h", "--grace", grace.String()}
	withREST := mntStart(t, store, "", append([]string{"--flink-rest", j.endpoint}, flags...)...)
	storeOnly := mntStart(t, store, "", flags...)
	rel := func(f string) string { r, _ := filepath.Rel(store, f); return filepath.ToSlash(r) }
	shared := filepath.Join(ck, j.id, "shared")

	before := map[string]bool{}
	for _, f := range e2eFilesUnder(t, shared) {
		before[f] = true
	}
	mark := j.mark()
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	held, _ := j.waitFor(mark, 2*time.Minute, eventNamed("checkpoint-held"))
	id, _ := strconv.ParseInt(held.Fields["id"], 10, 64)
	released := false
	release := func() {
		if !released {
			released = true
			_ = os.Remove(hold)
		}
	}
	defer release()
	// The held checkpoint's new files: uploaded, older than --grace (plus a sync), while the endpoint
	// reports the checkpoint IN_PROGRESS.
	var fresh []string
	mntWaitFor(t, 40*time.Second, "new files of checkpoint "+held.Fields["id"]+" older than --grace", func() bool {
		fresh = fresh[:0]
		newestMod := time.Time{}
		for _, f := range e2eFilesUnder(t, shared) {
			if before[f] {
				continue
			}
			fresh = append(fresh, f)
			if fi, err := os.Stat(f); err == nil && fi.ModTime().After(newestMod) {
				newestMod = fi.ModTime()
			}
		}
		return len(fresh) > 0 && time.Since(newestMod) > grace+2*time.Second
	})
	st := j.stats()
	if st == nil {
		t.Fatal("the endpoint does not answer")
	}
	inProgress := false
	for _, h := range st.History {
		if h.ID == id && h.Status == "IN_PROGRESS" {
			inProgress = true
		}
	}
	if !inProgress {
		t.Fatalf("the endpoint does not report checkpoint %d IN_PROGRESS: %+v", id, st)
	}
	t.Logf("checkpoint %d held in progress; %d new files in shared/", id, len(fresh))
	f := fresh[0]
	// Without the endpoint: an unreferenced file past --grace, deletable (the gap).
	if out, code := storeOnly.cli("why", rel(f)); code != 0 {
		t.Errorf("without --flink-rest, why %s: exit %d; want 0 (unreferenced, past --grace):\n%s", rel(f), code, out)
	}
	out, code := withREST.cli("why", rel(f))
	if code != 1 || !strings.Contains(out, "flink-running") || !strings.Contains(out, "in progress") {
		t.Errorf("with --flink-rest, why %s: exit %d; want refused, flink-running, naming the checkpoint in progress:\n%s", rel(f), code, out)
	}
	for _, f := range fresh {
		if out, code := mntRun(t, "", "rm", withREST.m(rel(f))); code == 0 {
			t.Errorf("rm %s (a file of in-flight checkpoint %d) through the --flink-rest mount: exit 0 (%s)", rel(f), id, out)
		}
	}
	release()
	j.waitFor(mark, 60*time.Second, func(e flinkEvent) bool {
		return e.Name == "checkpoint-completed" && e.Fields["id"] == held.Fields["id"]
	})
	// Once complete, its _metadata references them: refused by the store's own rules, naming the held
	// checkpoint (retained: see the job's options).
	heldMeta := fmt.Sprintf("%s/chk-%d/_metadata", rel(filepath.Join(ck, j.id)), id)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, code := storeOnly.cli("why", rel(f))
		if code == 1 && strings.Contains(out, heldMeta) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s after checkpoint %d completed, why %s through the store-only mount: exit %d, want refused naming %s:\n%s", id, rel(f), code, heldMeta, out)
		}
	}
	for _, f := range fresh {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("file of checkpoint %d: %v", id, err)
		}
	}
}

func rels(base string, paths []string) []string {
	var out []string
	for _, p := range paths {
		r, _ := filepath.Rel(base, p)
		out = append(out, r)
	}
	return out
}

// oneLine is the first n lines of s joined on one line, for logs.
func oneLine(s string, n int) string {
	return strings.ReplaceAll(firstLines(strings.TrimSpace(s), n), "\n", " | ")
}
