// Package graph builds the dependency picture of `ckguard graph`: job folders, their live
// checkpoints and savepoints, and an edge from each checkpoint to every other job folder whose files
// it references, labelled with the number of files and bytes. It answers the on-call question "which
// job folders can I not purge, and because of whom?" at a glance.
//
// The nodes and edges come from the index (refindex.Querier.Checkpoints: live checkpoints and the
// other job folders each references); the file counts and bytes of each edge come from a RefLister,
// which reads the checkpoint's own `_metadata` (the index keeps no per-edge totals).
package graph

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/ckguard/ckguard/refindex"
)

// Ref is one object a checkpoint references, as a canonical store key.
type Ref struct {
	Key string
	// Folder is the job folder the key belongs to by Flink's layout (pathnorm's JobFolder, which
	// also attributes entropy-injected keys), "" when it follows no job layout.
	Folder string
	// Dir marks a file-merging directory handle: everything below Key is referenced.
	Dir bool
}

// RefLister lists the objects one live `_metadata` references inside the store.
type RefLister interface {
	Refs(ctx context.Context, metadataKey string) ([]Ref, error)
}

// Sizer sizes referenced files: one listing per referenced folder (cheap on S3 compared with a HEAD
// per file), and a single stat for keys the listing did not contain (entropy-injected keys live
// outside their job folder's prefix).
type Sizer interface {
	Sizes(ctx context.Context, folder string) (map[string]int64, error)
	// Size returns the size of key; ok is false when it does not exist.
	Size(ctx context.Context, key string) (n int64, ok bool, err error)
}

// Edge is a live checkpoint referencing files of another job folder.
type Edge struct {
	From    string `json:"from"`     // _metadata store key
	FromJob string `json:"from_job"` // its job folder
	To      string `json:"to"`       // the other job folder
	Files   int    `json:"files"`    // distinct referenced files in To (below directory handles too)
	Bytes   int64  `json:"bytes"`    // their size in the store
	Missing int    `json:"missing"`  // referenced files no longer in the store (verify reports them)
	// Counted is false when the counts could not be read (the _metadata vanished since the index
	// answered, or it could not be read): the edge is still drawn, labelled "files unknown".
	Counted bool `json:"counted"`
	// Checkpoints is how many checkpoints a job-level edge (ByJob) stands for.
	Checkpoints int `json:"checkpoints,omitempty"`

	files map[string]int64 // key → size (-1: missing), for merging edges by job
}

// SavepointOf is a savepoint and the job folder of the job it was taken of.
type SavepointOf struct {
	Savepoint string `json:"savepoint"` // _metadata store key
	Job       string `json:"job"`       // job folder
}

// savepointName is Flink's savepoint folder name: savepoint-<job id prefix>-<random>.
var savepointName = regexp.MustCompile(`^savepoint-([0-9a-f]{6})-[0-9a-f]+$`)

// savepointsOf links the savepoints of jobs to the job folder their name names.
func savepointsOf(jobs []Job) []SavepointOf {
	var out []SavepointOf
	for _, j := range jobs {
		for _, ci := range j.Checkpoints {
			m := savepointName.FindStringSubmatch(path.Base(ci.Dir))
			if ci.Kind != "savepoint" || m == nil {
				continue
			}
			var match []string
			for _, o := range jobs {
				if o.Folder != j.Folder && strings.HasPrefix(path.Base(o.Folder), m[1]) {
					match = append(match, o.Folder)
				}
			}
			if len(match) == 1 {
				out = append(out, SavepointOf{Savepoint: ci.Metadata, Job: match[0]})
			}
		}
	}
	return out
}

// Job is a job folder with live checkpoints or savepoints.
type Job struct {
	Folder      string                    `json:"folder"`
	Checkpoints []refindex.CheckpointInfo `json:"checkpoints"`
}

