package integration

// Harness for the end-to-end tests against real Flink (integration/flink, a MiniCluster per job, run
// with `java -cp`, offline after integration/flink/prefetch.sh). The tests run only with
// CKGUARD_E2E=1 (`make e2e`); plain `go test ./...` skips them.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// requireE2E skips unless the e2e suite was asked for.
func e2eRequire(t *testing.T) {
	t.Helper()
	if os.Getenv("CKGUARD_E2E") != "1" {
		t.Skip("end-to-end test against real Flink: set CKGUARD_E2E=1 (make e2e)")
	}
	if testing.Short() {
		t.Skip("e2e test in -short mode")
	}
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			e2ePrerequisite(t, "%s not on PATH (make setup installs it)", tool)
		}
	}
}

// prerequisite skips a test whose prerequisite is missing, except in CI where it must fail.
func e2ePrerequisite(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("missing prerequisite: "+format, args...)
	}
	t.Skipf("missing prerequisite: "+format, args...)
}

// flinkVersions are the Maven profiles (integration/flink/pom.xml) the e2e runs against:
// CKGUARD_E2E_FLINK="1.20,2.0,2.2" by default (_metadata format versions 4, 5 and 6).
func flinkVersions() []string {
	v := os.Getenv("CKGUARD_E2E_FLINK")
	if v == "" {
		v = "1.20,2.0,2.2"
	}
	return strings.Split(v, ",")
}

// flinkNewest is the newest Flink 2.x the Maven repository serves (profile flink-2.3): the default run
// checks only the REST endpoint against it (TestE2EFlinkREST, whose recording the flinkrest unit tests
// read), the other e2e tests run on flinkVersions (CI time).
const flinkNewest = "2.3"

// flinkRESTVersions are the versions TestE2EFlinkREST runs: CKGUARD_E2E_FLINK when set, else the
// default list and flinkNewest.
func flinkRESTVersions() []string {
	if os.Getenv("CKGUARD_E2E_FLINK") != "" {
		return flinkVersions()
	}
	return append(flinkVersions(), flinkNewest)
}

func e2eRepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

var flinkBuildOnce sync.Map // version -> *buildResult

type flinkBuildResult struct {
	once sync.Once
	err  error
}

// buildFlink compiles the e2e project for one Flink profile once per test binary (offline).
func buildFlink(t *testing.T, version string) {
	t.Helper()
	v, _ := flinkBuildOnce.LoadOrStore(version, &flinkBuildResult{})
	br := v.(*flinkBuildResult)
	br.once.Do(func() {
		cmd := exec.Command("mvn", "-o", "-q", "-B", "-P", "flink-"+version, "package", "dependency:build-classpath")
		cmd.Dir = filepath.Join(e2eRepoRoot(t), "integration", "flink")
		out, err := cmd.CombinedOutput()
		if err != nil {
			br.err = fmt.Errorf("mvn -o package -P flink-%s (run integration/flink/prefetch.sh first): %v\n%s", version, err, out)
		}
	})
	if br.err != nil {
		t.Fatal(br.err)
	}
}

// event is one `CKGUARD-EVENT name k=v ...` line of the job.
type flinkEvent struct {
	Name   string
	Fields map[string]string
	Line   string
}

func parseFlinkEvent(line string) (flinkEvent, bool) {
	const p = "CKGUARD-EVENT "
	i := strings.Index(line, p)
	if i < 0 {
		return flinkEvent{}, false
	}
	rest := line[i+len(p):]
	name, rest, _ := strings.Cut(rest, " ")
	ev := flinkEvent{Name: name, Fields: map[string]string{}, Line: line}
	for rest != "" {
		kv, tail, _ := strings.Cut(rest, " ")
		k, v, _ := strings.Cut(kv, "=")
		if k == "cause" { // runs to the end of the line
			ev.Fields[k] = strings.TrimPrefix(rest, "cause=")
			break
		}
		ev.Fields[k] = v
		rest = tail
	}
	return ev, true
}

