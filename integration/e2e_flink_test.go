package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	flinkJobTimeout  = 3 * time.Minute
	flinkStepTimeout = 2 * time.Minute
	cleanupAge       = 10 * 24 * time.Hour // "older than a week" for the ops cleanup
)

// runSourceJob runs job A to 4 completed checkpoints into dir and returns its id and its latest
// retained checkpoint folder.
func runSourceJob(t *testing.T, version, dir string, o jobOpts) (jobID, chk string) {
	t.Helper()
	o.CheckpointDir = dir
	o.StopAfter = 4
	a := startJob(t, version, "A", o)
	a.waitDone(flinkJobTimeout)
	last, ok := a.lastCheckpoint()
	if !ok {
		t.Fatalf("job A completed no checkpoint\n%s", a.tail())
	}
	return a.jobID(), flinkCheckpointDir(last)
}

// startRestored starts job B from chk in the given claim mode and waits for the restore and n
// completed checkpoints of its own.
func startRestored(t *testing.T, version, name, dir, chk, mode string, n int, o jobOpts) (*flinkJob, flinkEvent) {
	t.Helper()
	o.CheckpointDir, o.Restore, o.ClaimMode = dir, chk, mode
	b := startJob(t, version, name, o)
	ev, i := b.waitFor(0, flinkStepTimeout, func(e flinkEvent) bool { return e.Name == "restored" || e.Name == "restore-failed" })
	if ev.Name != "restored" {
		t.Fatalf("job %s could not restore from %s: %s", name, chk, ev.Fields["cause"])
	}
	last, _ := b.waitCheckpoints(i, n, flinkStepTimeout)
	return b, last
}

// crossJobRefs returns the files that the retained checkpoints of chk's job (Flink's own listing)
// reference under prefix. All retained checkpoints are read because the running job may subsume
// chk itself while the loader starts.
func flinkCrossJobRefs(t *testing.T, version, chk, prefix string) []string {
	t.Helper()
	refs := listReferences(t, version, e2eLiveMetadata(t, filepath.Dir(chk))...)
	var res []string
	for p := range referencedFiles(refs, "", "") {
		if strings.HasPrefix(p, prefix) {
			res = append(res, p)
		}
	}
	return res
}

// opsCleanup is the incident's cleanup: the old job's folder is "a week old" and gets rm -rf'ed,
// then an age-based find sweep over the whole store. It returns the commands' outputs.
func e2eOpsCleanup(t *testing.T, root, oldJobDir string) string {
	t.Helper()
	e2eBackdate(t, oldJobDir, cleanupAge)
	ctx := context.Background()
	out1, code1 := e2eRun(ctx, root, "rm", "-rf", oldJobDir)
	out2, code2 := e2eRun(ctx, root, "find", root, "-type", "f", "-mtime", "+7", "-delete")
	t.Logf("cleanup: rm -rf %s → exit %d; find -mtime +7 -delete → exit %d", oldJobDir, code1, code2)
	return out1 + out2
}

// restoreAfterFailure makes the job fail a task and returns the next restored/restore-failed event.
func restoreAfterFailure(t *testing.T, j *flinkJob) flinkEvent {
	t.Helper()
	m := j.mark()
	j.fail()
	if _, _, err := j.tryWaitFor(m, flinkStepTimeout, eventNamed("induced-failure")); err != nil {
		t.Fatalf("job %s: the induced failure did not happen: %v\n%s", j.name, err, j.tail())
	}
	ev, _ := j.waitFor(m, flinkStepTimeout, func(e flinkEvent) bool { return e.Name == "restored" || e.Name == "restore-failed" })
	return ev
}

// missingFileCause returns the missing-file error (from FileNotFoundException or NoSuchFileException
// on) that made a restore fail, or "". The job's final cause names it when the restore failed on it
// alone. A subtask restores its files with several download threads, though: the first one to hit the
// missing file closes the subtask's registry, and the job may then report a sibling's "registry is
// already closed" instead. The task's own failure, logged with its causes, still names the file, so the
// job's log is searched next, for a line naming wantID (the job whose files were deleted) first.
func missingFileCause(j *flinkJob, ev flinkEvent, wantID string) string {
	markers := []string{"FileNotFoundException", "NoSuchFileException"}
	from := func(s string) string {
		for _, m := range markers {
			if i := strings.Index(s, m); i >= 0 {
				return s[i:]
			}
		}
		return ""
	}
	if c := from(ev.Fields["cause"]); c != "" {
		return c
	}
	b, _ := os.ReadFile(j.log)
	var first string
	for _, l := range strings.Split(string(b), "\n") {
		if c := from(l); c != "" {
			if strings.Contains(c, wantID) {
				return c
			}
			if first == "" {
				first = c
			}
		}
	}
	return first
}

// claimModes are the restore modes with cross-job references (LEGACY exists through 2.3).
var flinkClaimModes = []string{"CLAIM", "LEGACY"}

