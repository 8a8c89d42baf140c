// Package demo is `ckguard demo`: it builds a checkpoint store like the one of the incident, shows
// what the classic cleanup does to it without the guard (the incident) and through the guard (nothing
// a live checkpoint needs is lost), and checks every number it prints against the generator's
// ground truth, so the demo fails loudly instead of telling a nice story that is not true.
package demo

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// Scenario is a generated store and the facts the demo narrates and checks.
type Scenario struct {
	Tree *treegen.Tree
	// OldJobDir is the store key of the old job's folder (what `rm -rf` purges).
	OldJobDir string
	// CurrentJobDir is the store key of the current job's folder.
	CurrentJobDir string
	// Savepoint is the store key of the savepoint folder (pinned before the cleanup).
	Savepoint string
	// Restored is the old job's checkpoint the current job was restored from.
	Restored string
	// StaleAfter is the age beyond which `find -mtime +7` selects a file: more than 7 whole days.
	StaleAfter time.Duration
}

// Build writes the demo store below dir/store with every modification time relative to now. It is
// the index engineer's treegen.IncidentOne (job af8b… restored from e3d8…, whose folder is purged;
// af8b…'s live chk-100273/100274 still reference e3d8…/shared SSTs; e3d8…'s files are 30 days old),
// extended with what a real store of a few weeks also holds:
//
//   - a savepoint of the current job taken 10 days ago (self-contained, relative file names);
//   - true garbage of the current job, backdated: the files of a failed chk-100272 (9 days old) and
//     SSTs RocksDB compacted away 16 to 10 days ago.
func Build(dir string, now time.Time) (*Scenario, error) {
	return BuildAt(filepath.Join(dir, "store"), now, "")
}

// BuildAt writes the demo store into root; uriPrefix is what Flink wrote for root ("" = file:<root>;
// s3://bucket when root is an S3 server's backing directory for that bucket).
func BuildAt(root string, now time.Time, uriPrefix string) (*Scenario, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	t, err := treegen.IncidentOne(root, now, treegen.Options{URIPrefix: uriPrefix})
	if err != nil {
		return nil, fmt.Errorf("demo store %s: %w", root, err)
	}
	const base = "flink-checkpoints"
	s := &Scenario{Tree: t, OldJobDir: base + "/" + treegen.IncidentOneOldJob, CurrentJobDir: base + "/" + treegen.IncidentOneNewJob,
		Savepoint: "flink-savepoints/savepoint-af8b2e-5e8c1f0a9b3d", StaleAfter: 8 * 24 * time.Hour}
	s.Restored = s.OldJobDir + "/chk-100271"
	if t.Purge != s.OldJobDir || t.Live[s.Restored+"/_metadata"] == nil || len(s.LiveUnder(s.CurrentJobDir)) == 0 {
		return nil, fmt.Errorf("demo: treegen.IncidentOne no longer has the layout the demo narrates (purge %q, live %v)", t.Purge, s.LiveUnder(""))
	}
	day := 24 * time.Hour
	b := &builder{t: t}
	b.ssts(s.CurrentJobDir+"/shared", "demo/compacted", 8, now.Add(-16*day), now.Add(-10*day))
	b.files(s.CurrentJobDir+"/chk-100272", privateNames("demo/chk-100272-failed", 3), privateSize, now.Add(-9*day))
	b.checkpoint(treegen.Spec{Dir: s.Savepoint, Job: "flink-savepoints", ID: 100150, Savepoint: true, Completed: now.Add(-10 * day),
		Private: privateNames("demo/savepoint-100150", 6)}, now.Add(-10*day))
	if b.err != nil {
		return nil, fmt.Errorf("demo store %s: %w", root, b.err)
	}
	return s, nil
}

// Sizes of the files the demo adds: compacted SSTs of a few hundred KiB, small private files.
const (
	sstMin, sstSpread = 96 << 10, 384 << 10
	privateSize       = 8 << 10
)

// builder writes files and checkpoints, keeping the first error (the scenario is straight-line code).
type builder struct {
	t   *treegen.Tree
	err error
	n   int
}

// ssts writes n SSTs named like RocksDB's uploads (UUIDs) in dir with mtimes spread over [from, to].
func (b *builder) ssts(dir, seed string, n int, from, to time.Time) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = dir + "/" + flinkmeta.UUID(fmt.Sprintf("%s/%d", seed, i))
		mt := from
		if n > 1 {
			mt = from.Add(time.Duration(int64(to.Sub(from)) / int64(n-1) * int64(i)))
		}
		b.n++
		size := int64(sstMin + (b.n*7919)%sstSpread)
		if b.err == nil {
			b.err = b.t.Write(keys[i], size, mt)
		}
	}
	return keys
}

func (b *builder) files(dir string, names []string, size int64, mtime time.Time) {
	for _, n := range names {
		if b.err == nil {
			b.err = b.t.Write(dir+"/"+n, size, mtime)
		}
	}
}

// checkpoint writes spec's private files (shared SSTs must exist already) and then its _metadata, in
// Flink's order: data first, _metadata last.
func (b *builder) checkpoint(spec treegen.Spec, mtime time.Time) {
	if b.err != nil {
		return
	}
	b.files(spec.Dir, spec.Private, privateSize, mtime)
	if b.err == nil {
		_, b.err = b.t.Checkpoint(spec)
	}
}

func privateNames(seed string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = flinkmeta.UUID(fmt.Sprintf("%s/private/%d", seed, i))
	}
	return out
}

// Referenced is the ground truth: every existing store key the given live `_metadata` reference.
func (s *Scenario) Referenced(live []string) map[string]string {
	out := map[string]string{}
	for _, m := range live {
		c := s.Tree.Live[m]
		if c == nil {
			continue
		}
		for _, r := range c.Refs {
			if _, ok := s.Tree.Files[r]; ok {
				if _, seen := out[r]; !seen {
					out[r] = m
				}
			}
		}
	}
	return out
}

// LiveUnder lists the live `_metadata` keys below dir ("" = all), sorted.
func (s *Scenario) LiveUnder(dir string) []string {
	var out []string
	for k := range s.Tree.Live {
		if dir == "" || strings.HasPrefix(k, dir+"/") {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// Expected is what a correct guard does to the scenario, computed from the generator's ground truth
// alone: the cleanup selects every file under the old job's folder and every file older than
// StaleAfter; the current job's checkpoints and the pinned savepoint stay live, so exactly the files
// they reference (and their _metadata) are refused among those selected. ControlMissing is what the
// same cleanup without the guard takes from the current job's live checkpoints.
type Expected struct {
	Deleted, Refused, ControlMissing int
}

// Expect computes Expected.
func (s *Scenario) Expect() Expected {
	stay := append(s.LiveUnder(s.CurrentJobDir), s.LiveUnder(s.Savepoint)...)
	keep := s.Referenced(stay)
	for _, m := range stay {
		keep[m] = m
	}
	needed := s.Referenced(s.LiveUnder(s.CurrentJobDir))
	var e Expected
	for k, f := range s.Tree.Files {
		if !strings.HasPrefix(k, s.OldJobDir+"/") && s.Tree.Now.Sub(f.ModTime) <= s.StaleAfter {
			continue
		}
		if _, ok := keep[k]; ok {
			e.Refused++
		} else {
			e.Deleted++
		}
		if _, ok := needed[k]; ok {
			e.ControlMissing++
		}
	}
	return e
}
