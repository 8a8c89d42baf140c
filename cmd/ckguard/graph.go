package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/cmd/ckguard/graph"
)

func graphCommand() *cli.Command {
	return &cli.Command{
		Name:  "graph",
		Usage: "draw which job folders the live checkpoints depend on (Graphviz SVG, or DOT)",
		Description: `Draws the dependency picture of the store: every job folder with its live checkpoints and
savepoints, and an edge from each checkpoint to every OTHER job folder whose files it references,
labelled with the number of files and their bytes. A folder drawn in red has no live checkpoint
of its own but is still referenced: purging it breaks the checkpoints pointing at it (the
incident). Dashed red edges mean referenced files are already missing (see ckguard verify).

The nodes and edges come from the index (a running mount's control socket when there is one);
the counts come from reading those checkpoints' _metadata in the store.

--format svg renders with Graphviz (dot -Tsvg; Debian package graphviz, installed by make setup).
Without Graphviz, or with --format dot, the output is DOT source. Default: svg when Graphviz is
installed (DOT when writing to a terminal), else dot; a --output file ending in .dot picks DOT.

--job J (a job folder, or its last segments such as the job id) keeps J's checkpoints, the folders
they reference, and the checkpoints of other jobs that reference J. --by-job draws one edge per pair
of job folders (each file counted once); it is automatic above 300 checkpoints.

EXAMPLES:
   ckguard graph --store /flink/checkpoints --index /var/lib/ckguard/index -o deps.svg
   ckguard graph --store /flink/checkpoints --index /var/lib/ckguard/index --job af8b2e4c6d8f0a1b3c5d7e9f1a2b4c6d --format dot
   ckguard graph --store /flink/checkpoints --index /var/lib/ckguard/index --by-job -o jobs.svg
   ckguard graph --store s3://bucket/flink --index /var/lib/ckguard/s3-index --json`,
		Flags: append(storeFlags(),
			&cli.StringFlag{Name: "job", Usage: "only this job folder (or its last path segments, e.g. the job id) and what depends on it"},
			&cli.StringFlag{Name: "format", Usage: "svg (Graphviz) or dot; default svg when Graphviz is installed, else dot"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write to this `FILE` instead of stdout"},
			&cli.BoolFlag{Name: "by-job", Usage: "one edge per pair of job folders instead of per checkpoint (automatic above 300 checkpoints)"},
		),
		Action: runGraph,
	}
}

// maxCheckpointNodes bounds the checkpoints drawn one by one: beyond it Graphviz layouts get slow and
// the picture unreadable, so edges are merged per job folder.
const maxCheckpointNodes = 300

func runGraph(c *cli.Context) error {
	if c.NArg() != 0 {
		return exitf(2, "usage: ckguard graph --store S --index I [--job J] [--format dot|svg] [-o FILE]")
	}
	out := c.String("output")
	format, err := graphFormat(c, out)
	if err != nil {
		return err
	}
	g, err := buildStoreGraph(c)
	if err != nil {
		return err
	}
	if job := c.String("job"); job != "" && len(g.Jobs) == 0 && len(g.Folders) == 0 {
		return exitf(1, "ckguard graph: no live checkpoint belongs to or references job %q", job)
	}
	text, err := renderGraph(c, g, format)
	if err != nil {
		return err
	}
	if out == "" || out == "-" {
		_, err = c.App.Writer.Write(text)
		return err
	}
	if err := os.WriteFile(out, text, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	fmt.Fprintf(os.Stderr, "ckguard graph: wrote %s (%s, %s)\n", out, plural(len(g.Jobs), "folder with live checkpoints or savepoints", "folders with live checkpoints or savepoints"), plural(len(g.Edges), "edge"))
	return nil
}

// graphFormat is "dot" or "svg": --format, else from the output's name, else DOT on a terminal and
// SVG elsewhere; SVG falls back to DOT (said on stderr) where Graphviz is not installed.
func graphFormat(c *cli.Context, out string) (string, error) {
	format := strings.ToLower(c.String("format"))
	switch {
	case format == "" && strings.HasSuffix(out, ".dot"), format == "gv":
		format = "dot"
	case format == "" && (out == "" || out == "-") && writerIsTerminal(c.App.Writer):
		// SVG markup is unreadable in a terminal: show the DOT text and say how to get the picture.
		fmt.Fprintln(os.Stderr, "ckguard graph: writing DOT to the terminal; use -o graph.svg for the picture")
		format = "dot"
	case format == "":
		format = "svg"
	case format != "dot" && format != "svg":
		return "", exitf(2, "--format %q: want dot or svg", format)
	}
	if format == "svg" && !c.Bool("json") && !graph.DotAvailable() {
		fmt.Fprintln(os.Stderr, "ckguard graph: Graphviz (dot) is not installed, writing DOT instead of SVG (apt-get install graphviz)")
		format = "dot"
	}
	return format, nil
}

// buildStoreGraph asks the index for the live checkpoints and builds the graph of --job (counts read
// from the store); with --by-job, or too many checkpoints to draw one by one, one edge per pair of
// job folders.
func buildStoreGraph(c *cli.Context) (*graph.Graph, error) {
	q, closeFn, err := openQuerier(c)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	res, err := q.Checkpoints(c.Context, "")
	if err != nil {
		return nil, err
	}
	refs, err := storeRefs(c, res)
	if err != nil {
		return nil, err
	}
	inferred := map[string][]string{}
	for _, j := range res.Jobs {
		for _, ck := range j.Checkpoints {
			inferred[ck.Metadata] = ck.InferredMaps
		}
	}
	refs.Inferred = func(m string) []string { return inferred[m] }
	stop := progressFor(c, nil) // reading every checkpoint's _metadata and listing its folders
	g, err := graph.Build(c.Context, res, c.String("job"), refs, refs, cliLogger())
	stop()
	if err != nil {
		return nil, err
	}
	g.Store = c.String("store")
	nodes := 0
	for _, j := range g.Jobs {
		nodes += len(j.Checkpoints)
	}
	if c.Bool("by-job") || nodes > maxCheckpointNodes {
		if !c.Bool("by-job") {
			fmt.Fprintf(os.Stderr, "ckguard graph: %d checkpoints are too many to draw one by one; drawing one edge per pair of job folders (--job J shows one job's checkpoints)\n", nodes)
		}
		g = g.ByJob()
	}
	return g, nil
}

// renderGraph is the graph as JSON (--json), DOT or SVG (through Graphviz).
func renderGraph(c *cli.Context, g *graph.Graph, format string) ([]byte, error) {
	var buf bytes.Buffer
	if c.Bool("json") {
		if err := printJSON(&buf, g); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	if err := g.DOT(&buf); err != nil {
		return nil, err
	}
	if format == "svg" {
		return graph.SVG(c.Context, buf.Bytes())
	}
	return buf.Bytes(), nil
}
