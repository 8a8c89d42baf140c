package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/flinkrest"
)

// TestE2EFlinkREST: a guard mount with --flink-rest pointed at a real Flink MiniCluster's REST
// endpoint on 127.0.0.1 (RocksDB incremental checkpoints; see the report in DEVELOPING.md for why
// not ForSt). Job A ran and stopped; job B was restored from A's latest checkpoint and runs. With
// --active-window 1h and every file of the store backdated by 10 days, the store's own rules see both
// jobs as inactive, so only what Flink reports keeps B's folder and its restore point:
//   - `find -mtime +7 -delete` and `rm -rf` of B's folder through the mount delete nothing of B's
//     folder nor A's checkpoint B restored from; A's other old checkpoint goes; B takes its next
//     checkpoints; `why` names "is RUNNING on <endpoint>";
//   - B's JobManager killed (the endpoint stops answering): B's folder stays protected ("was
//     RUNNING"), A's garbage is still deleted; stats shows the endpoint down, the log says so once,
//     ckguard_flink_rest_up is 0;
//   - another cluster answering at the address again: B (unknown to it) falls back to the store's
//     rules within one sync.
//
// With CKGUARD_RECORD_FLINK_REST=1 it records the endpoint's answers about B into
// refindex/flinkrest/testdata/flink-<version>.json (the unit tests there read them).
func TestE2EFlinkREST(t *testing.T) {
	e2eRequire(t)
	mntRequire(t)
	for _, v := range flinkRESTVersions() {
		t.Run(v, func(t *testing.T) { e2eFlinkREST(t, v, nil) })
		if forstServed(v) {
			// ForSt on the asynchronous state API: the running job's database in
			// <job>/shared/op_*_attempt_*/db/ (the default primary dir).
			t.Run(v+"+forst", func(t *testing.T) {
				buildFlinkVariant(t, v, "forst")
				e2eFlinkREST(t, v+"+forst", []string{"--async-state", "-Dstate.backend.type=forst"})
			})
			// The same with an explicit primary dir under the store: <store>/forst/<job id>/op_*_attempt_*/
			// (not for flinkNewest in the default run: the other 2.x cover it).
			if v == flinkNewest && os.Getenv("CKGUARD_E2E_FLINK") == "" {
				continue
			}
			t.Run(v+"+forst-primary", func(t *testing.T) {
				buildFlinkVariant(t, v, "forst")
				e2eFlinkREST(t, v+"+forst", []string{"--async-state", "-Dstate.backend.type=forst", "-Dstate.backend.forst.primary-dir=file://STORE/forst"})
			})
		}
	}
}

// forstServed reports whether the forst Maven profile builds for a Flink version: Maven Central
// has flink-statebackend-forst for 2.0.0 but not for 2.0.1, the version the flink-2.0 profile
// pins, so the ForSt subtests run on 2.2 and later only (prefetch.sh fetches 2.2+forst and 2.3+forst).
func forstServed(version string) bool {
	return strings.HasPrefix(version, "2.") && version != "2.0"
}

