package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
)

func inspectFixtures(t *testing.T) string {
	t.Helper()
	dir, _ := filepath.Abs(filepath.Join("..", "..", "..", "shared", "fixtures", "flink-test-resources"))
	if _, err := os.Stat(filepath.Join(dir, "MANIFEST.md")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("fixtures missing at %s: %v", dir, err)
		}
		t.Skipf("fixtures missing at %s: %v", dir, err)
	}
	return dir
}

// runCLI runs the app in-process and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, stdin []byte, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := 0
	oldExiter, oldErr := cli.OsExiter, cli.ErrWriter
	cli.OsExiter = func(c int) { code = c }
	cli.ErrWriter = &errOut
	defer func() { cli.OsExiter, cli.ErrWriter = oldExiter, oldErr }()
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errOut
	if stdin != nil {
		app.Reader = bytes.NewReader(stdin)
	}
	if err := app.Run(append([]string{"ckguard"}, args...)); err != nil && code == 0 {
		code = 1
		errOut.WriteString(err.Error())
	}
	return out.String(), errOut.String(), code
}

// TestInspectGoldenJSON: --json output equals the golden summaries of refindex/flinkmeta.
func TestInspectGoldenJSON(t *testing.T) {
	fx := inspectFixtures(t)
	golden := filepath.Join("..", "..", "refindex", "flinkmeta", "testdata", "golden")
	idx, err := os.ReadFile(filepath.Join(golden, "INDEX.json"))
	if err != nil {
		t.Fatal(err)
	}
	var index map[string]string
	if err := json.Unmarshal(idx, &index); err != nil {
		t.Fatal(err)
	}
	for name, rel := range index {
		want, err := os.ReadFile(filepath.Join(golden, name))
		if err != nil {
			t.Fatal(err)
		}
		// The golden files hold flinkmeta's Summary; the CLI writes it with snake_case keys (and,
		// for one release, the camelCase keys it had before).
		var sum flinkmeta.Summary
		if err := json.Unmarshal(want, &sum); err != nil {
			t.Fatal(err)
		}
		var wantOut bytes.Buffer
		enc := json.NewEncoder(&wantOut)
		enc.SetIndent("", "  ")
		if err := enc.Encode(newInspectJSON(sum)); err != nil {
			t.Fatal(err)
		}
		out, stderr, code := runCLI(t, nil, "inspect", "--json", "--location", "/fixtures/"+rel+"/_metadata", filepath.Join(fx, rel, "_metadata"))
		if code != 0 || out != wantOut.String() {
			t.Errorf("%s: exit %d %s; output differs from %s", rel, code, stderr, name)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal([]byte(out), &fields); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		var keys []string
		for k := range fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		wantKeys := "checkpointId checkpoint_id formatVersion format_version handleCounts handle_counts inlineBytes inline_bytes kind operators references savepointFormat savepoint_format"
		if strings.Join(keys, " ") != wantKeys {
			t.Errorf("%s: JSON fields %v, want %s", rel, keys, wantKeys)
		}
		if ops := fields["operators"]; len(ops) > 2 && (!bytes.Contains(ops, []byte(`"max_parallelism"`)) || bytes.Contains(ops, []byte("Parallelism"))) {
			t.Errorf("%s: operators not in snake_case: %.200s", rel, ops)
		}
	}
}

func TestInspectHumanAndStdin(t *testing.T) {
	fx := inspectFixtures(t)
	rel := "new-stateful-broadcast-udf-migration-itcase-flink1.16-rocksdb-savepoint-native"
	path := filepath.Join(fx, rel, "_metadata")
	out, _, code := runCLI(t, nil, "inspect", path)
	for _, want := range []string{"format version:  4", "checkpoint id:   1", "kind:            savepoint (native)", "operators (8):",
		"IncrementalRemoteKeyedStateHandleV2", "referenced storage objects (44):", filepath.Join(fx, rel) + "/"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("human output lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	data, _ := os.ReadFile(path)
	out, _, code = runCLI(t, data, "inspect", "--json", "-")
	wd, _ := os.Getwd()
	if code != 0 || !strings.Contains(out, `"resolved": "`+wd+"/") {
		t.Errorf("stdin: relative references should resolve against the current directory (exit %d):\n%.400s", code, out)
	}
	// V3 carries no kind; with --location the directory name decides it.
	v3, _ := os.ReadFile(filepath.Join(fx, "new-stateful-broadcast-udf-migration-itcase-flink1.15-rocksdb-checkpoint", "_metadata"))
	out, _, _ = runCLI(t, v3, "inspect", "--json", "--location", "s3://b/job/chk-9/_metadata", "-")
	if !strings.Contains(out, `"kind": "checkpoint"`) {
		t.Errorf("V3 kind from --location directory:\n%.300s", out)
	}
	out, _, _ = runCLI(t, data, "inspect", "--json", "--location", "s3://b/job/savepoint-1/_metadata", "-")
	if !strings.Contains(out, `"resolved": "s3://b/job/savepoint-1/`) {
		t.Errorf("--location not used:\n%.400s", out)
	}
}

// TestInspectFailures: one line naming the file, the byte offset and what was expected; non-zero exit.
func TestInspectFailures(t *testing.T) {
	fx := inspectFixtures(t)
	v1 := filepath.Join(fx, "operatorstate", "complexKeyed", "_metadata")
	data, _ := os.ReadFile(filepath.Join(fx, "new-stateful-broadcast-udf-migration-itcase-flink1.16-rocksdb-savepoint-native", "_metadata"))
	trunc := filepath.Join(t.TempDir(), "_metadata")
	if err := os.WriteFile(trunc, data[:3000], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args  []string
		stdin []byte
		code  int
		want  []string
	}{
		{[]string{"inspect", v1}, nil, 1, []string{v1, "byte offset 4", "version 1", "no longer supported"}},
		{[]string{"inspect", "--json", trunc}, nil, 1, []string{trunc, "byte offset 2997", "expected"}},
		{[]string{"inspect", "-"}, data[:100], 1, []string{"<stdin>", "byte offset", "expected"}},
		{[]string{"inspect", "--location", "s3://b/j/chk-3/_metadata", "-"}, data[:100], 1, []string{"s3://b/j/chk-3/_metadata (stdin)", "byte offset"}},
		{[]string{"inspect", filepath.Join(fx, "does-not-exist")}, nil, 1, []string{"does-not-exist"}},
		{[]string{"inspect"}, nil, 2, []string{"expected exactly one argument"}},
	} {
		out, stderr, code := runCLI(t, c.stdin, c.args...)
		msg := strings.TrimRight(stderr, "\n")
		if code != c.code || out != "" || strings.Contains(msg, "\n") {
			t.Errorf("%v: exit %d (want %d), stdout %q, stderr %q (want one line)", c.args, code, c.code, out, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%v: %q lacks %q", c.args, msg, w)
			}
		}
	}
}
