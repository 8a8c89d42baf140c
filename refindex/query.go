package refindex

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// Querier is everything the CLI asks the index. *Index implements it directly; a running mount serves
// the same interface over its control socket, so every result is a plain JSON-serialisable struct.
type Querier interface {
	// Why explains the decision for deleting path (a file, or a directory with everything below).
	Why(ctx context.Context, path string) (*WhyResult, error)
	// Checkpoints lists live checkpoints and savepoints per job folder ("" = all jobs).
	Checkpoints(ctx context.Context, job string) (*CheckpointsResult, error)
	// Orphans lists unreferenced, unprotected objects older than max(olderThan, grace).
	Orphans(ctx context.Context, olderThan time.Duration) (*OrphansResult, error)
	// Verify checks that every object a live checkpoint references exists.
	Verify(ctx context.Context) (*VerifyResult, error)
	// Stats summarises the index.
	Stats(ctx context.Context) (*StatsResult, error)
	// Pin protects a checkpoint/savepoint (directory or _metadata) until Unpin.
	Pin(ctx context.Context, path string) (*PinResult, error)
	Unpin(ctx context.Context, path string) (*PinResult, error)
}

var _ Querier = (*Index)(nil)

// CheckpointInfo describes one live `_metadata`.
type CheckpointInfo struct {
	Metadata  string    `json:"metadata"` // store key of the _metadata
	Dir       string    `json:"dir"`
	Job       string    `json:"job"`
	ID        int64     `json:"id"`
	Kind      string    `json:"kind"`
	Completed time.Time `json:"completed"`
	Size      int64     `json:"size"`
	Format    int       `json:"format,omitempty"`
	Refs      int       `json:"refs"`
	// ReferencedBytes is the size in the store of the distinct files it references (what a restore
	// reads); the index keeps no sizes, so `ckguard checkpoints` fills it from the store (-1: could
	// not be read; omitted where nobody filled it).
	ReferencedBytes int64 `json:"referenced_bytes,omitempty"`
	Outside         int   `json:"outside_refs,omitempty"`
	// InferredMaps are the prefix maps the store proved for its references (no --map covered them).
	InferredMaps []string `json:"inferred_maps,omitempty"`
	// External counts its references below an --external prefix; Unmapped those that are neither
	// mapped, inferred nor external (UnmappedURI the first): files they could be are refused.
	External    int    `json:"external_refs,omitempty"`
	Unmapped    int    `json:"unmapped_refs,omitempty"`
	UnmappedURI string `json:"unmapped_uri,omitempty"`
	Pinned      bool   `json:"pinned,omitempty"`
	// Protected: the newest checkpoint of a job active within --active-window.
	Protected bool `json:"protected,omitempty"`
	// ReferencesJobs lists other job folders whose files this checkpoint references.
	ReferencesJobs []string `json:"references_jobs,omitempty"`
	Error          string   `json:"error,omitempty"` // unparseable: why
}

// WhyResult explains one decision.
type WhyResult struct {
	Path        string          `json:"path"`
	IsDir       bool            `json:"is_dir"`
	Exists      bool            `json:"exists"`
	Op          string          `json:"op"`
	Allow       bool            `json:"allow"`
	Reason      verdict.Reason  `json:"reason"`
	State       string          `json:"state"`
	Message     string          `json:"message"`
	Referencing []string        `json:"referencing,omitempty"` // up to 100 _metadata keys
	RefCount    int             `json:"ref_count"`
	Checkpoint  *CheckpointInfo `json:"checkpoint,omitempty"` // when path is a _metadata
	// Outside: the path is a URI outside the guarded store: no decision (Allow false, Reason
	// outside-store); this guard can neither protect nor delete the object.
	Outside bool `json:"outside,omitempty"`
}

// JobCheckpoints groups the checkpoints of one job folder.
type JobCheckpoints struct {
	Job           string           `json:"job"`
	Checkpoints   []CheckpointInfo `json:"checkpoints"`
	Count         int              `json:"checkpoint_count"`
	Savepoints    int              `json:"savepoint_count"`
	MetadataBytes int64            `json:"metadata_bytes"`
	References    int              `json:"refs"`
	// ReferencedBytes is the size of the distinct files its checkpoints reference, filled like
	// CheckpointInfo's.
	ReferencedBytes int64 `json:"referenced_bytes,omitempty"`
	// ReferencesJobs lists other job folders any of them references (restored from / LEGACY chains).
	ReferencesJobs []string `json:"references_jobs,omitempty"`
}

// CheckpointsResult is the answer of Checkpoints.
type CheckpointsResult struct {
	Jobs        []JobCheckpoints `json:"jobs"`
	Unparseable []CheckpointInfo `json:"unparseable,omitempty"`
}

// OrphanFile is one object nothing needs.
type OrphanFile struct {
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mtime"`
}