// flinkJob is one running job (one JVM with its own MiniCluster).
type flinkJob struct {
	t        *testing.T
	name     string
	cmd      *exec.Cmd
	failFile string
	stopFile string
	log      string

	mu     sync.Mutex
	events []flinkEvent
	cond   *sync.Cond
	done   bool
	err    error
}

type jobOpts struct {
	CheckpointDir string // a local folder (the store or the mount)
	Restore       string // a chk-N folder
	ClaimMode     string
	FileMerging   bool
	Changelog     bool
	DSTLDir       string
	StopAfter     int // checkpoints
	Extra         []string
}

// startJob starts the e2e job of integration/flink for a Flink version.
func startJob(t *testing.T, version, name string, o jobOpts) *flinkJob {
	t.Helper()
	buildFlink(t, version)
	dir := t.TempDir()
	j := &flinkJob{t: t, name: name, failFile: filepath.Join(dir, "fail"), stopFile: filepath.Join(dir, "stop"),
		log: filepath.Join(dir, name+".log")}
	j.cond = sync.NewCond(&j.mu)
	args := []string{version, "Job", "--checkpoint-dir", "file://" + o.CheckpointDir, "--fail-file", j.failFile,
		"--stop-file", j.stopFile, "--rate", "2000", "--value-bytes", "200", "--keys", "20000"}
	if o.Restore != "" {
		args = append(args, "--restore", o.Restore, "--claim-mode", o.ClaimMode)
	}
	if o.FileMerging {
		args = append(args, "--file-merging")
	}
	if o.Changelog {
		args = append(args, "--changelog", "--dstl-path", "file://"+o.DSTLDir)
	}
	if o.StopAfter > 0 {
		args = append(args, "--stop-after-checkpoints", strconv.Itoa(o.StopAfter))
	}
	args = append(args, o.Extra...)
	j.cmd = exec.Command(filepath.Join(e2eRepoRoot(t), "integration", "flink", "run.sh"), args...)
	j.cmd.Env = append(os.Environ(), "JAVA_OPTS=-Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1")
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.Create(j.log)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	j.cmd.Stdout = io.MultiWriter(pw, logf)
	j.cmd.Stderr = logf
	if err := j.cmd.Start(); err != nil {
		t.Fatalf("start job %s: %v", name, err)
	}
	t.Logf("job %s: flink %s %s", name, version, strings.Join(args[2:], " "))
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if ev, ok := parseFlinkEvent(sc.Text()); ok {
				j.mu.Lock()
				j.events = append(j.events, ev)
				j.cond.Broadcast()
				j.mu.Unlock()
			}
		}
	}()
	go func() {
		err := j.cmd.Wait()
		pw.Close()
		logf.Close()
		j.mu.Lock()
		j.done, j.err = true, err
		j.cond.Broadcast()
		j.mu.Unlock()
	}()
	t.Cleanup(func() { j.kill() })
	return j
}

// kill ends the job's process group (only this job's JVM).
func (j *flinkJob) kill() {
	j.mu.Lock()
	done := j.done
	j.mu.Unlock()
	if !done && j.cmd.Process != nil {
		_ = syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
		j.waitExit(30 * time.Second)
	}
}

func (j *flinkJob) waitExit(d time.Duration) bool {
	deadline := time.Now().Add(d)
	j.mu.Lock()
	defer j.mu.Unlock()
	for !j.done {
		if time.Now().After(deadline) {
			return false
		}
		j.waitCond(deadline)
	}
	return true
}

// waitCond waits on the condition variable with a deadline (mu held).
func (j *flinkJob) waitCond(deadline time.Time) {
	timer := time.AfterFunc(time.Until(deadline), func() {
		j.mu.Lock()
		j.cond.Broadcast()
		j.mu.Unlock()
	})
	j.cond.Wait()
	timer.Stop()
}

