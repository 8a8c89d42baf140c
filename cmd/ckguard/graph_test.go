package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/cmd/ckguard/graph"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestGraphCommand runs `ckguard graph` on the second incident's tree in every output format.
func TestGraphCommand(t *testing.T) {
	tree, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(t.TempDir(), "index")
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		app := newApp()
		app.Writer = &out
		app.ExitErrHandler = func(*cli.Context, error) {} // keep exit codes as errors, do not os.Exit
		full := append([]string{"ckguard", "graph", "--store", tree.Root, "--index", idx}, args...)
		err := app.Run(full)
		return out.String(), err
	}
	edge := `"ckpt:checkpoints/job_d29e1b63/chk-350/_metadata" -> "folder:checkpoints/job_7d83f2a1" [label="4 files, `

	dot, err := run("--format", "dot")
	if err != nil || !strings.Contains(dot, edge) {
		t.Fatalf("--format dot: err %v, missing edge %s in:\n%s", err, edge, dot)
	}
	js, err := run("--json", "--job", "job_7d83f2a1")
	if err != nil {
		t.Fatal(err)
	}
	var g graph.Graph
	if err := json.Unmarshal([]byte(js), &g); err != nil {
		t.Fatalf("--json: %v\n%s", err, js)
	}
	if len(g.Edges) != 3 || g.Edges[0].To != "checkpoints/job_7d83f2a1" || g.Edges[0].Files != 4 {
		t.Fatalf("--json --job: unexpected edges %+v", g.Edges)
	}
	if _, err := run("--job", "nope", "--format", "dot"); err == nil {
		t.Fatalf("--job of an unknown job should fail")
	}
	if _, err := run("--format", "png"); err == nil {
		t.Fatalf("--format png should be a usage error")
	}
	if _, err := exec.LookPath("dot"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("graphviz missing in CI")
		}
		t.Skip("graphviz not installed")
	}
	out := filepath.Join(t.TempDir(), "deps.svg")
	if _, err := run("-o", out); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(out)
	if err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("job_7d83f2a1")) {
		t.Fatalf("default format with graphviz installed should be SVG: %v\n%.300s", err, svg)
	}
	dotOut := filepath.Join(t.TempDir(), "deps.dot")
	if _, err := run("-o", dotOut); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dotOut); !bytes.HasPrefix(b, []byte("digraph ckguard {")) {
		t.Fatalf("-o x.dot should write DOT: %.200s", b)
	}
}
