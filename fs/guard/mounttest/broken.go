package mounttest

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/internal/fusetest"
)

// CatchesBroken proves the suite can fail on this backend: it runs the calling test binary again with
// -test.run=run and BreakEnv=op (an enforcer whose index allows op everywhere), and fails t unless that
// run fails, with a failure reported for each of the subtests named in failing ("--- FAIL: <name>").
// The caller makes sure first that the run can mount (a run that skipped would pass).
func CatchesBroken(t *testing.T, run, op string, failing ...string) {
	t.Helper()
	if os.Getenv(BreakEnv) != "" {
		t.Skip("already the broken run")
	}
	fusetest.Require(t) // the run below mounts, so this test needs what it needs (and skips with -short)
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(os.Environ(), BreakEnv+"="+op)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("with an enforcer that allows every %s, the suite (-test.run=%s) passed:\n%s", op, run, out)
	}
	var report []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "--- FAIL") || strings.Contains(l, ".go:") {
			report = append(report, l)
		}
	}
	for _, name := range failing {
		if !strings.Contains(string(out), "--- FAIL: "+name+" ") {
			t.Errorf("with an enforcer that allows every %s, %s did not fail:\n%s", op, name, out)
		}
	}
	t.Logf("with an enforcer that allows every %s, the suite fails as it must:\n%s", op, strings.Join(report, "\n"))
}
