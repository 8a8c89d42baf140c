package pathnorm

import (
	"strings"

	"github.com/ckguard/ckguard/refindex/flinklayout"
)

// Candidate is one place a reference outside the store may name a store object at: the URI's path
// below Prefix, placed below the store folder Dir ("" = the store root). See Candidates.
type Candidate struct {
	Prefix URI
	Rel    []string
	Dir    string
}

// Map is the --map that ties the candidate's prefix to its folder ("PREFIX=STOREPATH").
func (c Candidate) Map() string { return c.Prefix.String() + "=" + c.Dir }

// Suggest is the shortest --map equivalent to Map for the candidate's references: the trailing
// folders both sides share are dropped (file:/mnt/flink/prod=prod becomes file:/mnt/flink=).
func (c Candidate) Suggest() string {
	from := c.Prefix.Segs
	var to []string
	if c.Dir != "" {
		to = strings.Split(c.Dir, "/")
	}
	for len(from) > 0 && len(to) > 0 && from[len(from)-1] == to[len(to)-1] {
		from, to = from[:len(from)-1], to[:len(to)-1]
	}
	return URI{Scheme: c.Prefix.Scheme, Authority: c.Prefix.Authority, Segs: from}.String() + "=" + strings.Join(to, "/")
}

// Key is the store key the candidate names.
func (c Candidate) Key() string {
	if c.Dir == "" {
		return strings.Join(c.Rel, "/")
	}
	return c.Dir + "/" + strings.Join(c.Rel, "/")
}

// Candidates lists, most likely first, where in the store an absolute reference that no mapping covers
// would lie if its storage were this store under another name (a relocated copy, an NFS export of
// an HDFS directory, a bucket seen through another alias). A candidate is only a hypothesis: the
// caller proves it by finding the referenced objects there. Two anchors follow Flink's layout:
//
//   - the URI runs through the name of a folder the `_metadata` itself lies in (…/<job>/chk-N/f for
//     a checkpoint at <dirs>/<job>/chk-N/_metadata, …/savepoint-x/f for a savepoint): the part from
//     that name on is placed below that folder's parent;
//   - the URI names a job folder's content (…/<job>/shared/f, …/<job>/taskowned/f, …/<job>/chk-N/f):
//     the part from <job> on is placed below each folder above the `_metadata`, deepest first (the
//     folder that holds the job folders).
//
// jobParents (may be nil) returns the store folders that hold a job folder of the given name (known
// from the `_metadata` the store lists): a savepoint or another job's checkpoint that references a job
// folder lying elsewhere in the store is placed there too.
//
// uri must be an absolute reference (Absolute reported it as outside); metadataKey is a store key.
func (n *Normalizer) Candidates(uri, metadataKey string, jobParents func(job string) []string) []Candidate {
	u := n.parse(uri)
	if u.Scheme == "" || len(u.Segs) < 2 {
		return nil
	}
	dirs := strings.Split(metadataKey, "/")
	dirs = dirs[:len(dirs)-1] // the folders the _metadata lies in, outermost first
	for _, d := range dirs {
		if d == "" || d == "." || d == ".." {
			return nil // not a clean store key: no folder to place anything below
		}
	}
	var out []Candidate
	seen := map[string]bool{}
	add := func(i int, dir string) {
		c := Candidate{Prefix: URI{Scheme: u.Scheme, Authority: u.Authority, Segs: u.Segs[:i:i]}, Rel: u.Segs[i:], Dir: dir}
		if k := c.Map(); !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
	}
	// Own folders: deepest folder first, the rightmost occurrence of its name in the URI first.
	for k := len(dirs) - 1; k >= 0; k-- {
		for i := len(u.Segs) - 2; i >= 0; i-- {
			if u.Segs[i] == dirs[k] {
				add(i, strings.Join(dirs[:k], "/"))
			}
		}
	}
	// Job folder content.
	for i := len(u.Segs) - 2; i >= 1; i-- {
		s := u.Segs[i]
		if !flinklayout.IsJobFolderEntry(s) {
			continue
		}
		// The folder holding the `_metadata`'s own job folder first (<dirs>/<job>/chk-N/_metadata,
		// <dirs>/savepoint-x/_metadata), then every other folder above it, deepest first.
		top := len(dirs) - 1
		if top >= 0 && flinklayout.IsCheckpointDir(dirs[top]) {
			top--
		}
		for _, k := range append([]int{max(top, 0)}, descending(len(dirs))...) {
			add(i-1, strings.Join(dirs[:k], "/"))
		}
		if jobParents != nil {
			for _, d := range jobParents(u.Segs[i-1]) {
				add(i-1, d)
			}
		}
	}
	return out
}

// ApplyInferred maps an outside reference (a canonical URI, as Absolute returns it) with the first of
// maps ("PREFIX=STOREPATH", as the index records the mappings the store proved) whose prefix covers it.
func ApplyInferred(maps []string, uri string) (Key, bool) {
	u := ParseURI(uri)
	for _, m := range maps {
		pm, err := ParseMapping(m)
		if err != nil {
			continue
		}
		p := ParseURI(pm.From)
		if p.Scheme != u.Scheme || p.Authority != u.Authority || len(p.Segs) >= len(u.Segs) {
			continue
		}
		match := true
		for i, s := range p.Segs {
			if u.Segs[i] != s {
				match = false
				break
			}
		}
		if match {
			return Key{Path: Candidate{Rel: u.Segs[len(p.Segs):], Dir: pm.To}.Key(), Inside: true}, true
		}
	}
	return Key{}, false
}

// descending returns n, n-1, …, 0.
func descending(n int) []int {
	out := make([]int, 0, n+1)
	for k := n; k >= 0; k-- {
		out = append(out, k)
	}
	return out
}
