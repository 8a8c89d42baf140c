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
	var b bytes.Buffer
	title := "ckguard graph: live checkpoints and the job folders whose files they reference"
	if g.Store != "" {
		title += "\nstore: " + g.Store
	}
	// A folder node inside a cluster is drawn only where an edge ends or starts at it; otherwise the
	// cluster's title says everything and the node would be a box connected to nothing.
	needNode := map[string]bool{}
	for _, e := range g.Edges {
		needNode[e.To] = true
		if g.byJob {
			needNode[e.From] = true
		}
	}
	clusterOf, anchorOf := map[string]int{}, map[string]string{}
	for i, j := range g.Jobs {
		clusterOf[j.Folder] = i
		if !g.byJob && len(j.Checkpoints) > 0 {
			anchorOf[j.Folder] = ckptID(j.Checkpoints[0].Metadata)
		}
	}
	for _, s := range g.SavepointsOf {
		if anchorOf[s.Job] == "" {
			needNode[s.Job] = true
		}
		if g.byJob {
			needNode[folderOfSavepoint(g, s.Savepoint)] = true
		}
	}
	fmt.Fprintf(&b, "digraph ckguard {\n")
	fmt.Fprintf(&b, "  graph [rankdir=LR, compound=true, fontname=\"Helvetica\", fontsize=12, labelloc=t, label=%s];\n", quote(title))
	fmt.Fprintf(&b, "  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9];\n")
	for i, j := range g.Jobs {
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
		fmt.Fprintf(&b, "  subgraph cluster_%d {\n    style=rounded; color=gray50; label=%s;\n", i, quote(folderName(j.Folder)+"\n"+kind+": "+counts))
		if needNode[j.Folder] {
			label := "files of this folder"
			if g.byJob {
				label = kind + "\n" + counts
			}
			fmt.Fprintf(&b, "    %s [shape=folder, label=%s];\n", quote(folderID(j.Folder)), quote(label))
		}
		for _, ci := range j.Checkpoints {
			if g.byJob {
				break
			}
			style := "shape=box, style=rounded"
			if ci.Kind == "savepoint" {
				style = "shape=box, style=\"rounded,filled\", fillcolor=lightyellow"
			}
			fmt.Fprintf(&b, "    %s [%s, label=%s];\n", quote(ckptID(ci.Metadata)), style, quote(ckptLabel(ci)))
		}
		fmt.Fprintf(&b, "  }\n")
	}
	for _, f := range g.Folders {
		fmt.Fprintf(&b, "  %s [shape=folder, style=filled, fillcolor=\"#fbd5d5\", color=red, label=%s];\n", quote(folderID(f)),
			quote(folderName(f)+"\nno live checkpoints: files still referenced"))
	}
	orphanFolder := map[string]bool{}
	for _, f := range g.Folders {
		orphanFolder[f] = true
	}
	for _, e := range g.Edges {
		attrs := ""
		if orphanFolder[e.To] {
			attrs = ", color=red, fontcolor=red, penwidth=2"
		}
		if e.Missing > 0 {
			attrs = ", color=red, fontcolor=red, penwidth=2, style=dashed"
		}
		from, label := ckptID(e.From), EdgeLabel(e)
		if g.byJob {
			from = folderID(e.From)
			label += "\nfrom " + plural(e.Checkpoints, "checkpoint")
		}
		fmt.Fprintf(&b, "  %s -> %s [label=%s%s];\n", quote(from), quote(folderID(e.To)), quote(label), attrs)
	}
	seenPair := map[[2]string]bool{}
	for _, s := range g.SavepointsOf {
		from, to, attrs := ckptID(s.Savepoint), folderID(s.Job), ""
		if g.byJob {
			from = folderID(folderOfSavepoint(g, s.Savepoint))
		} else if a := anchorOf[s.Job]; a != "" {
			// To the job's cluster, not to one of its checkpoints.
			to, attrs = a, fmt.Sprintf(", lhead=cluster_%d", clusterOf[s.Job])
		}
		if seenPair[[2]string{from, to}] {
			continue
		}
		seenPair[[2]string{from, to}] = true
		fmt.Fprintf(&b, "  %s -> %s [class=\"savepoint-of\", style=dotted, arrowhead=empty, label=\"savepoint of\"%s];\n", quote(from), quote(to), attrs)
	}
	for _, u := range g.Unparseable {
		fmt.Fprintf(&b, "  %s [shape=octagon, color=red, label=%s];\n", quote(ckptID(u.Metadata)),
			quote(u.Metadata+"\nUNPARSEABLE: refuses "+u.Refuses))
	}
	if len(g.Jobs) == 0 && len(g.Folders) == 0 && len(g.Unparseable) == 0 {
		fmt.Fprintf(&b, "  empty [shape=plaintext, label=\"no live checkpoints or savepoints\"];\n")
	} else {
		fmt.Fprintf(&b, "  legend [shape=none, margin=0, fontsize=9, label=%s];\n", legend)
	}
	fmt.Fprintf(&b, "}\n")
	_, err := w.Write(b.Bytes())
	return err
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
