package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/cmd/ckguard/demo"
)

var (
	builtOnce sync.Once
	builtExe  string
	builtErr  error
	builtOut  []byte
)

// builtBinary builds ckguard once per test run: the demo runs its own binary as `ckguard mount`,
// `ckguard why`, ... so the test must run the real thing, as `make demo` does.
func builtBinary(t *testing.T) string {
	t.Helper()
	builtOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ckguard-bin-")
		if err != nil {
			builtErr = err
			return
		}
		builtExe = filepath.Join(dir, "ckguard")
		builtOut, builtErr = exec.Command("go", "build", "-o", builtExe, ".").CombinedOutput()
	})
	if builtErr != nil {
		t.Fatalf("go build: %v\n%s", builtErr, builtOut)
	}
	return builtExe
}

// requireFUSEForDemo skips without /dev/fuse or fusermount3, except in CI where it fails.
func requireFUSEForDemo(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("real FUSE mount: not in -short")
	}
	var missing string
	if _, err := os.Stat("/dev/fuse"); err != nil {
		missing = "/dev/fuse"
	} else if _, err := exec.LookPath("fusermount3"); err != nil {
		missing = "fusermount3 (fuse3)"
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s missing in CI", missing)
	}
	t.Skipf("%s missing", missing)
}

// mountsUnder lists the mount points in /proc/self/mountinfo at or below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := strings.ReplaceAll(fields[4], `\040`, " ")
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// TestDemoEndToEnd runs `ckguard demo` as make demo does, with a real FUSE mount, and checks the
// counts it prints against the scenario (IncidentOne plus the demo's savepoint and garbage), the
// verify results, the exit status and that nothing stays mounted.
func TestDemoEndToEnd(t *testing.T) {
	requireFUSEForDemo(t)
	exe := builtBinary(t)
	dir := filepath.Join(t.TempDir(), "demo")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, exe, "demo", "--dir", dir).CombinedOutput()
	t.Logf("ckguard demo took %v", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("ckguard demo: %v\n%s", err, out)
	}
	s := string(out)
	// The expected counts come from the scenario's ground truth, not from the demo's own output.
	sc, err := demo.Build(t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e := sc.Expect()
	if e.Refused == 0 || e.Deleted == 0 || e.ControlMissing == 0 {
		t.Fatalf("scenario lost its point: %+v", e)
	}
	for _, want := range []*regexp.Regexp{
		// The unguarded control reproduces the incident: verify exits 1.
		regexp.MustCompile(fmt.Sprintf(`(?m)^\s+exit 1: RED — %d live checkpoints of the current job are broken, %d files they need are gone`,
			len(sc.LiveUnder(sc.CurrentJobDir)), e.ControlMissing)),
		// Through the guard: rm -rf refuses the old job's SSTs the current job references.
		regexp.MustCompile(`(?m)rm -rf mnt/\S+\n\s+exit 1: deleted \d+ of the \d+ files it selected, \d+ refused`),
		regexp.MustCompile(fmt.Sprintf(`(?m)^\s+total\s+%d\s+%d$`, e.Deleted, e.Refused)),
		regexp.MustCompile(`(?m)^\s+REFUSED  \S+/shared/\S+ \(file\): unlink`),
		regexp.MustCompile(`(?m)→  \S+/  \(\d+ files, .*\)$`),
		regexp.MustCompile(`(?m)^\s+exit 0: GREEN`),
		regexp.MustCompile(fmt.Sprintf(`(?m)^RESULT: OK — deleted %d files \(.*\), refused %d .*verify green$`, e.Deleted, e.Refused)),
	} {
		if !want.MatchString(s) {
			t.Errorf("output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", s)
	}
	if m := mountsUnder(t, dir); len(m) > 0 {
		t.Fatalf("still mounted after the demo: %v", m)
	}
	// --dir keeps the work directory: the audit log is there and agrees with the printed counts.
	audit, err := os.ReadFile(filepath.Join(dir, "guarded", "index", "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(audit), `"decision":"refuse"`); n < e.Refused {
		t.Errorf("audit log has %d refusals, want at least the %d refused files", n, e.Refused)
	}
}

// TestDemoS3 runs `ckguard demo --s3`: the guarded cleanup through `ckguard mount --store s3://…` on
// versitygw (installed by make setup), with the same ground-truth checks.
func TestDemoS3(t *testing.T) {
	requireFUSEForDemo(t)
	exe := builtBinary(t)
	if _, err := os.Stat(filepath.Join("..", "..", ".tools", "bin", "versitygw")); err != nil && os.Getenv("CKGUARD_VERSITYGW") == "" {
		if _, err := exec.LookPath("versitygw"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("versitygw missing in CI (make setup installs it)")
			}
			t.Skip("versitygw not installed (make setup)")
		}
	}
	dir := filepath.Join(t.TempDir(), "demo")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, "demo", "--s3", "--skip-control", "--dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("ckguard demo --s3: %v\n%s", err, out)
	}
	for _, want := range []string{"ckguard mount --store s3://ckguard-demo", "exit 0: GREEN", "RESULT: OK — deleted "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if m := mountsUnder(t, dir); len(m) > 0 {
		t.Fatalf("still mounted after the demo: %v", m)
	}
}

// TestDemoInterrupted interrupts the demo once it has mounted (Ctrl-C) and kills it outright
// (kill -9): in both cases the mount must go away.
func TestDemoInterrupted(t *testing.T) {
	requireFUSEForDemo(t)
	exe := builtBinary(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "demo")
			cmd := exec.Command(exe, "demo", "--dir", dir, "--skip-control")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = cmd.Stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var seen strings.Builder
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				seen.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), "mounted in") {
					break
				}
			}
			if !strings.Contains(seen.String(), "mounted in") {
				_ = cmd.Wait()
				t.Fatalf("demo never mounted:\n%s", seen.String())
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			go func() { // drain so the demo never blocks on a full pipe
				for sc.Scan() {
				}
			}()
			err = cmd.Wait()
			if sig == syscall.SIGINT && err == nil {
				// The demo may have finished before the signal arrived; that is fine too.
				t.Logf("demo completed before SIGINT")
			}
			deadline := time.Now().Add(15 * time.Second)
			for len(mountsUnder(t, dir)) > 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if m := mountsUnder(t, dir); len(m) > 0 {
				_ = exec.Command("fusermount3", "-u", "-z", m[0]).Run()
				t.Fatalf("after %v the demo left %v mounted", sig, m)
			}
			if ee, ok := err.(*exec.ExitError); ok && sig == syscall.SIGINT {
				t.Logf("exit status after SIGINT: %s", strconv.Itoa(ee.ExitCode()))
			}
		})
	}
}
