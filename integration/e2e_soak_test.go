package integration

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestE2ESoak: N cycles (default 50, CKGUARD_SOAK_CYCLES) of "checkpoint, cleanup storm through the
// mount, kill a task, restore" against one running job B (restored from A in CLAIM mode, so it
// references A's shared SSTs throughout). The storm is what a careless script does: `rm -rf` of
// every job folder in the store and an age-based `find -delete`, through the guard. Every restore
// must succeed, and no file a live checkpoint references may disappear. Gated on CKGUARD_SOAK=1.
func TestE2ESoak(t *testing.T) {
	e2eRequire(t)
	if os.Getenv("CKGUARD_SOAK") != "1" {
		t.Skip("soak: set CKGUARD_SOAK=1")
	}
	cycles := 50
	if s := os.Getenv("CKGUARD_SOAK_CYCLES"); s != "" {
		cycles, _ = strconv.Atoi(s)
	}
	version := flinkVersions()[0]
	start := time.Now()
	store := t.TempDir()
	g := startGuardMount(t, store)
	ck := filepath.Join(g.flinkRoot, "ck")
	aID, aChk := runSourceJob(t, version, ck, jobOpts{})
	// Up to one induced failure every few seconds: allow more than the default 3 per 10 s.
	b, _ := startRestored(t, version, "B", ck, aChk, "CLAIM", 2, jobOpts{
		Extra: []string{"-Drestart-strategy.failure-rate.max-failures-per-interval=20"}})

	var refusedTotal, deletedTotal int
	for i := 1; i <= cycles; i++ {
		_, _ = b.waitCheckpoints(b.mark(), 1, flinkStepTimeout)
		before := len(e2eFilesUnder(t, store))
		// Old job A is "a week old"; B's files are as young as Flink made them.
		e2eBackdate(t, filepath.Join(store, "ck", aID), cleanupAge)
		g.settle()
		out := soakStorm(t, g.mnt, g.inMount(ck))
		after := len(e2eFilesUnder(t, store))
		refused := strings.Count(out, "Operation not permitted")
		refusedTotal += refused
		if before > after {
			deletedTotal += before - after // net: Flink keeps writing meanwhile, so a lower bound
		}
		ev := restoreAfterFailure(t, b)
		if ev.Name != "restored" {
			t.Fatalf("cycle %d: restore failed after %d good cycles: %s", i, i-1, ev.Fields["cause"])
		}
		if i%10 == 0 || i == cycles {
			g.assertNothingReferencedMissing(version)
			t.Logf("cycle %d/%d: %d refusals so far, ≥%d files deleted, %s", i, cycles, refusedTotal, deletedTotal, time.Since(start).Round(time.Second))
		}
	}
	b.stop()
	if g.has("verify") {
		if out, code := g.cli("verify"); code != 0 {
			t.Fatalf("ckguard verify after the soak: exit %d\n%s", code, out)
		}
	}
	a, flinkRefused := g.audit()
	t.Logf("Flink's refused deletes: %v", e2eHead(flinkRefused))
	t.Logf("SOAK RESULT: %d cycles, 0 failed restores, %d refusals reported by rm/find, ≥%d files gone from the store; "+
		"audit log: cleanup tools (rm/find) allowed %d, refused %d; Flink's own deletes allowed %d, refused %d; wall time %s",
		cycles, refusedTotal, deletedTotal, a["tool/allow"], a["tool/refuse"], a["flink/allow"], a["flink/refuse"],
		time.Since(start).Round(time.Second))
}

// storm is a careless cleanup through the mount: rm -rf of every job folder (the running job's
// too), then an age-based find sweep. Only A's files were made old; B's in-flight files keep their
// real age, so the grace period is what protects them.
func soakStorm(t *testing.T, mnt, ck string) string {
	t.Helper()
	entries, err := os.ReadDir(ck)
	if err != nil {
		t.Fatalf("readdir %s through the mount: %v", ck, err)
	}
	args := []string{"-rf"}
	for _, e := range entries {
		args = append(args, filepath.Join(ck, e.Name()))
	}
	out1, _ := e2eRun(context.Background(), mnt, "rm", args...)
	out2, _ := e2eRun(context.Background(), mnt, "find", mnt, "-type", "f", "-mtime", "+7", "-delete")
	return out1 + out2
}