// waitFor waits until an event after index `from` matches; it fails the test on timeout or job exit.
// It returns the event and its index.
func (j *flinkJob) waitFor(from int, d time.Duration, match func(flinkEvent) bool) (flinkEvent, int) {
	j.t.Helper()
	ev, i, err := j.tryWaitFor(from, d, match)
	if err != nil {
		j.t.Fatalf("job %s: %v\n%s", j.name, err, j.tail())
	}
	return ev, i
}

func (j *flinkJob) tryWaitFor(from int, d time.Duration, match func(flinkEvent) bool) (flinkEvent, int, error) {
	deadline := time.Now().Add(d)
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := from; ; {
		for ; i < len(j.events); i++ {
			if match(j.events[i]) {
				return j.events[i], i, nil
			}
		}
		if j.done {
			return flinkEvent{}, i, fmt.Errorf("job exited (%v) before the awaited event", j.err)
		}
		if time.Now().After(deadline) {
			return flinkEvent{}, i, fmt.Errorf("timeout after %s waiting for an event", d)
		}
		j.waitCond(deadline)
	}
}

func (j *flinkJob) mark() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.events)
}

func eventNamed(n string) func(flinkEvent) bool {
	return func(e flinkEvent) bool { return e.Name == n }
}

// waitCheckpoints waits for n more completed checkpoints after index from and returns the last.
func (j *flinkJob) waitCheckpoints(from, n int, d time.Duration) (flinkEvent, int) {
	j.t.Helper()
	var ev flinkEvent
	i := from
	for k := 0; k < n; k++ {
		ev, i = j.waitFor(i, d, eventNamed("checkpoint-completed"))
		i++
	}
	return ev, i
}

// jobID is the Flink job id from the job-started event.
func (j *flinkJob) jobID() string {
	j.t.Helper()
	ev, _ := j.waitFor(0, 2*time.Minute, eventNamed("job-started"))
	return ev.Fields["job-id"]
}

// checkpointDir turns a checkpoint-completed event into the local chk-N folder.
func flinkCheckpointDir(ev flinkEvent) string {
	p := ev.Fields["path"]
	p = strings.TrimPrefix(p, "file://")
	return strings.TrimPrefix(p, "file:")
}

// fail makes subtask 0 throw once; Flink then restores the job from its latest checkpoint.
func (j *flinkJob) fail() {
	j.t.Helper()
	if err := os.WriteFile(j.failFile, nil, 0o644); err != nil {
		j.t.Fatal(err)
	}
}

// stop cancels the job (checkpoints are retained) and waits for the JVM to exit.
func (j *flinkJob) stop() {
	j.t.Helper()
	if err := os.WriteFile(j.stopFile, nil, 0o644); err != nil {
		j.t.Fatal(err)
	}
	if !j.waitExit(2 * time.Minute) {
		j.t.Fatalf("job %s did not stop\n%s", j.name, j.tail())
	}
	if _, _, err := j.tryWaitFor(0, time.Second, eventNamed("job-stopped")); err != nil {
		j.t.Fatalf("job %s did not stop cleanly: %v\n%s", j.name, err, j.tail())
	}
}

// waitDone waits for a job started with StopAfter to stop by itself.
func (j *flinkJob) waitDone(d time.Duration) {
	j.t.Helper()
	if !j.waitExit(d) {
		j.t.Fatalf("job %s still running after %s\n%s", j.name, d, j.tail())
	}
	if _, _, err := j.tryWaitFor(0, time.Second, eventNamed("job-stopped")); err != nil {
		j.t.Fatalf("job %s: %v\n%s", j.name, err, j.tail())
	}
}

func (j *flinkJob) lastCheckpoint() (flinkEvent, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := len(j.events) - 1; i >= 0; i-- {
		if j.events[i].Name == "checkpoint-completed" {
			return j.events[i], true
		}
	}
	return flinkEvent{}, false
}

