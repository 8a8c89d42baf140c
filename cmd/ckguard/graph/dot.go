package graph

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/ckguard/ckguard/refindex"
)

// Node identifiers: one per job folder and one per live `_metadata`, both unambiguous store keys.
func folderID(f string) string { return "folder:" + f }
func ckptID(m string) string   { return "ckpt:" + m }

// quote makes s a DOT double-quoted string; "\n" in s becomes a centred line break.
func quote(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return `"` + strings.ReplaceAll(s, "\n", `\n`) + `"`
}

func folderName(f string) string {
	if f == "" {
		return "/"
	}
	return f + "/"
}

// EdgeLabel is the label of an edge: "6 files, 1.2 MiB" (plus missing files, if any).
func EdgeLabel(e Edge) string {
	if !e.Counted {
		return "files unknown"
	}
	files := "files"
	if e.Files == 1 {
		files = "file"
	}
	l := fmt.Sprintf("%d %s, %s", e.Files, files, humanize.IBytes(uint64(e.Bytes)))
	if e.Missing > 0 {
		l += fmt.Sprintf("\n%d MISSING", e.Missing)
	}
	return l
}

func ckptLabel(ci refindex.CheckpointInfo) string {
	name := path.Base(ci.Dir)
	var tags []string
	if ci.Protected {
		tags = append(tags, "protected: newest")
	}
	if ci.Pinned {
		tags = append(tags, "pinned")
	}
	l := fmt.Sprintf("%s\n%s, %s\n%d refs", name, ci.Kind, ci.Completed.UTC().Format("2006-01-02 15:04Z"), ci.Refs)
	if len(tags) > 0 {
		l += "\n" + strings.Join(tags, ", ")
	}
	return l
}

// legend explains the picture's marks (an HTML-like Graphviz label: a table of samples).
const legend = `<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="4">
<TR><TD COLSPAN="2"><B>legend</B></TD></TR>
<TR><TD>rounded box</TD><TD ALIGN="LEFT">live checkpoint (its _metadata exists)</TD></TR>
<TR><TD BGCOLOR="lightyellow">yellow box</TD><TD ALIGN="LEFT">live savepoint</TD></TR>
<TR><TD BGCOLOR="#fbd5d5"><FONT COLOR="red">red folder</FONT></TD><TD ALIGN="LEFT">no live checkpoint of its own, files still referenced: do not purge</TD></TR>
<TR><TD>arrow, "N files"</TD><TD ALIGN="LEFT">references N files of that job folder</TD></TR>
<TR><TD><FONT COLOR="red">red dashed arrow</FONT></TD><TD ALIGN="LEFT">referenced files already missing (ckguard verify)</TD></TR>
<TR><TD>dotted arrow</TD><TD ALIGN="LEFT">savepoint taken of that job</TD></TR>
</TABLE>>`

// DOT writes the graph in Graphviz's language: one cluster per job folder (titled with the folder and
// its counts) holding its live checkpoints; referenced folders without live checkpoints stand alone,
// in red (the folders a purge must not touch); an edge per checkpoint and referenced foreign folder,
// a dotted edge from a savepoint to the job it was taken of, and a legend.
func (g *Graph) DOT(w io.Writer) error {
	d := &dotWriter{g: g, layout: g.dotLayout()}
	d.header()
	for i, j := range g.Jobs {
		d.jobCluster(i, j)
	}
	d.orphanFolders()
	d.referenceEdges()
	d.savepointEdges()
	d.unparseableAndLegend()
	fmt.Fprintf(&d.b, "}\n")
	_, err := w.Write(d.b.Bytes())
	return err
}

// dotLayout is what the DOT writer decides before it draws anything.
type dotLayout struct {
	// needNode: the folders drawn as a node of their own. A folder node inside a cluster is drawn only
	// where an edge ends or starts at it; otherwise the cluster's title says everything and the node
	// would be a box connected to nothing.
	needNode map[string]bool
	// clusterOf is each job folder's cluster number (its index in Graph.Jobs).
	clusterOf map[string]int
	// anchorOf is, per job folder drawn with its checkpoints (not byJob), the node a "savepoint of"
	// edge ends at, clipped to the cluster (lhead): its first checkpoint.
	anchorOf map[string]string
}

