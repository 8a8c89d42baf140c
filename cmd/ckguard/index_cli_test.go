package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// run runs the CLI in-process and returns stdout and the exit code.
func run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errb
	app.ExitErrHandler = func(*cli.Context, error) {}
	err := runApp(context.Background(), app, append([]string{"ckguard"}, args...))
	code := 0
	if err != nil {
		code = 1
		if ec, ok := err.(cli.ExitCoder); ok {
			code = ec.ExitCode()
		}
		if code != 1 || !strings.Contains(errb.String()+err.Error(), "") {
			t.Logf("ckguard %v: %v", args, err)
		}
	}
	return out.String(), code
}

func TestIndexCommands(t *testing.T) {
	dir := t.TempDir()
	tr, err := treegen.IncidentOne(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(dir, "index")
	sf := []string{"--store", tr.Root, "--index", idx}
	if out, code := run(t, append([]string{"index", "rebuild"}, sf...)...); code != 0 || !strings.Contains(out, "3 checkpoints") {
		t.Fatalf("index rebuild: %d %q", code, out)
	}
	if out, code := run(t, append([]string{"index", "sync", "--json"}, sf...)...); code != 0 || !strings.Contains(out, `"checkpoints": 3`) {
		t.Fatalf("index sync: %d %q", code, out)
	}
	ref := tr.Referenced()[0]
	out, code := run(t, append(append([]string{"why"}, sf...), ref)...)
	if code != 1 || !strings.Contains(out, "REFUSED") || !strings.Contains(out, "chk-10027") {
		t.Fatalf("why %s: %d %q", ref, code, out)
	}
	// An absolute path under the store works too, and --json carries the decision.
	out, code = run(t, append(append([]string{"why", "--json"}, sf...), filepath.Join(tr.Root, ref))...)
	var why refindex.WhyResult
	if err := json.Unmarshal([]byte(out), &why); err != nil || why.Allow || why.Reason != verdict.ReasonReferenced || why.RefCount < 1 || code != 1 {
		t.Fatalf("why --json: %d %v %+v", code, err, why)
	}
	garbage := tr.Orphans(treegen.DefaultPolicy, 0)
	if _, code := run(t, append(append([]string{"why"}, sf...), garbage[0])...); code != 0 {
		t.Fatalf("why of garbage refused")
	}
	out, code = run(t, append([]string{"orphans", "--json"}, sf...)...)
	var or refindex.OrphansResult
	if err := json.Unmarshal([]byte(out), &or); err != nil || code != 0 || len(or.Files) != len(garbage) {
		t.Fatalf("orphans: %d %v %d files, want %d", code, err, len(or.Files), len(garbage))
	}
	out, code = run(t, append([]string{"checkpoints"}, sf...)...)
	if code != 0 || !strings.Contains(out, "references files of: flink-checkpoints/"+treegen.IncidentOneOldJob) {
		t.Fatalf("checkpoints: %d %q", code, out)
	}
	if out, code := run(t, append([]string{"stats"}, sf...)...); code != 0 || !strings.Contains(out, "checkpoints") {
		t.Fatalf("stats: %d %q", code, out)
	}
	if out, code := run(t, append([]string{"verify"}, sf...)...); code != 0 || !strings.Contains(out, "verify OK") {
		t.Fatalf("verify: %d %q", code, out)
	}
	// Pin the old job's checkpoint: its _metadata is then refused.
	old := "flink-checkpoints/" + treegen.IncidentOneOldJob + "/chk-100271"
	if out, code := run(t, append(append([]string{"pin"}, sf...), old)...); code != 0 || !strings.Contains(out, "pinned") {
		t.Fatalf("pin: %d %q", code, out)
	}
	if out, code := run(t, append(append([]string{"why"}, sf...), old+"/_metadata")...); code != 1 || !strings.Contains(out, "pinned") {
		t.Fatalf("why pinned: %d %q", code, out)
	}
	if _, code := run(t, append(append([]string{"unpin"}, sf...), old)...); code != 0 {
		t.Fatalf("unpin failed")
	}
	// The incident without the guard: delete the old job's folder, verify turns red and names the files.
	if err := os.RemoveAll(filepath.Join(tr.Root, tr.Purge)); err != nil {
		t.Fatal(err)
	}
	out, code = run(t, append([]string{"verify"}, sf...)...)
	if code != 1 || !strings.Contains(out, "BROKEN flink-checkpoints/"+treegen.IncidentOneNewJob+"/chk-100274/_metadata") || !strings.Contains(out, "missing flink-checkpoints/"+treegen.IncidentOneOldJob+"/shared/") {
		t.Fatalf("verify after the unguarded purge: %d %q", code, out)
	}
}