// OrphansResult is the answer of Orphans.
type OrphansResult struct {
	OlderThan duration.D `json:"older_than"` // "7d": the duration syntax of the flags

	Files []OrphanFile `json:"files"`
	Bytes int64        `json:"bytes"`
	// StoreBytes is the size of every file the walk saw (the metrics' referenced bytes are StoreBytes
	// minus Bytes, from the same walk).
	StoreBytes int64 `json:"store_bytes,omitempty"`
	// Blocked is set (and Files empty) when no object can be called garbage: stale index, failed
	// sync or an unparseable _metadata.
	Blocked string `json:"blocked,omitempty"`
	// PendingDeletion counts unreferenced objects left out of Files because an S3 mount has acknowledged
	// their deletion and its queue has not applied it yet (they are gone from the mount already).
	PendingDeletion int `json:"pending_deletion,omitempty"`
}

// PendingDeletes describes an S3 mount's queue of acknowledged deletions not applied to the bucket yet
// (its journal in the index directory).
type PendingDeletes struct {
	Count          int       `json:"count"`
	Oldest         time.Time `json:"oldest,omitzero"`
	FailedAttempts int       `json:"failed_attempts"`
	LastError      string    `json:"last_error,omitempty"`
	Damaged        int       `json:"damaged_lines,omitempty"`
}

// BrokenCheckpoint is a live checkpoint that cannot be restored.
type BrokenCheckpoint struct {
	Metadata     string   `json:"metadata"`
	Missing      []string `json:"missing,omitempty"`
	MissingCount int      `json:"missing_count"`
	Error        string   `json:"error,omitempty"` // unparseable
	// Short and Unreadable are found by the restorability drill only (Drill, verify --deep).
	Short      []ShortObject      `json:"short,omitempty"`
	Unreadable []UnreadableObject `json:"unreadable,omitempty"`
}

// VerifyResult is the answer of Verify.
type VerifyResult struct {
	Checked        int                `json:"checked"`
	Objects        int                `json:"objects_checked"`
	Broken         []BrokenCheckpoint `json:"broken"`
	OutsideSkipped int                `json:"outside_refs_not_checked"`
	// UnmappedSkipped of the outside references are not below an --external prefix: where they lie is
	// unknown. ExternalSkipped are below one (declared to be on other storage).
	UnmappedSkipped int `json:"unmapped_refs_not_checked"`
	ExternalSkipped int `json:"external_refs_not_checked"`
	// Untrusted says why the answer cannot be trusted even if nothing is broken: references it could
	// not check (unmapped), or an index that has not seen the store recently. OK is then false.
	Untrusted string `json:"untrusted,omitempty"`
	OK        bool   `json:"ok"`
}

// StatsResult is the answer of Stats.
type StatsResult struct {
	Store      string    `json:"store"`
	IndexDir   string    `json:"index_dir"`
	Schema     int       `json:"schema"`
	Generation int       `json:"generation"`
	LastSync   time.Time `json:"last_sync,omitzero"`
	SyncError  string    `json:"sync_error,omitempty"`
	Stale      bool      `json:"stale"`
	Jobs       int       `json:"jobs"` // job folders with a live checkpoint
	// SavepointFolders counts folders that hold live savepoints and no checkpoint (a savepoint
	// directory such as state.savepoints.dir): they are not jobs.
	SavepointFolders  int `json:"savepoint_folders"`
	Checkpoints       int `json:"checkpoints"`
	Savepoints        int `json:"savepoints"`
	Unparseable       int `json:"unparseable"`
	References        int `json:"references"`
	OutsideReferences int `json:"outside_references"`
	// InferredMaps are the distinct prefix maps the store proved (see CheckpointInfo.InferredMaps);
	// UnmappedReferences and ExternalReferences split OutsideReferences.
	InferredMaps       []string `json:"inferred_maps,omitempty"`
	UnmappedReferences int      `json:"unmapped_references"`
	ExternalReferences int      `json:"external_references"`
	// Unmapped names the first live _metadata with unmapped references and what to add, or "".
	Unmapped         string     `json:"unmapped,omitempty"`
	DirectoryHandles int        `json:"directory_handles"`
	Pins             int        `json:"pins"`
	IndexBytes       int64      `json:"index_bytes"`
	Policy           PolicyInfo `json:"policy"`
	// StoreClockBehind is how far the store's clock was behind this host's at the last sync (0 when
	// within a couple of seconds); ages are then measured by the store's clock.
	StoreClockBehind duration.D `json:"store_clock_behind,omitempty"`
	// PendingDeletes is the S3 mount's delete queue, when it holds anything (filled by the CLI from the
	// journal beside the index).
	PendingDeletes *PendingDeletes `json:"pending_deletes,omitempty"`
}

