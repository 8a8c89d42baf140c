package demo

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procState returns the parent pid and the state letter of pid ("" when it is gone).
func procState(pid int) (ppid int, state string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // after "pid (comm)"
	if len(f) < 2 {
		return 0, ""
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0]
}

// A command the demo runs dies with the demo: the demo killed with kill -9 while `ckguard pin` ran
// (TestDemoInterrupted) left that pin running on its own. Here a helper process runs `sleep 300`
// through the demo's runner and is killed; the sleep must end (SIGTERM from Pdeathsig) long before
// its 300 s.
func TestCommandsDieWithTheDemo(t *testing.T) {
	if os.Getenv("CKGUARD_DEMO_RUNNER_HELPER") == "1" {
		r := &runner{dir: os.TempDir()}
		_, _ = r.run(context.Background(), "sleep", "300")
		return
	}
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep")
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestCommandsDieWithTheDemo$")
	helper.Env = append(os.Environ(), "CKGUARD_DEMO_RUNNER_HELPER=1")
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	// the helper's sleep child
	child := 0
	for deadline := time.Now().Add(30 * time.Second); child == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			pid, _ := strconv.Atoi(filepath.Base(d))
			if ppid, _ := procState(pid); ppid == helper.Process.Pid {
				if comm, _ := os.ReadFile(d + "/comm"); strings.TrimSpace(string(comm)) == "sleep" {
					child = pid
				}
			}
		}
	}
	if child == 0 {
		_ = helper.Process.Kill()
		_ = helper.Wait()
		t.Fatal("the helper's sleep never started")
	}
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) }) // only if it outlived the test
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, st := procState(child); st == "" || st == "Z" {
			return
		}
	}
	t.Fatalf("the sleep the demo ran (pid %d) still runs after the demo was killed", child)
}
