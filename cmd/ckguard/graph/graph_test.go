package graph

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// dotEdge is one parsed `"a" -> "b" [label="…"]` statement.
type dotEdge struct {
	from, to, label string
}

var (
	edgeRE  = regexp.MustCompile(`^\s*"((?:[^"\\]|\\.)*)"\s*->\s*"((?:[^"\\]|\\.)*)"\s*\[(.*)\];\s*$`)
	labelRE = regexp.MustCompile(`label="((?:[^"\\]|\\.)*)"`)
	countRE = regexp.MustCompile(`^(\d+) files?, ([0-9.]+ (?:B|KiB|MiB|GiB))`)
)

// parseDOT extracts the edges and checks the overall structure (one digraph, balanced braces), so
// a malformed output fails here even without Graphviz.
func parseDOT(t *testing.T, src string) []dotEdge {
	t.Helper()
	if !strings.HasPrefix(src, "digraph ckguard {\n") || !strings.HasSuffix(src, "}\n") {
		t.Fatalf("not a digraph:\n%s", src)
	}
	if o, c := strings.Count(src, "{"), strings.Count(src, "}"); o != c {
		t.Fatalf("unbalanced braces (%d vs %d):\n%s", o, c, src)
	}
	var out []dotEdge
	for _, line := range strings.Split(src, "\n") {
		m := edgeRE.FindStringSubmatch(line)
		if m != nil && strings.Contains(m[3], `class="savepoint-of"`) {
			continue // not a reference: TestGraphLegendAndSavepoints
		}
		if m == nil {
			if strings.Contains(line, "->") {
				t.Fatalf("unparsed edge line %q", line)
			}
			continue
		}
		l := labelRE.FindStringSubmatch(m[3])
		if l == nil {
			t.Fatalf("edge without label: %q", line)
		}
		out = append(out, dotEdge{from: m[1], to: m[2], label: strings.ReplaceAll(l[1], `\n`, "\n")})
	}
	return out
}