func (g *Graph) dotLayout() dotLayout {
	l := dotLayout{needNode: map[string]bool{}, clusterOf: map[string]int{}, anchorOf: map[string]string{}}
	for _, e := range g.Edges {
		l.needNode[e.To] = true
		if g.byJob {
			l.needNode[e.From] = true
		}
	}
	for i, j := range g.Jobs {
		l.clusterOf[j.Folder] = i
		if !g.byJob && len(j.Checkpoints) > 0 {
			l.anchorOf[j.Folder] = ckptID(j.Checkpoints[0].Metadata)
		}
	}
	for _, s := range g.SavepointsOf {
		if l.anchorOf[s.Job] == "" {
			l.needNode[s.Job] = true
		}
		if g.byJob {
			l.needNode[folderOfSavepoint(g, s.Savepoint)] = true
		}
	}
	return l
}

// dotWriter writes one graph's DOT text into b, section by section, in the order DOT.
type dotWriter struct {
	g      *Graph
	layout dotLayout
	b      bytes.Buffer
}

func (d *dotWriter) header() {
	title := "ckguard graph: live checkpoints and the job folders whose files they reference"
	if d.g.Store != "" {
		title += "\nstore: " + d.g.Store
	}
	fmt.Fprintf(&d.b, "digraph ckguard {\n")
	fmt.Fprintf(&d.b, "  graph [rankdir=LR, compound=true, fontname=\"Helvetica\", fontsize=12, labelloc=t, label=%s];\n", quote(title))
	fmt.Fprintf(&d.b, "  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9];\n")
}

// jobCluster draws job folder j as cluster i: its title with the counts of what is live in it, its
// folder node where an edge needs one, and (not byJob) one node per live checkpoint or savepoint.
func (d *dotWriter) jobCluster(i int, j Job) {
	cks, sps := 0, 0
	for _, ci := range j.Checkpoints {
		if ci.Kind == "savepoint" {
			sps++
		} else {
			cks++
		}
	}
	kind := "job folder"
	if cks == 0 && sps > 0 {
		kind = "savepoint folder"
	}
	counts := plural(cks, "live checkpoint") + ", " + plural(sps, "savepoint")
	if kind == "savepoint folder" {
		counts = plural(sps, "live savepoint")
	}
	fmt.Fprintf(&d.b, "  subgraph cluster_%d {\n    style=rounded; color=gray50; label=%s;\n", i, quote(folderName(j.Folder)+"\n"+kind+": "+counts))
	if d.layout.needNode[j.Folder] {
		label := "files of this folder"
		if d.g.byJob {
			label = kind + "\n" + counts
		}
		fmt.Fprintf(&d.b, "    %s [shape=folder, label=%s];\n", quote(folderID(j.Folder)), quote(label))
	}
	if !d.g.byJob {
		for _, ci := range j.Checkpoints {
			style := "shape=box, style=rounded"
			if ci.Kind == "savepoint" {
				style = "shape=box, style=\"rounded,filled\", fillcolor=lightyellow"
			}
			fmt.Fprintf(&d.b, "    %s [%s, label=%s];\n", quote(ckptID(ci.Metadata)), style, quote(ckptLabel(ci)))
		}
	}
	fmt.Fprintf(&d.b, "  }\n")
}

// orphanFolders draws, in red, the folders no live checkpoint is in whose files are still referenced.
func (d *dotWriter) orphanFolders() {
	for _, f := range d.g.Folders {
		fmt.Fprintf(&d.b, "  %s [shape=folder, style=filled, fillcolor=\"#fbd5d5\", color=red, label=%s];\n", quote(folderID(f)),
			quote(folderName(f)+"\nno live checkpoints: files still referenced"))
	}
}

