// Package treegen writes realistic Flink checkpoint trees into a local directory, with `_metadata`
// files produced by the real encoder (refindex/flinkmeta), for tests, benchmarks and the demo.
//
// Every scenario is deterministic: file names derive from seeds, modification times from the Now
// the caller passes. Each returns a *Tree that knows what it wrote and which objects a correct guard
// must keep: Referenced (what `ckguard why` refuses as referenced), Orphans (what `ckguard orphans`
// lists) and Survivors/Garbage of a cleanup of any folder.
//
// Layout written (as FileSystemCheckpointStorage does): <dir>/<job>/chk-<n>/_metadata plus exclusive
// files next to it (relative handles), <dir>/<job>/shared/<uuid> (incremental SSTs, absolute URIs),
// <dir>/<job>/taskowned/, and savepoint-<6 hex>-<12 hex>/ folders with relative files.
package treegen

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
	"github.com/ckguard/ckguard/refindex/pathnorm"
)

// FormatVersion is the `_metadata` version scenarios write (Flink 2.1+).
const FormatVersion = 6

// File is one object the generator wrote.
type File struct {
	Size    int64
	ModTime time.Time
}

// Checkpoint is one live `_metadata` and the store keys it references.
type Checkpoint struct {
	Metadata  string // store key of the _metadata
	Job       string // job folder
	ID        int64
	Savepoint bool
	Completed time.Time
	Refs      []string // store keys (inside the store) it references
	Outside   []string // references outside the store, as written
	Dirs      []string // file-merging directory handles (store keys)
}

// Tree is a generated store and its ground truth.
type Tree struct {
	Name string
	Root string // local directory of the store
	// URIPrefix is the URI Flink wrote for Root (file:<Root> unless a scenario writes s3:// …).
	URIPrefix string
	// Maps and EntropyKey are the index configuration the tree needs (--map, --entropy-key);
	// External the prefixes of other storage its checkpoints reference (--external).
	Maps       []pathnorm.Mapping
	External   []string
	EntropyKey string
	Now        time.Time
	Files      map[string]File
	Live       map[string]*Checkpoint
	// Unparseable lists `_metadata` keys written with broken content.
	Unparseable []string
	// Purge is the folder the scenario's cleanup script removes ("" = none).
	Purge string
}

func newTree(name, root, uriPrefix string, now time.Time) (*Tree, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, err
	}
	if uriPrefix == "" {
		uriPrefix = "file:" + abs
	}
	return &Tree{Name: name, Root: abs, URIPrefix: strings.TrimSuffix(uriPrefix, "/"), Now: now,
		Files: map[string]File{}, Live: map[string]*Checkpoint{}}, nil
}

// URI returns the URI Flink would write for store key k.
func (t *Tree) URI(k string) string { return t.URIPrefix + "/" + k }

// Write creates store key k with size bytes (deterministic content) and the given mtime.
func (t *Tree) Write(k string, size int64, mtime time.Time) error {
	data := make([]byte, size)
	for i := range data {
		data[i] = byte('a' + (len(k)+i)%26)
	}
	return t.WriteBytes(k, data, mtime)
}

// WriteBytes creates store key k with data and mtime.
func (t *Tree) WriteBytes(k string, data []byte, mtime time.Time) error {
	p := filepath.Join(t.Root, filepath.FromSlash(k))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return err
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		return err
	}
	t.Files[k] = File{Size: int64(len(data)), ModTime: mtime}
	return nil
}

// Touch sets the mtime of an existing key.
func (t *Tree) Touch(k string, mtime time.Time) error {
	p := filepath.Join(t.Root, filepath.FromSlash(k))
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		return err
	}
	f := t.Files[k]
	f.ModTime = mtime
	t.Files[k] = f
	return nil
}

// Spec describes one checkpoint or savepoint to write.
type Spec struct {
	Dir       string // folder of the _metadata (store key), e.g. flink/<job>/chk-7
	Job       string // job folder ("" = parent of Dir)
	ID        int64
	Savepoint bool
	Completed time.Time
	// Shared are absolute references (store keys, written as URIs via URIPrefix unless they contain
	// "://" or start with "file:"), e.g. incremental SSTs in some job's shared/ folder.
	Shared []string
	// Private are exclusive files next to _metadata written as relative handles (names only).
	Private []string
	// AbsolutePrivate writes Private files as absolute handles (entropy injection does this).
	AbsolutePrivate []string
	// Dirs are file-merging managed directories (store keys) named by an operator handle.
	Dirs []string
	// Version overrides FormatVersion.
	Version int
}