// PolicyInfo is Policy in JSON-friendly form: durations in the flags' syntax ("1h", "7d").
type PolicyInfo struct {
	Grace        string   `json:"grace"`
	ActiveWindow string   `json:"active_window"`
	MaxStaleness string   `json:"max_staleness"`
	Protect      []string `json:"protect,omitempty"`
	// SavepointKeepNewest and SavepointRetention: see Policy.
	SavepointKeepNewest bool   `json:"savepoint_keep_newest"`
	SavepointRetention  string `json:"savepoint_retention"`
}

func (v *view) info(c *checkpointRecord) CheckpointInfo {
	ci := CheckpointInfo{Metadata: c.Key, Dir: dirOf(c.Key), Job: c.Job, ID: c.ID, Kind: c.Kind, Completed: c.ModTime,
		Size: c.Size, Format: c.Format, Refs: c.Refs, Outside: c.Outside, Error: c.Err,
		InferredMaps: c.Inferred, External: c.External, Unmapped: c.Unmapped, UnmappedURI: c.UnmappedURI}
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
	d := ix.decide(ctx, v, key, op, 100)
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
			other := map[string]bool{}
			for _, r := range refs {
				if !r.Inside {
					continue
				}
				if j := ix.norm.JobFolder(r.Key, func(s string) bool { return known[s] }); j != "" && j != c.Job {
					other[j] = true
				}
			}
			for j := range other {
				ci.ReferencesJobs = append(ci.ReferencesJobs, j)
			}
			sort.Strings(ci.ReferencesJobs)
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
		set := map[string]bool{}
		for _, c := range jc.Checkpoints {
			for _, j := range c.ReferencesJobs {
				set[j] = true
			}
		}
		for j := range set {
			jc.ReferencesJobs = append(jc.ReferencesJobs, j)
		}
		sort.Strings(jc.ReferencesJobs)
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
		res.Jobs = append(res.Jobs, *jc)
	}
	sort.Slice(res.Jobs, func(a, b int) bool { return res.Jobs[a].Job < res.Jobs[b].Job })
	return res, nil
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
	case len(v.st.unparseable) > 0:
		return fmt.Sprintf("%s cannot be parsed (%s), so what it references is unknown", v.st.unparseable[0], v.st.ckpts[v.st.unparseable[0]].Err)
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

// Orphans lists every object the guard would let a script delete that no checkpoint needs:
// unreferenced, not a live _metadata, not pinned or --protect'ed, past the grace period, and at
// least olderThan old.
func (ix *Index) Orphans(ctx context.Context, olderThan time.Duration) (*OrphansResult, error) {
	defer ix.beginWork()()
	v, err := ix.acquire()
	if err != nil {
		return nil, err
	}
	defer v.release()
	res := &OrphansResult{OlderThan: duration.D(olderThan), Files: []OrphanFile{}}
	if b := v.blocked(); b != "" {
		res.Blocked = b
		return res, nil
	}
	if b := ix.unmappedBlock(v); b != "" {
		// Files named like an unmapped reference are kept from the list, but the list would still
		// claim more than is known: nothing is called garbage until the reference is placed.
		res.Blocked = b
		return res, nil
	}
	now := v.storeNow(v.now())
	err = v.g.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		referenced := func(key string) bool {
			p := append([]byte(tblReverse+key), 0)
			it.Seek(p)
			if it.ValidForPrefix(p) {
				return true
			}
			for a := key; len(v.st.dirRefs) > 0; {
				if v.st.dirRefs[a] > 0 {
					return true
				}
				if a == "" {
					return false
				}
				a = parentKey(a)
			}
			return false
		}
		tomb := func(o store.ObjectInfo) bool {
			it, err := txn.Get(tombKey(o.Path))
			if err != nil {
				return false
			}
			b, err := it.ValueCopy(nil)
			return err == nil && tombstoneLifts(b, o)
		}
		bar := ix.newCounter("scanning the store for orphans")
		defer bar.Finish()
		return ix.st.Walk(ctx, "", func(o store.ObjectInfo) error {
			if o.IsDir {
				return nil
			}
			_ = bar.Add(1)
			res.StoreBytes += o.Size
			if c := v.st.ckpts[o.Path]; c != nil {
				if !sameVersion(c, o) && !ix.indexedNow(o) {
					return errIndexBehind{o.Path, "changed"}
				}
				return nil
			}
			if store.IsCheckpointFile(o) && !ix.indexedNow(o) {
				// A checkpoint the index has not read (written beside the mount since the last sync):
				// what it references is unknown, so nothing may be called garbage.
				return errIndexBehind{o.Path, "appeared"}
			}
			if _, pinned := v.pins[o.Path]; pinned {
				return nil
			}
			if v.pol.protectedBy(o.Path) != "" || referenced(o.Path) {
				return nil
			}
			age := now.Sub(o.ModTime)
			if age < olderThan || (age < v.pol.Grace && !tomb(o)) {
				return nil
			}
			res.Files = append(res.Files, OrphanFile{Path: o.Path, Size: o.Size, ModTime: o.ModTime})
			res.Bytes += o.Size
			return nil
		})
	})
	var behind errIndexBehind
	if errors.As(err, &behind) {
		return &OrphansResult{OlderThan: duration.D(olderThan), Files: []OrphanFile{},
			Blocked: fmt.Sprintf("%s %s since the last index sync, so what it references is unknown; run `ckguard index sync` (a running mount syncs every --sync-interval) and list again", behind.key, behind.what)}, nil
	}
	if err != nil {
		return nil, err
	}
	sort.Slice(res.Files, func(a, b int) bool { return res.Files[a].Path < res.Files[b].Path })
	return res, nil
}

