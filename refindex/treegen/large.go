package treegen

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
)

// LargeSpec shapes a generated store for benchmarks: Jobs × CheckpointsPerJob live checkpoints, each
// referencing RefsPerCheckpoint shared SSTs (absolute URIs) of which NewPerCheckpoint are new and
// the rest reused from the previous checkpoint of the job (incremental RocksDB).
type LargeSpec struct {
	Jobs              int
	CheckpointsPerJob int
	RefsPerCheckpoint int
	NewPerCheckpoint  int
	// DataFiles also creates the referenced files (1 byte each); leave false for index benchmarks
	// of millions of references: only the _metadata files are needed to build the index.
	DataFiles bool
	// LinkData makes every data file of a job a hard link to the job's first one (with DataFiles): a
	// store of 10 M objects then takes one inode per job and a fraction of the time and disk. Each key is
	// still its own object to a reader that goes by name (S3 through versitygw's posix backend); they
	// share the first one's bytes and mtime (its checkpoint's, the oldest), and a file system caps the
	// links per inode (65,000 on ext4, against the 5,000 or so data files of a bench job).
	LinkData bool
	// Seed varies the names; the same spec and seed always write the same bytes.
	Seed string
}

// LargeResult summarises what Large wrote.
type LargeResult struct {
	Root          string
	Checkpoints   int
	References    int // sum over checkpoints
	Distinct      int // distinct referenced objects
	MetadataBytes int64
	// SampleReferenced are a few referenced keys, SampleUnreferenced a few keys nothing references
	// (benchmarks decide on them).
	SampleReferenced   []string
	SampleUnreferenced []string
}

// LargeJob returns the job folder of job i.
func LargeJob(seed string, i int) string {
	return fmt.Sprintf("flink/%s", flinkmeta.UUID(fmt.Sprintf("%s/job/%d", seed, i))[:8]+fmt.Sprintf("%024x", i))
}

// Large writes the store described by spec into dir (jobs in parallel). mtimes are an hour apart per
// checkpoint, ending at now.
func Large(dir string, spec LargeSpec, now time.Time) (*LargeResult, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, err
	}
	res := &LargeResult{Root: abs}
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for j := 0; j < spec.Jobs; j++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(j int) {
			defer func() { <-sem; wg.Done() }()
			st, err := largeJob(abs, spec, j, now)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			res.Checkpoints += st.Checkpoints
			res.References += st.References
			res.Distinct += st.Distinct
			res.MetadataBytes += st.MetadataBytes
			if len(res.SampleReferenced) < 1000 {
				res.SampleReferenced = append(res.SampleReferenced, st.SampleReferenced...)
			}
			if len(res.SampleUnreferenced) < 1000 {
				res.SampleUnreferenced = append(res.SampleUnreferenced, st.SampleUnreferenced...)
			}
		}(j)
	}
	wg.Wait()
	return res, firstErr
}

func largeJob(root string, spec LargeSpec, j int, now time.Time) (*LargeResult, error) {
	job := LargeJob(spec.Seed, j)
	uri := func(k string) string { return "file:" + root + "/" + k }
	st := &LargeResult{}
	n := 0
	newSST := func() string {
		n++
		return job + "/shared/" + flinkmeta.UUID(fmt.Sprintf("%s/%d/%d", spec.Seed, j, n))
	}
	cur := make([]string, spec.RefsPerCheckpoint)
	for i := range cur {
		cur[i] = newSST()
	}
	st.Distinct = len(cur)
	// written: the data files of this job created so far (names are unique per job, so no other job
	// writes them); first: the one LinkData links to.
	written := map[string]bool{}
	first := ""
	for c := 0; c < spec.CheckpointsPerJob; c++ {
		if c > 0 {
			for i := 0; i < spec.NewPerCheckpoint && i < len(cur); i++ {
				idx := (c*spec.NewPerCheckpoint + i) % len(cur)
				cur[idx] = newSST()
				st.Distinct++
			}
		}
		id := int64(1000 + c)
		m := flinkmeta.NewCheckpoint(FormatVersion, id, true)
		op := flinkmeta.NewOperator(flinkmeta.ID(job), "keyed", "keyed", 1, 128)
		shared := make([]flinkmeta.NamedHandle, len(cur))
		for i, k := range cur {
			shared[i] = flinkmeta.NamedHandle{LocalPath: fmt.Sprintf("%06d.sst", i), Handle: flinkmeta.File(uri(k), 64<<20)}
		}
		sub := flinkmeta.SubtaskState{Index: 0}
		sub.ManagedKeyed = flinkmeta.Incremental(id, 0, 128, flinkmeta.Inline("meta", []byte("m")), shared, nil)
		op.Subtasks = []flinkmeta.SubtaskState{sub}
		m.Operators = []flinkmeta.OperatorState{op}
		b, err := flinkmeta.Encode(m)
		if err != nil {
			return st, err
		}
		key := fmt.Sprintf("%s/chk-%d/_metadata", job, id)
		p := filepath.Join(root, filepath.FromSlash(key))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return st, err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return st, err
		}
		mt := now.Add(-time.Duration(spec.CheckpointsPerJob-c) * time.Hour)
		if err := os.Chtimes(p, mt, mt); err != nil {
			return st, err
		}
		if spec.DataFiles {
			for _, k := range cur {
				fp := filepath.Join(root, filepath.FromSlash(k))
				if written[k] {
					continue
				}
				written[k] = true
				if spec.LinkData && first != "" {
					if err := os.Link(first, fp); err != nil {
						return st, fmt.Errorf("gentree: link %s to %s: %w", fp, first, err)
					}
					continue
				}
				os.MkdirAll(filepath.Dir(fp), 0o755)
				if err := os.WriteFile(fp, []byte{1}, 0o644); err != nil {
					return st, err
				}
				os.Chtimes(fp, mt, mt)
				first = fp
			}
		}
		st.Checkpoints++
		st.References += len(cur)
		st.MetadataBytes += int64(len(b))
	}
	for i := 0; i < 5 && i < len(cur); i++ {
		st.SampleReferenced = append(st.SampleReferenced, cur[(i*7919)%len(cur)])
		st.SampleUnreferenced = append(st.SampleUnreferenced, job+"/shared/"+flinkmeta.UUID(fmt.Sprintf("unreferenced/%d/%d", j, i)))
	}
	return st, nil
}
