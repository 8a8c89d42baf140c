package refindex

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

func (v *view) info(c *checkpointRecord) CheckpointInfo {
	ci := CheckpointInfo{Metadata: c.Key, Dir: dirOf(c.Key), Job: c.Job, ID: c.ID, Kind: c.Kind, Completed: c.ModTime,
		Size: c.Size, Format: c.Format, Refs: c.Refs, Outside: c.Outside, Error: c.Err,
		InferredMaps: c.Inferred, External: c.External, Unmapped: c.Unmapped, UnmappedURI: c.UnmappedURI}
	if c.Err != "" {
		ci.Refuses = badScopeText(c)
	}
	_, ci.Pinned = v.pins[c.Key]
	if r, _ := v.protection(c, v.storeNow(v.now())); r != "" {
		ci.Protected = true
	}
	return ci
}

func dirOf(k string) string {
	if i := strings.LastIndexByte(k, '/'); i >= 0 {
		return k[:i]
	}
	return ""
}

// Why explains the decision for deleting path: a store key, or a URI as Flink writes them (mapped to
// the store when a prefix map or the store root covers it; otherwise reported as outside the
// guarded store, with the checkpoints that reference it).
func (ix *Index) Why(ctx context.Context, p string) (*WhyResult, error) {
	if strings.Contains(p, "://") || strings.HasPrefix(p, "file:") {
		k := ix.norm.Absolute(p)
		if !k.Inside {
			if key, ok := ix.inferredKey(k.Path); ok {
				k = key
			} else {
				return ix.whyOutside(k.Path)
			}
		}
		p = k.Path
	}
	key, err := store.CleanKey(p)
	if err != nil {
		return nil, err
	}
	v, err := ix.acquire()
	if err != nil {
		return nil, err
	}
	defer v.release()
	res := &WhyResult{Path: key, Op: verdict.OpUnlink.String()}
	op := verdict.OpUnlink
	oi, err := ix.st.Stat(ctx, key)
	switch {
	case err == nil:
		res.Exists = true
		if oi.IsDir {
			res.IsDir, op = true, verdict.OpRmdir
			res.Op = "rm -r"
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	d := ix.decide(ctx, v, key, op, 100, nil)
	res.Allow, res.Reason, res.Message, res.Referencing, res.RefCount = d.Allow, d.Reason, d.Message, d.Referencing, d.RefCount
	res.State = stateOf(d.Reason)
	// Say how references were tied to the store when the store, not a --map, proved it.
	var inferred []string
	for _, r := range res.Referencing {
		if c := v.st.ckpts[r]; c != nil {
			for _, m := range c.Inferred {
				if !slices.Contains(inferred, m) {
					inferred = append(inferred, m)
				}
			}
		}
	}
	if len(inferred) > 0 && d.Reason == verdict.ReasonReferenced {
		res.Message += fmt.Sprintf(". The referencing checkpoints name it by a URI no --map covers; the store holds their files at the same relative place, so the mapping %s is applied (add it as --map to make it explicit)", strings.Join(inferred, ", "))
	}
	if c := v.st.ckpts[key]; c != nil {
		ci := v.info(c)
		res.Checkpoint = &ci
	}
	return res, nil
}

// inferredKey maps an outside URI with a prefix map the store proved for some live checkpoint
// (CheckpointInfo.InferredMaps), as Why is asked about a URI as Flink wrote it.
func (ix *Index) inferredKey(uri string) (pathnorm.Key, bool) {
	ix.mu.RLock()
	st := ix.mu.state
	ix.mu.RUnlock()
	for _, k := range st.inferredRecords() {
		if key, ok := pathnorm.ApplyInferred(st.ckpts[k].Inferred, uri); ok {
			return key, true
		}
	}
	return pathnorm.Key{}, false
}

func (ix *Index) whyOutside(uri string) (*WhyResult, error) {
	v, err := ix.acquire()
	if err != nil {
		return nil, err
	}
	defer v.release()
	res := &WhyResult{Path: uri, Op: verdict.OpUnlink.String(), Reason: verdict.ReasonOutsideStore, Outside: true, State: verdict.StateOutside}
	err = v.g.db.View(func(txn *badger.Txn) error {
		prefix := append([]byte(tblOutside+uri), 0)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			_, meta := splitPair(it.Item().Key(), tblOutside)
			res.RefCount++
			if len(res.Referencing) < 100 {
				res.Referencing = append(res.Referencing, meta)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.Message = fmt.Sprintf("%s is outside the guarded store: this guard cannot protect it", uri)
	switch {
	case res.RefCount > 0 && ix.norm.IsExternal(uri):
		res.Message += fmt.Sprintf("; it is below an --external prefix (declared to be on other storage) and %d live checkpoint(s)/savepoint(s) reference it (%s): guard that storage too", res.RefCount, listCheckpoints(res.Referencing, res.RefCount))
	case res.RefCount > 0 && !strings.HasPrefix(uri, relativeOutside):
		res.Allow, res.Reason, res.State = false, verdict.ReasonUnmappedReferences, verdict.StateBlocked
		res.Message += fmt.Sprintf("; %d live checkpoint(s)/savepoint(s) reference it (%s), no --map ties it to the store and the store does not hold it at the same relative place, so every store file named %s is refused; %s",
			res.RefCount, listCheckpoints(res.Referencing, res.RefCount), path.Base(uri), ix.unmappedFix(res.Referencing[0], uri))
	case res.RefCount > 0:
		res.Message += fmt.Sprintf("; %d live checkpoint(s)/savepoint(s) reference it (%s): guard its storage too, or add --map PREFIX=STOREPATH if it is inside this store under another name", res.RefCount, listCheckpoints(res.Referencing, res.RefCount))
	default:
		res.Message += "; no live checkpoint references it"
	}
	return res, nil
}

// Checkpoints lists live checkpoints and savepoints grouped by job folder.
func (ix *Index) Checkpoints(ctx context.Context, job string) (*CheckpointsResult, error) {
	v, err := ix.acquire()
	if err != nil {
		return nil, err
	}
	defer v.release()
	job = strings.Trim(job, "/")
	known := map[string]bool{}
	for _, c := range v.st.ckpts {
		known[c.Job] = true
	}
	byJob := map[string]*JobCheckpoints{}
	res := &CheckpointsResult{}
	err = v.g.db.View(func(txn *badger.Txn) error {
		for _, k := range v.st.sorted {
			if err := ctx.Err(); err != nil {
				return err
			}
			c := v.st.ckpts[k]
			if job != "" && c.Job != job && !strings.HasSuffix("/"+c.Job, "/"+job) {
				continue
			}
			ci := v.info(c)
			if c.Err != "" {
				res.Unparseable = append(res.Unparseable, ci)
				continue
			}
			refs, err := readRefs(txn, k)
			if err != nil {
				return err
			}
			ci.ReferencesJobs = ix.otherJobs(refs, c.Job, known)
			jc := byJob[c.Job]
			if jc == nil {
				jc = &JobCheckpoints{Job: c.Job}
				byJob[c.Job] = jc
			}
			jc.Checkpoints = append(jc.Checkpoints, ci)
			if c.Kind == "savepoint" {
				jc.Savepoints++
			} else {
				jc.Count++
			}
			jc.MetadataBytes += c.Size
			jc.References += c.Refs
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, jc := range byJob {
		jc.finish()
		res.Jobs = append(res.Jobs, *jc)
	}
	sort.Slice(res.Jobs, func(a, b int) bool { return res.Jobs[a].Job < res.Jobs[b].Job })
	return res, nil
}

// otherJobs lists, sorted, the job folders other than job that refs reach into (known: the job
// folders holding an indexed checkpoint).
func (ix *Index) otherJobs(refs []ref, job string, known map[string]bool) []string {
	other := map[string]bool{}
	for _, r := range refs {
		if !r.Inside {
			continue
		}
		if j := ix.norm.JobFolder(r.Key, func(s string) bool { return known[s] }); j != "" && j != job {
			other[j] = true
		}
	}
	return slices.Sorted(maps.Keys(other))
}

// finish sets the job's referenced jobs (the union of its checkpoints') and orders its checkpoints
// by kind, id and path.
func (jc *JobCheckpoints) finish() {
	set := map[string]bool{}
	for _, c := range jc.Checkpoints {
		for _, j := range c.ReferencesJobs {
			set[j] = true
		}
	}
	jc.ReferencesJobs = append(jc.ReferencesJobs, slices.Sorted(maps.Keys(set))...)
	sort.Slice(jc.Checkpoints, func(a, b int) bool {
		x, y := jc.Checkpoints[a], jc.Checkpoints[b]
		if x.Kind != y.Kind {
			return x.Kind < y.Kind
		}
		if x.ID != y.ID {
			return x.ID < y.ID
		}
		return x.Metadata < y.Metadata
	})
}

// blocked returns why no object can be called garbage right now, or "".
func (v *view) blocked() string {
	now := v.now()
	switch {
	case v.syncErr != "":
		return "the last index sync failed: " + v.syncErr
	case v.last.IsZero():
		return "the index has not completed a sync yet"
	case v.remap && v.interrupted:
		return "the index was stopped in the middle of writing a sync (run `ckguard index sync`: it rebuilds the index)"
	case v.remap:
		return "the path mapping changed since the index was built (run `ckguard index sync`)"
	case v.pol.MaxStaleness > 0 && now.Sub(v.last) > v.pol.MaxStaleness:
		return fmt.Sprintf("the index was last synced %s ago (more than --max-staleness %s)", now.Sub(v.last).Round(time.Second), v.pol.MaxStaleness)
	case len(v.st.global) > 0:
		return fmt.Sprintf("%s cannot be parsed (%s; %s) and its writer is trusted for its job folder, so what it references is unknown", v.st.global[0], badClassText(v.st.ckpts[v.st.global[0]]), v.st.ckpts[v.st.global[0]].Err)
	}
	return ""
}

// unmappedBlock names the first live _metadata with unmapped references, one of them and what to add,
// or "" when there is none.
func (ix *Index) unmappedBlock(v *view) string {
	if len(v.st.unmapped) == 0 {
		return ""
	}
	c := v.st.ckpts[v.st.unmapped[0]]
	more := ""
	if n := len(v.st.unmapped); n > 1 {
		more = fmt.Sprintf(" (and %d more live _metadata with unmapped references)", n-1)
	}
	return fmt.Sprintf("%s references %d object(s) by URIs that no --map ties to the store and that the store does not hold at the same relative place, e.g. %s%s; %s",
		c.Key, c.Unmapped, c.UnmappedURI, more, ix.unmappedFix(c.Key, c.UnmappedURI))
}

// Stats summarises the index.
func (ix *Index) Stats(ctx context.Context) (*StatsResult, error) {
	v, err := ix.acquire()
	if err != nil {
		return nil, err
	}
	defer v.release()
	s := &StatsResult{Store: ix.st.Root(), IndexDir: ix.dir, Schema: SchemaVersion, Generation: v.g.n, LastSync: v.last,
		SyncError: v.syncErr, Pins: len(v.pins), DirectoryHandles: len(v.st.dirRefs), IndexBytes: dirBytes(filepath.Join(ix.dir, genName(v.g.n))),
		Policy: PolicyInfo{Grace: duration.Format(v.pol.Grace), ActiveWindow: duration.Format(v.pol.ActiveWindow),
			MaxStaleness: duration.Format(v.pol.MaxStaleness), Protect: v.pol.Protect,
			SavepointKeepNewest: v.pol.SavepointKeepNewest, SavepointRetention: duration.Format(v.pol.SavepointRetention)},
		StoreClockBehind: duration.D(-v.skew), UnknownSubtrees: v.unknown, Flink: ix.FlinkStatus()}
	b := v.blocked()
	s.Stale = b != "" && len(v.st.global) == 0
	s.DamagedMetadata, s.BlockingMetadata, s.ConfinedMetadata = len(v.st.damaged), len(v.st.global), len(v.st.confined)
	for _, k := range v.st.unparseable {
		if len(s.BadMetadata) == 100 {
			break
		}
		c := v.st.ckpts[k]
		s.BadMetadata = append(s.BadMetadata, BadMetadata{Metadata: k, Class: c.Bad, Scope: badScope(c), Error: c.Err, ModTime: c.ModTime, HeldRefs: c.HeldRefs})
	}
	jobs, savepointFolders := map[string]bool{}, map[string]bool{}
	for _, c := range v.st.ckpts {
		switch {
		case c.Err != "":
			s.Unparseable++
			continue
		case c.Kind == "savepoint":
			s.Savepoints++
			savepointFolders[c.Job] = true
		default:
			s.Checkpoints++
			jobs[c.Job] = true
		}
		s.References += c.Refs
		s.OutsideReferences += c.Outside
		s.UnmappedReferences += c.Unmapped
		s.ExternalReferences += c.External
		for _, m := range c.Inferred {
			if !slices.Contains(s.InferredMaps, m) {
				s.InferredMaps = append(s.InferredMaps, m)
			}
		}
	}
	sort.Strings(s.InferredMaps)
	s.Unmapped = ix.unmappedBlock(v)
	s.Jobs = len(jobs)
	for f := range savepointFolders {
		if !jobs[f] {
			s.SavepointFolders++
		}
	}
	return s, nil
}

// dirBytes is the disk space the files in dir (a generation) take: allocated blocks, not sizes, since
// badger preallocates its vlog and memtable files sparsely (a 2 GiB vlog may hold 100 KiB). badger's
// DB.Size is refreshed only once a minute, so it reports 0 for a generation a fast rebuild has just
// written.
func dirBytes(dir string) int64 {
	ents, _ := os.ReadDir(dir)
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += allocatedBytes(fi)
		}
	}
	return n
}