// Checkpoint encodes and writes spec's `_metadata` (its data files must be written separately:
// see Data) and records it as live.
func (t *Tree) Checkpoint(s Spec) (*Checkpoint, error) {
	v := s.Version
	if v == 0 {
		v = FormatVersion
	}
	var m *flinkmeta.Metadata
	if s.Savepoint {
		m = flinkmeta.NewSavepoint(v, s.ID, false)
	} else {
		m = flinkmeta.NewCheckpoint(v, s.ID, true)
	}
	uri := func(k string) string {
		if strings.Contains(k, "://") || strings.HasPrefix(k, "file:") {
			return k
		}
		return t.URI(k)
	}
	// One keyed operator with two subtasks: shared SSTs and private files alternate between them.
	const par, maxPar = 2, 128
	op := flinkmeta.NewOperator(flinkmeta.ID(s.Dir+"/keyed"), "keyed-agg", "keyed-agg", par, maxPar)
	for i := int32(0); i < par; i++ {
		start, num := flinkmeta.KeyGroupRange(maxPar, par, i)
		var shared, private []flinkmeta.NamedHandle
		for j, k := range s.Shared {
			if int32(j%par) == i {
				shared = append(shared, flinkmeta.NamedHandle{LocalPath: fmt.Sprintf("%06d.sst", j+1), Handle: flinkmeta.File(uri(k), 4096)})
			}
		}
		for j, name := range s.Private {
			if int32(j%par) == i {
				private = append(private, flinkmeta.NamedHandle{LocalPath: fmt.Sprintf("MANIFEST-%06d", j+1), Handle: flinkmeta.Relative(name, 1024)})
			}
		}
		for j, k := range s.AbsolutePrivate {
			if int32(j%par) == i {
				private = append(private, flinkmeta.NamedHandle{LocalPath: fmt.Sprintf("OPTIONS-%06d", j+1), Handle: flinkmeta.File(uri(k), 1024)})
			}
		}
		meta := flinkmeta.Inline(uri(s.Dir)+"/"+flinkmeta.UUID(fmt.Sprintf("%s/meta/%d", s.Dir, i)), []byte("rocksdb-meta"))
		sub := flinkmeta.SubtaskState{Index: i}
		sub.ManagedKeyed = flinkmeta.Incremental(s.ID, start, num, meta, shared, private)
		if int(i) < len(s.Dirs) {
			// File merging: the operator state sits in a segment of a physical file inside the
			// managed directory, and the handle names the directory as a whole.
			d := s.Dirs[i]
			seg := flinkmeta.Segment(uri(d)+"/"+flinkmeta.UUID(d+"/phys"), 0, 128, false)
			sub.ManagedOperator = flinkmeta.FileMergingOperatorHandle(uri(d), uri(d), seg, "offsets")
		}
		op.Subtasks = append(op.Subtasks, sub)
	}
	op.ForVersion(v)
	m.Operators = []flinkmeta.OperatorState{op}
	b, err := flinkmeta.Encode(m)
	if err != nil {
		return nil, fmt.Errorf("treegen: encode %s: %w", s.Dir, err)
	}
	key := s.Dir + "/_metadata"
	if err := t.WriteBytes(key, b, s.Completed); err != nil {
		return nil, err
	}
	job := s.Job
	if job == "" {
		job = path.Dir(s.Dir)
		if job == "." {
			job = ""
		}
	}
	c := &Checkpoint{Metadata: key, Job: job, ID: s.ID, Savepoint: s.Savepoint, Completed: s.Completed}
	for _, k := range s.Shared {
		if strings.Contains(k, "://") || strings.HasPrefix(k, "file:") {
			c.Outside = append(c.Outside, k)
		} else {
			c.Refs = append(c.Refs, k)
		}
	}
	for _, n := range s.Private {
		c.Refs = append(c.Refs, s.Dir+"/"+n)
	}
	c.Refs = append(c.Refs, s.AbsolutePrivate...)
	for i, d := range s.Dirs {
		if i < par {
			c.Dirs = append(c.Dirs, d)
			c.Refs = append(c.Refs, d+"/"+flinkmeta.UUID(d+"/phys"))
		}
	}
	t.Live[key] = c
	return c, nil
}