// referenceEdges draws one edge per (checkpoint or job folder, referenced folder); red into an
// orphan folder, red and dashed where referenced files are missing.
func (d *dotWriter) referenceEdges() {
	orphanFolder := map[string]bool{}
	for _, f := range d.g.Folders {
		orphanFolder[f] = true
	}
	for _, e := range d.g.Edges {
		attrs := ""
		if orphanFolder[e.To] {
			attrs = ", color=red, fontcolor=red, penwidth=2"
		}
		if e.Missing > 0 {
			attrs = ", color=red, fontcolor=red, penwidth=2, style=dashed"
		}
		from, label := ckptID(e.From), EdgeLabel(e)
		if d.g.byJob {
			from = folderID(e.From)
			label += "\nfrom " + plural(e.Checkpoints, "checkpoint")
		}
		fmt.Fprintf(&d.b, "  %s -> %s [label=%s%s];\n", quote(from), quote(folderID(e.To)), quote(label), attrs)
	}
}

// savepointEdges draws the dotted "savepoint of" edges, at most one per (from, to) node pair.
func (d *dotWriter) savepointEdges() {
	seenPair := map[[2]string]bool{}
	for _, s := range d.g.SavepointsOf {
		from, to, attrs := ckptID(s.Savepoint), folderID(s.Job), ""
		if d.g.byJob {
			from = folderID(folderOfSavepoint(d.g, s.Savepoint))
		} else if a := d.layout.anchorOf[s.Job]; a != "" {
			// To the job's cluster, not to one of its checkpoints.
			to, attrs = a, fmt.Sprintf(", lhead=cluster_%d", d.layout.clusterOf[s.Job])
		}
		if seenPair[[2]string{from, to}] {
			continue
		}
		seenPair[[2]string{from, to}] = true
		fmt.Fprintf(&d.b, "  %s -> %s [class=\"savepoint-of\", style=dotted, arrowhead=empty, label=\"savepoint of\"%s];\n", quote(from), quote(to), attrs)
	}
}

// unparseableAndLegend draws the unparseable _metadata (each refuses what it names) and then the
// legend, or a note when there is nothing to draw at all.
func (d *dotWriter) unparseableAndLegend() {
	for _, u := range d.g.Unparseable {
		fmt.Fprintf(&d.b, "  %s [shape=octagon, color=red, label=%s];\n", quote(ckptID(u.Metadata)),
			quote(u.Metadata+"\nUNPARSEABLE: refuses "+u.Refuses))
	}
	if len(d.g.Jobs) == 0 && len(d.g.Folders) == 0 && len(d.g.Unparseable) == 0 {
		fmt.Fprintf(&d.b, "  empty [shape=plaintext, label=\"no live checkpoints or savepoints\"];\n")
	} else {
		fmt.Fprintf(&d.b, "  legend [shape=none, margin=0, fontsize=9, label=%s];\n", legend)
	}
}

// folderOfSavepoint is the job folder (in the picture) that holds the savepoint metadataKey.
func folderOfSavepoint(g *Graph, metadataKey string) string {
	for _, j := range g.Jobs {
		for _, ci := range j.Checkpoints {
			if ci.Metadata == metadataKey {
				return j.Folder
			}
		}
	}
	return ""
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// DotAvailable reports whether Graphviz's dot is installed.
func DotAvailable() bool {
	_, err := exec.LookPath("dot")
	return err == nil
}

// SVG renders DOT source with Graphviz (`dot -Tsvg`).
func SVG(ctx context.Context, dot []byte) ([]byte, error) {
	exe, err := exec.LookPath("dot")
	if err != nil {
		return nil, fmt.Errorf("graphviz is not installed (Debian/Ubuntu: apt-get install graphviz): %w", err)
	}
	cmd := exec.CommandContext(ctx, exe, "-Tsvg")
	cmd.Stdin = bytes.NewReader(dot)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("dot -Tsvg: %w: %s", err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}
