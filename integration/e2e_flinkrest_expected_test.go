package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/flinkrest"
)

// TestE2EFlinkRESTExpected: Flink deletes a checkpoint it subsumed itself (its _metadata and files at
// once since 1.15), and marks it discarded in the REST history first. With --flink-rest, a checkpoint
// whose files are gone while its _metadata is still in the store is then reported by the loss check
// as expected (audit decision "expected", ckguard_loss_expected_objects), not lost. The moment Flink
// leaves between the two deletions is too short to catch, so the test makes it last: it keeps a copy
// of a retained checkpoint's _metadata, waits until the real JobManager lists the checkpoint as
// discarded and has deleted it, and puts the _metadata back beside the mount. The same without
// --flink-rest is a loss (the control).
//
// Not covered: a delete_on_cancellation cleanup. The e2e job runs on a local environment whose
// MiniCluster, and so its REST endpoint, shuts down as soon as the job ends, so CANCELED is never
// reported there (a session cluster that outlives its jobs would be needed).
func TestE2EFlinkRESTExpected(t *testing.T) {
	e2eRequire(t)
	mntRequire(t)
	for _, v := range flinkVersions() {
		t.Run(v, func(t *testing.T) { e2eFlinkRESTExpected(t, v) })
	}
}

func e2eFlinkRESTExpected(t *testing.T, version string) {
	base := t.TempDir()
	store := filepath.Join(base, "store")
	ck := filepath.Join(store, "ck")
	if err := os.MkdirAll(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	endpoint := "http://" + addr
	// Checkpoints 2 s apart and a long history: the discarded entry stays listed for the test's span.
	// No state inlined in the _metadata (RocksDB's small private files of a checkpoint, MANIFEST and
	// the like, are inlined below the threshold: 1.20's checkpoints then reference only shared SSTs
	// the next ones still use, and Flink's cleanup of one leaves nothing it references missing).
	j := startJob(t, version, "D", jobOpts{CheckpointDir: ck, Extra: []string{"--interval", "2s", "-Dweb.checkpoints.history=100",
		"-Dstate.storage.fs.memory-threshold=0", "-Dexecution.checkpointing.data-inline-threshold=0",
		"-Drest.port=" + port, "-Drest.bind-port=" + port, "-Drest.address=127.0.0.1", "-Drest.bind-address=127.0.0.1"}})
	defer j.stop()
	id := j.jobID()
	j.waitCheckpoints(0, 2, 2*time.Minute)
	cl, err := flinkrest.New(flinkrest.Config{URL: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	waitREST(t, cl, id)
	report := func() flinkrest.Job {
		rep, err := cl.Report(context.Background())
		if err != nil {
			t.Fatalf("REST report: %v", err)
		}
		for _, jb := range rep.Jobs {
			if jb.ID == id {
				return jb
			}
		}
		t.Fatalf("REST report without job %s: %+v", id, rep)
		return flinkrest.Job{}
	}
	// A retained checkpoint, its _metadata kept aside.
	latest := report().LatestCompleted
	dir := strings.TrimPrefix(strings.TrimPrefix(latest, "file://"), "file:")
	meta, err := os.ReadFile(filepath.Join(dir, "_metadata"))
	if err != nil {
		t.Fatalf("latest completed checkpoint %s: %v", latest, err)
	}
	rel, _ := filepath.Rel(store, dir)
	rel = filepath.ToSlash(rel)

	metricsOn, metricsOff := freePort(t), freePort(t)
	on := mntStart(t, store, "", "--flink-rest", endpoint, "--metrics-addr", metricsOn)
	off := mntStart(t, store, "", "--metrics-addr", metricsOff) // the control: no REST facts

	// Flink subsumes it: listed discarded, and its folder deleted.
	mntWaitFor(t, 2*time.Minute, "Flink listing "+rel+" as discarded and deleting it", func() bool {
		if !slices.Contains(report().Discarded, latest) {
			return false
		}
		_, err := os.Stat(filepath.Join(dir, "_metadata"))
		return os.IsNotExist(err)
	})
	// The _metadata back beside the mounts: a checkpoint whose files Flink deleted.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "_metadata"), meta, 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	found := func(p *mntProc, decision string) int {
		n := 0
		for _, r := range p.auditRecords() {
			if r.Op == "loss-check" && r.Decision == decision && slices.Contains(r.Referencing, rel+"/_metadata") {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(time.Minute)
	for found(on, "expected") == 0 || found(off, "missing") == 0 {
		if time.Now().After(deadline) {
			var recs []string
			for i, p := range []*mntProc{on, off} {
				for _, r := range p.auditRecords() {
					if r.Op == "loss-check" {
						recs = append(recs, []string{"with REST: ", "without: "}[i]+r.Decision+" "+r.Path+" "+strings.Join(r.Referencing, ","))
					}
				}
			}
			if s := on.stats(); s.Flink != nil {
				for _, e := range s.Flink.Endpoints {
					for _, jb := range e.Jobs {
						t.Logf("the mount's REST facts: %s up=%v job %s %s discarded %d, first %v", e.URL, e.Up, jb.ID, jb.State, len(jb.Discarded), jb.Discarded[:min(2, len(jb.Discarded))])
					}
				}
			}
			entries, _ := os.ReadDir(dir)
			t.Fatalf("no loss check records of %s within a minute (expected %d with --flink-rest, missing %d without); loss-check records: %v; %s holds %d entries; REST discarded %v",
				rel, found(on, "expected"), found(off, "missing"), mntHead(recs), rel, len(entries), report().Discarded)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s: %d object(s) expected with --flink-rest, %d missing without, %s after the _metadata came back",
		rel, found(on, "expected"), found(off, "missing"), time.Since(t0).Round(100*time.Millisecond))
	if n := found(on, "missing"); n != 0 {
		t.Errorf("with --flink-rest, %d loss record(s) for %s, which Flink reports discarded", n, rel)
	}
	for _, r := range on.auditRecords() {
		if r.Decision == "expected" && slices.Contains(r.Referencing, rel+"/_metadata") && !strings.Contains(r.Message, "as discarded") {
			t.Errorf("expected record without the reason: %+v", r)
		}
	}
	if v, ok := metricValue(mntHTTPGet(t, "http://"+metricsOn+"/metrics"), "ckguard_loss_expected_objects"); !ok || v < 1 {
		t.Errorf("ckguard_loss_expected_objects = %v (found %v); want at least 1", v, ok)
	}
	if v, ok := metricValue(mntHTTPGet(t, "http://"+metricsOn+"/metrics"), "ckguard_broken_checkpoints", `job="ck/`+id+`"`); ok && v != 0 {
		t.Errorf("ckguard_broken_checkpoints{job=ck/%s} = %v with --flink-rest; want 0", id, v)
	}
}