// Data writes every file c references (and the physical files of its directory handles) that does
// not exist yet, with mtime.
func (t *Tree) Data(c *Checkpoint, mtime time.Time) error {
	for _, k := range c.Refs {
		if _, ok := t.Files[k]; ok {
			continue
		}
		if err := t.Write(k, 64, mtime); err != nil {
			return err
		}
	}
	return nil
}

// Retire deletes a checkpoint's _metadata (as Flink does on subsumption) without touching its files.
func (t *Tree) Retire(metaKey string) error {
	if err := os.Remove(filepath.Join(t.Root, filepath.FromSlash(metaKey))); err != nil {
		return err
	}
	delete(t.Files, metaKey)
	delete(t.Live, metaKey)
	return nil
}

// Policy is the part of the guard's policy the expected sets depend on.
type Policy struct {
	Grace        time.Duration
	ActiveWindow time.Duration
	// SavepointKeepNewest and SavepointRetention: as in refindex.Policy.
	SavepointKeepNewest bool
	SavepointRetention  time.Duration
}

// DefaultPolicy matches refindex.DefaultPolicy.
var DefaultPolicy = Policy{Grace: time.Hour, ActiveWindow: 7 * 24 * time.Hour, SavepointKeepNewest: true, SavepointRetention: 30 * 24 * time.Hour}

// savepointDir matches Flink's savepoint folder names: savepoint-<6 hex of the job id>-<12 hex>.
var savepointDir = regexp.MustCompile(`^savepoint-([0-9a-f]{6})-[0-9a-f]{12}$`)

// savepointJob is the job a savepoint belongs to: the folder holding it plus the job id prefix its
// name carries, or (a folder named otherwise) its own folder.
func savepointJob(c *Checkpoint) string {
	dir := path.Dir(c.Metadata)
	if m := savepointDir.FindStringSubmatch(path.Base(dir)); m != nil {
		return path.Dir(dir) + "/" + m[1]
	}
	return dir
}