// Graph is the whole picture.
type Graph struct {
	Store string `json:"store,omitempty"`
	Jobs  []Job  `json:"jobs"`
	// Folders are referenced job folders without live checkpoints of their own, such as the folder
	// of an old job whose checkpoints were retired but whose SSTs a restored job still uses: exactly
	// the folders a cleanup must not purge.
	Folders []string `json:"referenced_folders_without_checkpoints,omitempty"`
	Edges   []Edge   `json:"edges"`
	// SavepointsOf ties each savepoint to the job it was taken of, where its folder name says so
	// (Flink names them savepoint-<first 6 characters of the job id>-<random>) and exactly one job
	// folder in the picture has such an id.
	SavepointsOf []SavepointOf             `json:"savepoint_of,omitempty"`
	Unparseable  []refindex.CheckpointInfo `json:"unparseable,omitempty"`
	// byJob: edges start at job folders (ByJob), checkpoints are summarised, not drawn.
	byJob bool
}

// matchJob reports whether folder is job (or ends with it, e.g. just the job id), as the index's
// Checkpoints(job) filter does.
func matchJob(folder, job string) bool {
	job = strings.Trim(job, "/")
	return job == "" || folder == job || strings.HasSuffix("/"+folder, "/"+job)
}

// Build assembles the graph from the index's answer, restricted to job ("" = all): the job's own
// checkpoints, the folders they reference, and the checkpoints of other jobs that reference the job.
func Build(ctx context.Context, res *refindex.CheckpointsResult, job string, refs RefLister, sizes Sizer, log *slog.Logger) (*Graph, error) {
	if log == nil {
		log = slog.Default()
	}
	g := &Graph{Jobs: []Job{}, Edges: []Edge{}}
	want, keepJob, referenced := selectEdges(res, job)
	for _, j := range res.Jobs {
		if !keepJob[j.Job] {
			continue
		}
		jj := Job{Folder: j.Job}
		for _, ci := range j.Checkpoints {
			// With a job filter, other jobs show only the checkpoints that reference it.
			if matchJob(j.Job, job) || referencesMatching(ci, job) {
				jj.Checkpoints = append(jj.Checkpoints, ci)
			}
		}
		g.Jobs = append(g.Jobs, jj)
	}
	known := map[string]bool{}
	for _, j := range res.Jobs {
		known[j.Job] = true
	}
	for f := range referenced {
		if !known[f] {
			g.Folders = append(g.Folders, f)
		}
	}
	sort.Strings(g.Folders)
	for _, u := range res.Unparseable {
		if matchJob(u.Job, job) {
			g.Unparseable = append(g.Unparseable, u)
		}
	}
	edges, err := countedEdges(ctx, want, refs, sizes, log)
	if err != nil {
		return nil, err
	}
	g.Edges = append(g.Edges, edges...)
	sort.Slice(g.Edges, func(a, b int) bool {
		x, y := g.Edges[a], g.Edges[b]
		if x.From != y.From {
			return x.From < y.From
		}
		return x.To < y.To
	})
	g.SavepointsOf = savepointsOf(g.Jobs)
	return g, nil
}

// wantedEdge is an edge the graph draws: checkpoint ci references files in job folder to.
type wantedEdge struct {
	ci refindex.CheckpointInfo
	to string
}

// selectEdges is the edges the job filter keeps (those from or to a matching job folder), the job
// folders the graph shows (matching ones and those with a kept edge), and the folders the kept edges
// end at.
func selectEdges(res *refindex.CheckpointsResult, job string) (want []wantedEdge, keepJob, referenced map[string]bool) {
	keepJob, referenced = map[string]bool{}, map[string]bool{}
	for _, j := range res.Jobs {
		for _, ci := range j.Checkpoints {
			for _, to := range ci.ReferencesJobs {
				if matchJob(j.Job, job) || matchJob(to, job) {
					want = append(want, wantedEdge{ci, to})
					keepJob[j.Job] = true
					referenced[to] = true
				}
			}
		}
		if matchJob(j.Job, job) {
			keepJob[j.Job] = true
		}
	}
	return want, keepJob, referenced
}

