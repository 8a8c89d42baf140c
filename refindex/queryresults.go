package refindex

import (
	"context"
	"time"

	"github.com/ckguard/ckguard/internal/duration"
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
	// History lists the `_metadata` the metadata history holds, live and retired ("" = all jobs).
	History(ctx context.Context, job string) (*HistoryResult, error)
	// RestoreMetadata puts a `_metadata` deleted outside the mount back from the history (never
	// overwriting) and indexes it.
	RestoreMetadata(ctx context.Context, checkpoint string) (*RestoreResult, error)
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
	// Refuses says, for an unparseable one, what it refuses in words: its scope (itself, its
	// folder, or the store when its writer is trusted).
	Refuses string `json:"refuses,omitempty"`
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
	// Unknown names the store entries that could not be read (at the last sync or by this walk) and may
	// hide references: the files they may protect are left out of Files, and the list is not complete
	// (exit 3). Empty when there are none.
	Unknown string `json:"unknown,omitempty"`
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
	// Class and Scope: for an unparseable `_metadata` (VerifyResult.Unparseable), see BadMetadata.
	Class        string   `json:"class,omitempty"`
	Scope        string   `json:"scope,omitempty"`
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
	// Unparseable are the `_metadata` the index cannot parse (Error says why, Class and Scope what
	// they are and refuse): no checkpoint was checked for them, so verify is not green (Untrusted,
	// exit 3) until they are removed; they are no broken checkpoints (a damaged one is none at all).
	Unparseable []BrokenCheckpoint `json:"unparseable,omitempty"`
	// RetiredDuringCheck are checkpoints the index still held whose `_metadata` was deleted from the
	// store while verify ran (Flink subsuming them): no longer live, so not broken.
	RetiredDuringCheck []string `json:"retired_during_check,omitempty"`
	OK                 bool     `json:"ok"`
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
	SavepointFolders int `json:"savepoint_folders"`
	Checkpoints      int `json:"checkpoints"`
	Savepoints       int `json:"savepoints"`
	Unparseable      int `json:"unparseable"`
	// Of Unparseable: DamagedMetadata protect nothing but themselves (Flink cannot load them either);
	// BlockingMetadata refuse every deletion (a newer format or too large, from a trusted writer);
	// ConfinedMetadata refuse those in their own folder (the same from another writer). BadMetadata
	// lists them (the first 100, sorted).
	DamagedMetadata   int           `json:"damaged_metadata"`
	BlockingMetadata  int           `json:"blocking_metadata"`
	ConfinedMetadata  int           `json:"confined_metadata"`
	BadMetadata       []BadMetadata `json:"bad_metadata,omitempty"`
	References        int           `json:"references"`
	OutsideReferences int           `json:"outside_references"`
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
	// UnknownSubtrees are the store entries the last sync could not read (refindex/unknown.go).
	UnknownSubtrees []UnknownSubtree `json:"unknown_subtrees,omitempty"`
	// Flink is what the --flink-rest endpoints report (nil without --flink-rest; flinkjobs.go).
	Flink *FlinkStatus `json:"flink,omitempty"`
	// PendingDeletes is the S3 mount's delete queue, when it holds anything (filled by the CLI from the
	// journal beside the index).
	PendingDeletes *PendingDeletes `json:"pending_deletes,omitempty"`
	// Holds is the mount's holds (--hold), when a mount wrote their status beside the index (filled by
	// the CLI: hold.Status).
	Holds any `json:"holds,omitempty"`
	// Fleet is what a --shared mount last found in the store's registry of mounts, outdated mounts
	// among them (filled by the CLI: guardd.FleetStatus).
	Fleet any `json:"fleet,omitempty"`
}

// BadMetadata is one `_metadata` the index cannot parse, in stats.
type BadMetadata struct {
	Metadata string    `json:"metadata"`
	Class    string    `json:"class"` // damaged, newer-format, too-large, unaddressable ("" from an older index)
	Scope    string    `json:"scope"` // what it refuses: itself, folder, store
	Error    string    `json:"error"`
	ModTime  time.Time `json:"mtime"`
	// HeldRefs: it replaced a parseable version within --grace, whose references it keeps meanwhile.
	HeldRefs bool `json:"held_refs,omitempty"`
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