// indexedNow reports whether the index holds o as it is now, though the view a long walk started with
// does not: a checkpoint indexed through the mount during the walk. Its new files are young
// (grace keeps them off the list) and the older files it reuses are referenced by the checkpoints it
// follows, which the view holds.
func (ix *Index) indexedNow(o store.ObjectInfo) bool {
	ix.mu.RLock()
	cur := ix.mu.state
	ix.mu.RUnlock()
	c := cur.ckpts[o.Path]
	return c != nil && sameVersion(c, o)
}

// errIndexBehind stops an orphans walk at a _metadata the index does not hold as it is in the store.
type errIndexBehind struct{ key, what string }

func (e errIndexBehind) Error() string { return e.key + " " + e.what + " since the last index sync" }

// Verify checks, for every live checkpoint, that every object it references exists in the store.
// Unparseable _metadata count as broken.
func (ix *Index) Verify(ctx context.Context) (*VerifyResult, error) {
	defer ix.beginWork()()
	v, err := ix.acquire()
	if err != nil {
		return nil, err
	}
	defer v.release()
	res := &VerifyResult{Broken: []BrokenCheckpoint{}}
	type job struct {
		meta string
		refs []ref
	}
	var jobs []job
	err = v.g.db.View(func(txn *badger.Txn) error {
		for _, k := range v.st.sorted {
			c := v.st.ckpts[k]
			if c.Err != "" {
				res.Broken = append(res.Broken, BrokenCheckpoint{Metadata: k, Error: c.Err})
				continue
			}
			refs, err := readRefs(txn, k)
			if err != nil {
				return err
			}
			jobs = append(jobs, job{meta: k, refs: refs})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Each distinct object is stat'ed once, with bounded concurrency (network stores).
	var mu sync.Mutex
	exists := map[string]error{}
	var objs []string
	for _, j := range jobs {
		for _, r := range j.refs {
			if !r.Inside {
				res.OutsideSkipped++
				if ix.norm.IsExternal(r.Key) {
					res.ExternalSkipped++
				} else {
					res.UnmappedSkipped++
				}
				continue
			}
			if _, ok := exists[r.Key]; !ok {
				exists[r.Key] = nil
				objs = append(objs, r.Key)
			}
		}
	}
	res.Objects = len(objs)
	bar := ix.newBar(len(objs), "verifying")
	var firstErr error
	ix.inParallel(ctx, len(objs), bar, func(i int) {
		o := objs[i]
		_, err := ix.st.Stat(ctx, o)
		mu.Lock()
		defer mu.Unlock()
		if err != nil && !errors.Is(err, fs.ErrNotExist) && firstErr == nil {
			firstErr = fmt.Errorf("verify: stat %s: %w", o, err)
		}
		exists[o] = err
	})
	bar.Finish()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, j := range jobs {
		res.Checked++
		var b BrokenCheckpoint
		for _, r := range j.refs {
			if r.Inside && exists[r.Key] != nil {
				b.MissingCount++
				if len(b.Missing) < 1000 {
					b.Missing = append(b.Missing, r.Key)
				}
			}
		}
		if b.MissingCount > 0 {
			b.Metadata = j.meta
			res.Broken = append(res.Broken, b)
		}
	}
	sort.Slice(res.Broken, func(a, b int) bool { return res.Broken[a].Metadata < res.Broken[b].Metadata })
	switch b := v.blocked(); {
	case b != "" && len(v.st.unparseable) == 0:
		res.Untrusted = b
	case res.UnmappedSkipped > 0:
		res.Untrusted = fmt.Sprintf("%d reference(s) could not be checked: %s", res.UnmappedSkipped, ix.unmappedBlock(v))
	}
	res.OK = len(res.Broken) == 0 && res.Untrusted == ""
	return res, nil
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
		StoreClockBehind: duration.D(-v.skew)}
	b := v.blocked()
	s.Stale = b != "" && len(v.st.unparseable) == 0
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