// countedEdges makes the edges with their counts: each checkpoint's _metadata is parsed once and each
// referenced folder listed once. A checkpoint whose references cannot be read has its edges drawn
// without counts; the end of ctx, or a folder listing that fails, fails the graph.
func countedEdges(ctx context.Context, want []wantedEdge, refs RefLister, sizes Sizer, log *slog.Logger) ([]Edge, error) {
	c := &counter{sizes: sizes, listed: map[string]map[string]int64{}}
	refsOf := map[string][]Ref{}
	var edges []Edge
	for _, p := range want {
		e := Edge{From: p.ci.Metadata, FromJob: p.ci.Job, To: p.to}
		rs, ok := refsOf[p.ci.Metadata]
		if !ok {
			var err error
			if rs, err = refs.Refs(ctx, p.ci.Metadata); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				log.Warn("graph: cannot count the references of a checkpoint; its edges are drawn without counts", "metadata", p.ci.Metadata, "err", err)
				rs = nil
			}
			refsOf[p.ci.Metadata] = rs
		}
		if rs != nil {
			if err := c.count(ctx, &e, rs); err != nil {
				return nil, err
			}
			if e.Files == 0 {
				// The index says this checkpoint references the folder but its _metadata (read now)
				// does not: the store changed in between. Draw the index's edge, flagged.
				log.Warn("graph: the index and the _metadata disagree about an edge (store changed meanwhile?)", "metadata", p.ci.Metadata, "folder", p.to)
				e.Counted = false
			}
		}
		edges = append(edges, e)
	}
	return edges, nil
}

func referencesMatching(ci refindex.CheckpointInfo, job string) bool {
	for _, to := range ci.ReferencesJobs {
		if matchJob(to, job) {
			return true
		}
	}
	return false
}

// counter sizes the files of edges, listing every folder at most once.
type counter struct {
	sizes  Sizer
	listed map[string]map[string]int64
}

func (c *counter) list(ctx context.Context, folder string) (map[string]int64, error) {
	if m, ok := c.listed[folder]; ok {
		return m, nil
	}
	m, err := c.sizes.Sizes(ctx, folder)
	if err != nil {
		return nil, fmt.Errorf("graph: list %s: %w", folder, err)
	}
	c.listed[folder] = m
	return m, nil
}

// count fills e with the distinct files of refs in e.To, and their size in the store.
func (c *counter) count(ctx context.Context, e *Edge, refs []Ref) error {
	inFolder, err := c.list(ctx, e.To)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	e.files = map[string]int64{}
	add := func(k string, n int64, ok bool) {
		if seen[k] {
			return
		}
		seen[k] = true
		if ok {
			e.files[k] = n
		} else {
			e.files[k] = -1
		}
		e.Files++
		if ok {
			e.Bytes += n
		} else {
			e.Missing++
		}
	}
	for _, r := range refs {
		if r.Folder != e.To {
			continue
		}
		if r.Dir {
			below, err := c.list(ctx, r.Key)
			if err != nil {
				return err
			}
			for k, n := range below {
				add(k, n, true)
			}
			continue
		}
		if n, ok := inFolder[r.Key]; ok {
			add(r.Key, n, true)
			continue
		}
		n, ok, err := c.sizes.Size(ctx, r.Key)
		if err != nil {
			return fmt.Errorf("graph: stat %s: %w", r.Key, err)
		}
		add(r.Key, n, ok)
	}
	e.Counted = true
	return nil
}

// ByJob merges the edges of each job's checkpoints into one edge per pair of job folders, counting
// each referenced file once: the picture for stores with too many checkpoints to draw one by one.
func (g *Graph) ByJob() *Graph {
	out := &Graph{Store: g.Store, Folders: g.Folders, Unparseable: g.Unparseable, Edges: []Edge{}, Jobs: make([]Job, 0, len(g.Jobs)),
		SavepointsOf: g.SavepointsOf}
	for _, j := range g.Jobs {
		out.Jobs = append(out.Jobs, Job{Folder: j.Folder, Checkpoints: j.Checkpoints})
	}
	type pair struct{ from, to string }
	merged := map[pair]*Edge{}
	var order []pair
	for _, e := range g.Edges {
		p := pair{e.FromJob, e.To}
		m := merged[p]
		if m == nil {
			m = &Edge{From: e.FromJob, FromJob: e.FromJob, To: e.To, Counted: true, files: map[string]int64{}}
			merged[p] = m
			order = append(order, p)
		}
		m.Checkpoints++
		m.Counted = m.Counted && e.Counted
		for k, n := range e.files {
			m.files[k] = n
		}
	}
	for _, p := range order {
		m := merged[p]
		for _, n := range m.files {
			m.Files++
			if n < 0 {
				m.Missing++
			} else {
				m.Bytes += n
			}
		}
		out.Edges = append(out.Edges, *m)
	}
	out.byJob = true
	return out
}