func e2eFlinkREST(t *testing.T, version string, backend []string) {
	base := t.TempDir()
	store := filepath.Join(base, "store")
	ck := filepath.Join(store, "ck")
	if err := os.MkdirAll(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	primary := ""
	backend = append([]string(nil), backend...)
	for i, f := range backend {
		if strings.Contains(f, "STORE") {
			backend[i] = strings.Replace(f, "STORE", store, 1)
			primary = filepath.Join(store, "forst")
		}
	}
	a := startJob(t, version, "A", jobOpts{CheckpointDir: ck, StopAfter: 4, Extra: backend})
	a.waitDone(3 * time.Minute)
	aLast, ok := a.lastCheckpoint()
	if !ok {
		t.Fatal("job A completed no checkpoint")
	}
	aID := a.jobID()
	aRestore := flinkCheckpointDir(aLast)

	addr := freePort(t)
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	restFlags := []string{"-Drest.port=" + port, "-Drest.bind-port=" + port, "-Drest.address=127.0.0.1", "-Drest.bind-address=127.0.0.1"}
	endpoint := "http://" + addr
	b := startJob(t, version, "B", jobOpts{CheckpointDir: ck, Restore: aRestore, ClaimMode: "NO_CLAIM", Extra: append(append([]string{}, backend...), restFlags...)})
	bID := b.jobID()
	b.waitCheckpoints(0, 3, 2*time.Minute)
	cl, err := flinkrest.New(flinkrest.Config{URL: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	waitREST(t, cl, bID)
	recordFlinkREST(t, version, cl, bID)

	// Garbage of the test's own: an unreferenced file in each job's folder, 10 days old.
	bGarbage := filepath.Join(ck, bID, "shared", "ckguard-e2e-garbage")
	aGarbage := filepath.Join(ck, aID, "shared", "ckguard-e2e-garbage")
	for _, f := range []string{bGarbage, aGarbage} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e2eBackdate(t, store, 10*24*time.Hour)
	metrics := freePort(t)
	p := mntStart(t, store, "", "--flink-rest", endpoint, "--active-window", "1h", "--grace", "10m", "--metrics-addr", metrics)
	rel := func(f string) string { r, _ := filepath.Rel(store, f); return filepath.ToSlash(r) }

	// What the cleanup may not touch: every file of B's folder now, and A's checkpoint B restored from.
	bFolder := filepath.Join(ck, bID)
	keep := e2eFilesUnder(t, bFolder)
	keep = append(keep, filepath.Join(aRestore, "_metadata"))
	var aOlder string
	for _, m := range e2eLiveMetadata(t, filepath.Join(ck, aID)) {
		if filepath.Dir(m) != aRestore {
			aOlder = m
		}
	}
	if aOlder == "" {
		t.Fatalf("job A retained no checkpoint besides %s", aRestore)
	}
	// ForSt: B's working folders (every file in them backdated above), each removed with rm -rf.
	workRoot := filepath.Join(bFolder, "shared")
	if primary != "" {
		workRoot = filepath.Join(primary, bID)
	}
	attempts, _ := filepath.Glob(filepath.Join(workRoot, "op_*_attempt_*"))
	if backend != nil && len(attempts) == 0 {
		t.Fatalf("no ForSt working folder in %s", workRoot)
	}
	working := 0
	for _, at := range attempts {
		working += len(e2eFilesUnder(t, at))
	}
	t.Logf("ForSt working folders of B: %d, %d files", len(attempts), working)
	mark := b.mark()
	mntRun(t, "", "find", p.mnt, "-mtime", "+7", "-delete")
	for _, at := range attempts {
		if out, code := mntRun(t, "", "rm", "-rf", p.m(rel(at))); code == 0 {
			t.Errorf("rm -rf of running job B's ForSt working folder %s: exit 0 (%s)", rel(at), out)
		}
	}
	if out, code := mntRun(t, "", "rm", "-rf", p.m(rel(bFolder))); code == 0 {
		t.Errorf("rm -rf of running job B's folder through the mount: exit 0 (%s)", out)
	}
	// Flink itself discards B's subsumed checkpoints beside the mount, so the files are not compared:
	// the audit shows that the mount allowed nothing below B's folder, and A's restore point stays.
	bKeys := []string{rel(bFolder) + "/"}
	if primary != "" {
		bKeys = append(bKeys, rel(workRoot)+"/")
	}
	allowedInB := func() []string {
		var out []string
		for _, r := range p.auditRecords() {
			if r.Decision == "allow" && (strings.HasPrefix(r.Path+"/", bKeys[0]) || strings.HasPrefix(r.Path+"/", bKeys[len(bKeys)-1])) {
				out = append(out, r.Op+" "+r.Path)
			}
		}
		return out
	}
	if a := allowedInB(); len(a) > 0 {
		t.Errorf("the mount allowed changes in running job B's folder: %v", mntHead(a))
	}
	if _, err := os.Lstat(filepath.Join(aRestore, "_metadata")); err != nil {
		t.Errorf("the checkpoint job B restored from was deleted through the mount: %v", err)
	}
	t.Logf("%d files of B's folder before the cleanup", len(keep))
	if _, err := os.Lstat(aOlder); err == nil {
		t.Errorf("%s (job A's older checkpoint, 10 days old, no job running) was not deleted", aOlder)
	}
	if _, err := os.Lstat(aGarbage); err == nil {
		t.Errorf("%s (garbage in stopped job A's folder) was not deleted", aGarbage)
	}
	out, _ := p.cli("why", rel(bGarbage))
	if !strings.Contains(out, "job "+bID) || !strings.Contains(out, "is RUNNING on "+endpoint) {
		t.Errorf("why %s does not name the REST fact:\n%s", rel(bGarbage), out)
	}
	// ckguard jobs through the running mount: B running on the endpoint beside its folder; A known
	// to no cluster.
	out, _ = p.cli("jobs")
	if !regexp.MustCompile(bID+`\s+RUNNING on `+regexp.QuoteMeta(endpoint)+`\s+ck/`+bID).MatchString(out) ||
		!regexp.MustCompile(aID+`\s+-\s+ck/`+aID+`.*no cluster reports it`).MatchString(out) {
		t.Errorf("ckguard jobs:\n%s", out)
	}
	flinkRunning := 0
	for _, r := range p.auditRecords() {
		if r.Reason == "flink-running" {
			flinkRunning++
		}
	}
	if flinkRunning == 0 {
		t.Error("no audit record with reason flink-running")
	}
	// B keeps checkpointing (and needed nothing that was refused).
	b.waitCheckpoints(mark, 2, 2*time.Minute)

	// The JobManager killed: the endpoint stops answering.
	b.kill()
	mntWaitFor(t, 20*time.Second, "stats showing the endpoint down", func() bool {
		s := p.stats()
		return s.Flink != nil && len(s.Flink.Endpoints) == 1 && !s.Flink.Endpoints[0].Up && !s.Flink.Endpoints[0].Answered.IsZero()
	})
	if v, ok := metricValue(mntHTTPGet(t, "http://"+metrics+"/metrics"), "ckguard_flink_rest_up", `endpoint="`+endpoint+`"`); !ok || v != 0 {
		t.Errorf("ckguard_flink_rest_up{endpoint=%q} = %v (found %v); want 0", endpoint, v, ok)
	}
	if err := os.WriteFile(aGarbage, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	e2eBackdate(t, filepath.Dir(aGarbage), 10*24*time.Hour)
	e2eBackdate(t, bFolder, 10*24*time.Hour)
	time.Sleep(2 * time.Second) // a sync sees the backdated files
	if out, code := mntRun(t, "", "rm", p.m(rel(bGarbage))); code == 0 {
		t.Errorf("rm %s while B's endpoint does not answer: exit 0 (%s)", rel(bGarbage), out)
	}
	if out, code := mntRun(t, "", "rm", "-rf", p.m(rel(bFolder))); code == 0 {
		t.Errorf("rm -rf of B's folder while its endpoint does not answer: exit 0 (%s)", out)
	}
	if out, code := mntRun(t, "", "rm", p.m(rel(aGarbage))); code != 0 {
		t.Errorf("rm %s (another job's garbage) while B's endpoint does not answer: exit %d (%s)", rel(aGarbage), code, out)
	}
	out, _ = p.cli("why", rel(bGarbage))
	if !strings.Contains(out, "was RUNNING on "+endpoint) {
		t.Errorf("why %s while the endpoint is down does not say so:\n%s", rel(bGarbage), out)
	}
	if a := allowedInB(); len(a) > 0 {
		t.Errorf("the mount allowed changes in B's folder while its endpoint was down: %v", mntHead(a))
	}
	if _, err := os.Lstat(filepath.Join(aRestore, "_metadata")); err != nil {
		t.Errorf("the checkpoint job B restored from was deleted while B's endpoint was down: %v", err)
	}
	if n := strings.Count(p.logText(), "Flink REST endpoint does not answer"); n != 1 {
		t.Errorf("the outage is logged %d times; want once", n)
	}

	// Another cluster answers at the address: B is unknown to it, its folder falls back to the
	// store's rules within one sync.
	c := startJob(t, version, "C", jobOpts{CheckpointDir: filepath.Join(base, "other"), Extra: restFlags})
	waitREST(t, cl, c.jobID())
	answered := time.Now()
	mntWaitFor(t, 10*time.Second, "B's garbage deletable once the endpoint answers", func() bool {
		_, code := mntRun(t, "", "rm", p.m(rel(bGarbage)))
		return code == 0
	})
	t.Logf("recovery: B's garbage deletable %s after the endpoint answered (sync interval 1s)", time.Since(answered).Round(10*time.Millisecond))
	c.stop()
}

// waitREST waits until the endpoint reports job id.
func waitREST(t *testing.T, cl *flinkrest.Client, id string) {
	t.Helper()
	mntWaitFor(t, 60*time.Second, "the REST endpoint reporting job "+id, func() bool {
		ov, err := cl.Overview(context.Background())
		if err != nil {
			return false
		}
		for _, j := range ov {
			if j.ID == id && j.State == "RUNNING" {
				return true
			}
		}
		return false
	})
}

// recordFlinkREST stores the endpoint's answers about job id (CKGUARD_RECORD_FLINK_REST=1).
func recordFlinkREST(t *testing.T, version string, cl *flinkrest.Client, id string) {
	t.Helper()
	if os.Getenv("CKGUARD_RECORD_FLINK_REST") != "1" {
		return
	}
	rec := struct {
		Flink     string                     `json:"flink"`
		Job       string                     `json:"job"`
		Responses map[string]json.RawMessage `json:"responses"`
	}{Flink: version, Job: id, Responses: map[string]json.RawMessage{}}
	for _, p := range []string{"/jobs/overview", "/jobs/" + id + "/checkpoints", "/jobs/" + id + "/checkpoints/config"} {
		raw, err := cl.Raw(context.Background(), p)
		if err != nil {
			t.Fatalf("recording %s: %v", p, err)
		}
		rec.Responses[p] = raw
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(e2eRepoRoot(t), "refindex", "flinkrest", "testdata", "flink-"+version+".json")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %s", out)
}

// mntWaitFor polls cond every 200 ms until it holds, failing the test after d.
func mntWaitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