func sorted(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func under(k, dir string) bool { return dir == "" || k == dir || strings.HasPrefix(k, dir+"/") }

// referencedBy returns the objects referenced by the given checkpoints (files, and everything below
// a referenced directory).
func (t *Tree) referencedBy(cks []*Checkpoint) map[string]bool {
	set := map[string]bool{}
	for _, c := range cks {
		for _, r := range c.Refs {
			set[r] = true
		}
		for _, d := range c.Dirs {
			for k := range t.Files {
				if under(k, d) {
					set[k] = true
				}
			}
		}
	}
	return set
}

func (t *Tree) live() []*Checkpoint {
	out := make([]*Checkpoint, 0, len(t.Live))
	for _, c := range t.Live {
		out = append(out, c)
	}
	return out
}

// Referenced lists existing objects some live checkpoint references (refused as "referenced").
func (t *Tree) Referenced() []string {
	set := t.referencedBy(t.live())
	for k := range set {
		if _, ok := t.Files[k]; !ok {
			delete(set, k)
		}
	}
	return sorted(set)
}

// ProtectedMetadata lists the `_metadata` the policy protects: the newest checkpoint of each job
// whose newest checkpoint completed within the active window, the newest savepoint of each job and
// savepoints within the savepoint retention.
func (t *Tree) ProtectedMetadata(p Policy) []string {
	newest := map[string]*Checkpoint{}
	set := map[string]bool{}
	newestSP := map[string]time.Time{}
	for _, c := range t.Live {
		if c.Savepoint {
			if j := savepointJob(c); c.Completed.After(newestSP[j]) {
				newestSP[j] = c.Completed
			}
			if p.SavepointRetention > 0 && t.Now.Sub(c.Completed) < p.SavepointRetention {
				set[c.Metadata] = true
			}
			continue
		}
		if n := newest[c.Job]; n == nil || c.ID > n.ID {
			newest[c.Job] = c
		}
	}
	for _, c := range newest {
		if t.Now.Sub(c.Completed) < p.ActiveWindow {
			set[c.Metadata] = true
		}
	}
	for _, c := range t.Live {
		if c.Savepoint && p.SavepointKeepNewest && c.Completed.Equal(newestSP[savepointJob(c)]) {
			set[c.Metadata] = true
		}
	}
	return sorted(set)
}

// InGrace lists unreferenced, non-_metadata files younger than the grace period.
func (t *Tree) InGrace(p Policy) []string {
	ref := t.referencedBy(t.live())
	set := map[string]bool{}
	for k, f := range t.Files {
		if !ref[k] && t.Live[k] == nil && t.Now.Sub(f.ModTime) < p.Grace {
			set[k] = true
		}
	}
	return sorted(set)
}

// Orphans lists what `ckguard orphans --older-than olderThan` must list: files that are not
// referenced, not a live or unparseable _metadata, and older than both olderThan and the grace period.
// The unparseable ones of a tree are damaged (Flink could not load them): they protect nothing, and
// are reported by stats and verify rather than listed as orphans.
func (t *Tree) Orphans(p Policy, olderThan time.Duration) []string {
	ref := t.referencedBy(t.live())
	set := map[string]bool{}
	for k, f := range t.Files {
		age := t.Now.Sub(f.ModTime)
		if !ref[k] && t.Live[k] == nil && !slices.Contains(t.Unparseable, k) && age >= p.Grace && age >= olderThan {
			set[k] = true
		}
	}
	return sorted(set)
}

// Survivors lists the files under dir ("" = the whole store) that a cleanup deleting everything in
// dir through the guard (repeated until nothing changes) must leave: protected `_metadata` of dir,
// everything referenced by checkpoints that stay live (those outside dir and the protected ones
// inside), and young unreferenced files. Files only retired checkpoints referenced are deletable
// (retiring a checkpoint at once makes its files deletable, even young ones).
func (t *Tree) Survivors(dir string, p Policy) []string {
	// The unparseable _metadata of a tree are damaged: they block nothing, and go like any old
	// unreferenced file (young ones stay, by InGrace).
	prot := map[string]bool{}
	for _, k := range t.ProtectedMetadata(p) {
		prot[k] = true
	}
	var stay []*Checkpoint
	retiredRefs := map[string]bool{}
	for _, c := range t.Live {
		if !under(c.Metadata, dir) || prot[c.Metadata] {
			stay = append(stay, c)
		} else {
			for _, r := range c.Refs {
				retiredRefs[r] = true
			}
		}
	}
	keep := t.referencedBy(stay)
	for _, c := range stay {
		keep[c.Metadata] = true
	}
	for _, k := range t.InGrace(p) {
		if !retiredRefs[k] {
			keep[k] = true
		}
	}
	set := map[string]bool{}
	for k := range t.Files {
		if under(k, dir) && keep[k] {
			set[k] = true
		}
	}
	return sorted(set)
}

// Garbage lists the files under dir a cleanup of dir through the guard removes.
func (t *Tree) Garbage(dir string, p Policy) []string {
	keep := map[string]bool{}
	for _, k := range t.Survivors(dir, p) {
		keep[k] = true
	}
	set := map[string]bool{}
	for k := range t.Files {
		if under(k, dir) && !keep[k] {
			set[k] = true
		}
	}
	return sorted(set)
}

// AllFiles lists every key written.
func (t *Tree) AllFiles() []string {
	set := map[string]bool{}
	for k := range t.Files {
		set[k] = true
	}
	return sorted(set)
}

// rng returns a deterministic random source for a scenario.
func rng(seed string) *rand.Rand {
	var s uint64
	for _, c := range seed {
		s = s*1099511628211 + uint64(c)
	}
	return rand.New(rand.NewPCG(s, 0x9e3779b97f4a7c15))
}

// uuids returns n deterministic UUIDs for seed.
func uuids(seed string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = flinkmeta.UUID(fmt.Sprintf("%s/%d", seed, i))
	}
	return out
}

func uuidOf(seed string) string { return flinkmeta.UUID(seed) }