// indexed builds an index over tree's store, synced, as the CLI would open it.
func indexed(t *testing.T, tree *treegen.Tree) (*refindex.Index, *StoreRefs) {
	t.Helper()
	st, err := localstore.New(tree.Root)
	if err != nil {
		t.Fatal(err)
	}
	pol := refindex.DefaultPolicy()
	pol.Now = func() time.Time { return tree.Now }
	ix, err := refindex.Open(filepath.Join(t.TempDir(), "index"), st, pol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	if err := ix.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	refs, err := NewStoreRefs(st, tree.Maps, tree.EntropyKey)
	if err != nil {
		t.Fatal(err)
	}
	return ix, refs
}

func render(t *testing.T, ix *refindex.Index, refs *StoreRefs, job string) (*Graph, string) {
	t.Helper()
	res, err := ix.Checkpoints(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, j := range res.Jobs {
		known[j.Job] = true
	}
	refs.Known = func(f string) bool { return known[f] }
	g, err := Build(context.Background(), res, job, refs, refs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := g.DOT(&b); err != nil {
		t.Fatal(err)
	}
	return g, b.String()
}

// wantEdges computes the cross-job edges from the generator's ground truth: for every live
// checkpoint of newJob, the distinct files of oldJob it references and their bytes.
func wantEdges(tree *treegen.Tree, newJob, oldJob string) map[string]string {
	out := map[string]string{}
	for m, c := range tree.Live {
		if !strings.HasPrefix(m, newJob+"/") {
			continue
		}
		seen := map[string]bool{}
		var bytes int64
		for _, r := range c.Refs {
			if strings.HasPrefix(r, oldJob+"/") && !seen[r] {
				seen[r] = true
				bytes += tree.Files[r].Size
			}
		}
		if len(seen) > 0 {
			out[ckptID(m)+" -> "+folderID(oldJob)] = EdgeLabel(Edge{Files: len(seen), Bytes: bytes, Counted: true})
		}
	}
	return out
}

func TestGraphIncidents(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		gen      func(string, time.Time, ...treegen.Options) (*treegen.Tree, error)
		old, cur string
		purge    bool // delete the old job's checkpoints first: its folder has no live checkpoint left
	}{
		{"IncidentOne", treegen.IncidentOne, "flink-checkpoints/" + treegen.IncidentOneOldJob, "flink-checkpoints/" + treegen.IncidentOneNewJob, false},
		{"IncidentOneAfterRetiringOldJob", treegen.IncidentOne, "flink-checkpoints/" + treegen.IncidentOneOldJob, "flink-checkpoints/" + treegen.IncidentOneNewJob, true},
		{"IncidentTwo", treegen.IncidentTwo, "checkpoints/" + treegen.IncidentTwoOldJob, "checkpoints/" + treegen.IncidentTwoNewJob, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := tc.gen(t.TempDir(), now)
			if err != nil {
				t.Fatal(err)
			}
			if tc.purge {
				for m := range tree.Live {
					if strings.HasPrefix(m, tc.old+"/") {
						if err := tree.Retire(m); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			ix, refs := indexed(t, tree)
			g, dot := render(t, ix, refs, "")
			want := wantEdges(tree, tc.cur, tc.old)
			if len(want) == 0 {
				t.Fatalf("scenario has no cross-job reference from %s to %s", tc.cur, tc.old)
			}
			checkEdges(t, dot, want)
			// A folder without live checkpoints is drawn as such (red): the one a purge must spare.
			isOrphan := len(g.Folders) == 1 && g.Folders[0] == tc.old
			if tc.purge != isOrphan {
				t.Errorf("referenced folders without checkpoints = %v (purged old job: %v)", g.Folders, tc.purge)
			}
			if tc.purge && !strings.Contains(dot, "no live checkpoints: files still referenced") {
				t.Errorf("purged old job folder not marked:\n%s", dot)
			}

			// --job keeps the job, what it references, and who references it.
			for _, job := range []string{tc.old, tc.cur[strings.LastIndexByte(tc.cur, '/')+1:]} {
				_, dotJ := render(t, ix, refs, job)
				if n := len(parseDOT(t, dotJ)); n != len(want) {
					t.Errorf("--job %s: %d edges, want %d", job, n, len(want))
				}
			}
			_, other := render(t, ix, refs, "no-such-job")
			if len(parseDOT(t, other)) != 0 {
				t.Errorf("--job no-such-job drew edges")
			}

			// --by-job: one edge, every referenced file of the old job counted once.
			union := map[string]bool{}
			var unionBytes int64
			for m, c := range tree.Live {
				if strings.HasPrefix(m, tc.cur+"/") {
					for _, r := range c.Refs {
						if strings.HasPrefix(r, tc.old+"/") && !union[r] {
							union[r] = true
							unionBytes += tree.Files[r].Size
						}
					}
				}
			}
			bj := g.ByJob()
			var bd bytes.Buffer
			if err := bj.DOT(&bd); err != nil {
				t.Fatal(err)
			}
			be := parseDOT(t, bd.String())
			wantLabel := EdgeLabel(Edge{Files: len(union), Bytes: unionBytes, Counted: true}) + "\nfrom " + plural(len(want), "checkpoint")
			if len(be) != 1 || be[0].from != folderID(tc.cur) || be[0].to != folderID(tc.old) || be[0].label != wantLabel {
				t.Errorf("by job: edges %+v, want one %s -> %s %q", be, tc.cur, tc.old, wantLabel)
			}

			svg := requireSVG(t, dot)
			if svg != "" && (!strings.Contains(svg, "<svg") || !strings.Contains(svg, "chk&#45;") || strings.Count(svg, "class=\"edge\"") != len(want)) {
				t.Errorf("dot -Tsvg output is not the graph:\n%.400s", svg)
			}
		})
	}
}

// checkEdges compares the drawn edges (and their labels) with want (wantEdges).
func checkEdges(t *testing.T, dot string, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, e := range parseDOT(t, dot) {
		got[`"`+e.from+`" -> "`+e.to+`"`] = e.label
		if countRE.FindStringSubmatch(e.label) == nil {
			t.Errorf("edge label %q does not start with a file count and a size", e.label)
		}
	}
	for k, label := range want {
		from, to, _ := strings.Cut(k, " -> ")
		if got[strconv.Quote(from)+" -> "+strconv.Quote(to)] != label {
			t.Errorf("edge %s: label %q, want %q\nDOT:\n%s", k, got[strconv.Quote(from)+" -> "+strconv.Quote(to)], label, dot)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d edges, want %d (only cross-job ones):\n%s", len(got), len(want), dot)
	}
}

// TestGraphSymlinkedStore: Flink wrote its paths through a symlink to the store (the store root resolves
// elsewhere); the graph resolves them like the index does, so the cross-job edges are all there.
func TestGraphSymlinkedStore(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	link := filepath.Join(t.TempDir(), "ckpt-link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	tree, err := treegen.IncidentTwo(link, now, treegen.Options{URIPrefix: "file:" + link})
	if err != nil {
		t.Fatal(err)
	}
	tree.Root = link // the CLI is given the link, as Flink was
	ix, refs := indexed(t, tree)
	if refs.Store.Root() == link {
		t.Fatalf("store root %s was not resolved: the test would not exercise root aliases", link)
	}
	_, dot := render(t, ix, refs, "")
	want := wantEdges(tree, "checkpoints/"+treegen.IncidentTwoNewJob, "checkpoints/"+treegen.IncidentTwoOldJob)
	if len(want) == 0 {
		t.Fatal("scenario has no cross-job reference")
	}
	checkEdges(t, dot, want)
}

// TestGraphMissingFiles: after an unguarded purge (the incident), the edges say which referenced
// files are gone.
func TestGraphMissingFiles(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tree, err := treegen.IncidentTwo(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	old := "checkpoints/" + treegen.IncidentTwoOldJob
	if err := os.RemoveAll(filepath.Join(tree.Root, old)); err != nil {
		t.Fatal(err)
	}
	for m := range tree.Live {
		if strings.HasPrefix(m, old+"/") {
			delete(tree.Live, m)
		}
	}
	ix, refs := indexed(t, tree)
	g, dot := render(t, ix, refs, "")
	if len(g.Edges) == 0 {
		t.Fatalf("no edges:\n%s", dot)
	}
	for _, e := range g.Edges {
		if e.Missing != e.Files || e.Bytes != 0 {
			t.Errorf("edge %s -> %s: %d files, %d missing, %d bytes; want all missing", e.From, e.To, e.Files, e.Missing, e.Bytes)
		}
	}
	if !strings.Contains(dot, "MISSING") || !strings.Contains(dot, "style=dashed") {
		t.Errorf("missing files not flagged:\n%s", dot)
	}
}

// requireSVG renders with Graphviz; without it the test skips that part (fails in CI).
func requireSVG(t *testing.T, dot string) string {
	t.Helper()
	if _, err := exec.LookPath("dot"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("graphviz (dot) missing in CI: %v", err)
		}
		t.Logf("graphviz not installed: SVG not checked")
		return ""
	}
	svg, err := SVG(context.Background(), []byte(dot))
	if err != nil {
		t.Fatal(err)
	}
	return string(svg)
}

// TestGraphLegendAndSavepoints: the picture explains its marks (a legend), ties a savepoint to the job
// it was taken of (Flink names it savepoint-<job id prefix>-…), and draws no folder box that nothing
// connects to (the cluster's title already names the folder).
func TestGraphLegendAndSavepoints(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tree, err := treegen.IncidentOne(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	newJob := "flink-checkpoints/" + treegen.IncidentOneNewJob
	sp := "flink-savepoints/savepoint-" + treegen.IncidentOneNewJob[:6] + "-5e8c1f0a9b3d"
	c, err := tree.Checkpoint(treegen.Spec{Dir: sp, ID: 90, Savepoint: true, Completed: now.Add(-48 * time.Hour), Private: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tree.Data(c, now.Add(-49*time.Hour)); err != nil {
		t.Fatal(err)
	}
	ix, refs := indexed(t, tree)
	g, dot := render(t, ix, refs, "")
	want := []SavepointOf{{Savepoint: sp + "/_metadata", Job: newJob}}
	if fmt.Sprint(g.SavepointsOf) != fmt.Sprint(want) {
		t.Errorf("savepoint_of %v, want %v", g.SavepointsOf, want)
	}
	for _, s := range []string{"legend [shape=none", "savepoint taken of that job", `class="savepoint-of"`, "lhead=cluster_",
		quote(newJob + "/\njob folder: 2 live checkpoints, 0 savepoints"), quote("flink-savepoints/\nsavepoint folder: 1 live savepoint")} {
		if !strings.Contains(dot, s) {
			t.Errorf("DOT lacks %s:\n%s", s, dot)
		}
	}
	if strings.Contains(dot, quote(folderID(newJob))+" [") {
		t.Errorf("DOT draws a folder node for %s, which no edge touches:\n%s", newJob, dot)
	}
	parseDOT(t, dot)
	requireSVG(t, dot)

	// One edge per pair of job folders: the savepoint folder points at the job folder.
	var b bytes.Buffer
	if err := g.ByJob().DOT(&b); err != nil {
		t.Fatal(err)
	}
	if s := quote(folderID("flink-savepoints")) + " -> " + quote(folderID(newJob)) + ` [class="savepoint-of"`; !strings.Contains(b.String(), s) {
		t.Errorf("by-job DOT lacks %s:\n%s", s, b.String())
	}
	requireSVG(t, b.String())
}

// TestGraphUnparseableScope: an unparseable _metadata is drawn with what it refuses (its scope since
// one bad entry no longer stops the whole mount), never as blocking every deletion.
func TestGraphUnparseableScope(t *testing.T) {
	g := &Graph{Unparseable: []refindex.CheckpointInfo{{Metadata: "scratch/x/chk-1/_metadata", Error: "bad magic", Refuses: "deletions in its folder scratch/x"}}}
	var b strings.Builder
	if err := g.DOT(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "refuses deletions in its folder scratch/x") || strings.Contains(b.String(), "every deletion") {
		t.Errorf("DOT of an unparseable _metadata:\n%s", b.String())
	}
}