// TestE2EIncidentWithoutGuard is the control: real Flink, no guard. Job B restored from job A
// (CLAIM, LEGACY) references SSTs under A's shared/; the ops cleanup of A's folder on the plain
// store then makes B's next failover fail with the missing-file error: the incident.
func TestE2EIncidentWithoutGuard(t *testing.T) {
	e2eRequire(t)
	for _, v := range flinkVersions() {
		for _, mode := range flinkClaimModes {
			t.Run(v+"/"+mode, func(t *testing.T) {
				store := t.TempDir()
				aID, aChk := runSourceJob(t, v, store, jobOpts{})
				b, bLast := startRestored(t, v, "B", store, aChk, mode, 3, jobOpts{})
				aShared := filepath.Join(store, aID, "shared") + "/"
				cross := flinkCrossJobRefs(t, v, flinkCheckpointDir(bLast), aShared)
				if len(cross) == 0 {
					t.Fatalf("B's checkpoint %s references nothing under A's shared/ (%s): no cross-job reference to protect", flinkCheckpointDir(bLast), aShared)
				}
				t.Logf("B's %s references %d SSTs under A's shared/", filepath.Base(flinkCheckpointDir(bLast)), len(cross))
				e2eOpsCleanup(t, store, filepath.Join(store, aID))
				ev := restoreAfterFailure(t, b)
				if ev.Name != "restore-failed" {
					t.Fatalf("B restored after A's files were deleted without the guard: the control did not reproduce the incident (%s)", ev.Line)
				}
				cause := missingFileCause(b, ev, aID)
				if cause == "" {
					t.Fatalf("B failed to restore, but not with the missing-file error: %s", ev.Fields["cause"])
				}
				if !strings.Contains(cause, aID) {
					t.Errorf("the missing file is not one of A's (%s): %s", aID, cause)
				}
				t.Logf("incident reproduced: B's restore failed: %s", e2eTruncate(cause, 300))
				bEnd, _ := b.lastCheckpoint()
				// `ckguard inspect --json` on B's last checkpoint (B is dead now, so it stays) lists what
				// Flink's own loader lists.
				if out, _ := e2eRun(context.Background(), "", e2eCkguard(t), "inspect", "--help"); !strings.Contains(out, "not built yet") {
					md := filepath.Join(flinkCheckpointDir(bEnd), "_metadata")
					want := listReferences(t, v, md)
					if len(want) != 1 {
						t.Fatalf("Flink's loader could not read %s", md)
					}
					got, err := inspectReferences(t, md)
					if err != nil {
						t.Fatalf("ckguard inspect --json %s: %v", md, err)
					}
					e2eCompareSets(t, md, flinkReferenceSet(want[0], "", ""), got)
					t.Logf("ckguard inspect --json %s: same %d references as Flink's loader", filepath.Base(filepath.Dir(md)), len(got))
				}
			})
		}
	}
}

func e2eTruncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// TestE2EInspectMatchesFlink compares `ckguard inspect --json` with Flink's own loader on every
// real _metadata fixture under testdata/flink (expected-references.json next to each, written by
// integration/flink/ListReferences), per Flink version.
func TestE2EInspectMatchesFlink(t *testing.T) {
	e2eRequire(t)
	e2eRequireCommand(t, "inspect")
	root := filepath.Join(e2eRepoRoot(t), "testdata", "flink")
	n := 0
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "_metadata" {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		parts := strings.SplitN(rel, string(filepath.Separator), 3) // <version>/<scenario>/store/...
		if len(parts) < 3 {
			return nil
		}
		t.Run(rel, func(t *testing.T) {
			want := readExpectedRefs(t, filepath.Join(filepath.Dir(p), "expected-references.json"))
			// Flink wrote the fixture at /tmp/ckguard-fixtures/<version>/<scenario>/store.
			from := "/tmp/ckguard-fixtures/" + parts[0] + "/" + parts[1] + "/store"
			to := filepath.Join(root, parts[0], parts[1], "store")
			got, err := inspectReferences(t, p)
			if err != nil {
				t.Fatalf("ckguard inspect --json %s: %v", p, err)
			}
			// ckguard resolves relative handles against where it reads the file; absolute ones
			// stay as Flink wrote them. Map both sides into the fixture folder.
			mapped := map[string]bool{}
			for k := range got {
				mapped[strings.Replace(k, from, to, 1)] = true
			}
			e2eCompareSets(t, rel, flinkReferenceSet(want, from, to), mapped)
		})
		n++
		return nil
	})
	if n == 0 {
		t.Fatal("no fixtures under testdata/flink (run integration/flink/regen-fixtures.sh)")
	}
}

// missingFileCause finds the missing file in the job's log when the job's final cause is a sibling
// download thread's "registry is already closed" (TestE2ES3A failed on that once in CI). No Flink needed.
func TestMissingFileCauseFromLog(t *testing.T) {
	const aID = "0a04a87ab1335c6fe34b13a27e422c4b"
	closed := flinkEvent{Name: "restore-failed", Fields: map[string]string{"cause": "java.io.IOException: Cannot register Closeable, registry is already closed. Closing argument."}}
	tests := []struct {
		name string
		log  string
		ev   flinkEvent
		want string
	}{
		{"in the cause", "", flinkEvent{Fields: map[string]string{"cause": "x <- java.io.FileNotFoundException: No such file or directory: s3a://b/ck/" + aID + "/shared/f"}},
			"FileNotFoundException: No such file or directory: s3a://b/ck/" + aID + "/shared/f"},
		{"only in the log: the deleted job's file first", "INFO switched to FAILED\nCaused by: java.io.FileNotFoundException: /etc/unrelated\nCaused by: java.io.FileNotFoundException: No such file or directory: s3a://b/ck/" + aID + "/shared/f\n", closed,
			"FileNotFoundException: No such file or directory: s3a://b/ck/" + aID + "/shared/f"},
		{"only in the log, another file", "Suppressed: java.nio.file.NoSuchFileException: /x/y\n", closed, "NoSuchFileException: /x/y"},
		{"nowhere", "INFO nothing missing here\n", closed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "job.log")
			if err := os.WriteFile(log, []byte(tt.log), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := missingFileCause(&flinkJob{log: log}, tt.ev, aID); got != tt.want {
				t.Errorf("missingFileCause = %q, want %q", got, tt.want)
			}
		})
	}
}