// tail is the job's distinct root causes and the end of its log, for failure messages.
func (j *flinkJob) tail() string {
	b, _ := os.ReadFile(j.log)
	seen := map[string]bool{}
	var causes []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Caused by: ") && !seen[l] && len(causes) < 12 {
			seen[l] = true
			causes = append(causes, l)
		}
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return "distinct causes:\n" + strings.Join(causes, "\n") + "\n--- end of log:\n" + string(b)
}

// flinkRefs is what Flink's own loader (ListReferences) reports for one _metadata.
type flinkRefs struct {
	FlinkVersion string `json:"flinkVersion"`
	Metadata     string `json:"metadata"`
	Missing      bool   `json:"missing"` // deleted (subsumed) before the loader read it
	CheckpointID int64  `json:"checkpointId"`
	InlineBytes  int64  `json:"inlineBytes"`
	References   []struct {
		Kind   string `json:"kind"`
		Path   string `json:"path"`
		Offset int64  `json:"offset"`
		Length int64  `json:"length"`
	} `json:"references"`
}

// localPath strips the file: scheme Flink writes (file:/x and file:///x).
func flinkLocalPath(uri string) string {
	if strings.HasPrefix(uri, "file://") {
		return strings.TrimPrefix(uri, "file://")
	}
	return strings.TrimPrefix(uri, "file:")
}

// listReferences runs Flink's loader on _metadata files (one JVM for all of them).
func listReferences(t *testing.T, version string, metadata ...string) []flinkRefs {
	t.Helper()
	if len(metadata) == 0 {
		return nil
	}
	buildFlink(t, version)
	args := append([]string{version, "ListReferences"}, metadata...)
	cmd := exec.Command(filepath.Join(e2eRepoRoot(t), "integration", "flink", "run.sh"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ListReferences %v: %v\n%s", metadata, err, stderr.String())
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	var res []flinkRefs
	for {
		var r flinkRefs
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("ListReferences output: %v", err)
		}
		if !r.Missing {
			res = append(res, r)
		}
	}
	return res
}

// referencedFiles maps each local path (physical file or directory) the checkpoints need to the
// _metadata files that need it,
// with each path's store root prefix `from` rewritten to `to` (Flink wrote mount paths, the test
// checks the store).
func referencedFiles(refs []flinkRefs, from, to string) map[string][]string {
	m := map[string][]string{}
	for _, r := range refs {
		for _, ref := range r.References {
			p := flinkLocalPath(ref.Path)
			if from != "" && strings.HasPrefix(p, from) {
				p = to + strings.TrimPrefix(p, from)
			}
			m[p] = append(m[p], flinkLocalPath(r.Metadata))
		}
	}
	return m
}

// liveMetadata lists every _metadata under root.
func e2eLiveMetadata(t *testing.T, root string) []string {
	t.Helper()
	var res []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() && d.Name() == "_metadata" {
			res = append(res, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(res)
	return res
}

// filesUnder lists the regular files below dir.
func e2eFilesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var res []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			res = append(res, p)
		}
		return nil
	})
	sort.Strings(res)
	return res
}

// run runs a command and returns combined output and exit code (never fails the test itself).
func e2eRun(ctx context.Context, dir, name string, args ...string) (string, int) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			code = -1
			out = append(out, []byte(err.Error())...)
		}
	}
	return string(out), code
}

// backdate sets the mtime of every entry below dir to `age` ago, so that an age-based cleanup
// (`find -mtime +7 -delete`) selects the old job's files as it would in production.
func e2eBackdate(t *testing.T, dir string, age time.Duration) {
	t.Helper()
	old := time.Now().Add(-age)
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			_ = os.Chtimes(p, old, old)
		}
		return nil
	})
}

// readExpected reads an expected-references.json fixture.
func readExpectedRefs(t *testing.T, path string) flinkRefs {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r flinkRefs
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r
}
