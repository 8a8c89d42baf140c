// Package flinkmeta reads and writes Apache Flink checkpoint/savepoint `_metadata` files (format
// versions 2–6) and lists the storage objects a snapshot needs. The grammar is the one described in
// shared/spec/flink-metadata-format.md (section numbers in comments refer to it).
//
// The package never touches storage: Parse reads from an io.ReaderAt, References resolves paths
// purely lexically against the location the caller says the file was read from.
package flinkmeta

import "encoding/hex"

// Magic is the i32 that starts every `_metadata` file (§2).
const Magic = 0x4960672D

// masterStateMagic starts every master state (§3.1).
const masterStateMagic = int32(-0x3694E96A) // 0xC96B1696

// Stream handle type codes (§5.1).
const (
	StreamNull             uint8 = 0
	StreamByteStream       uint8 = 1
	StreamFile             uint8 = 2
	StreamKeyGroups        uint8 = 3 // KeyGroupsStateHandle nested where a stream handle is expected
	StreamRelativeFile     uint8 = 6
	StreamSegmentFile      uint8 = 15
	StreamEmptySegmentFile uint8 = 16
)

// Operator state handle type codes (§5.2).
const (
	OperatorNull        uint8 = 0
	OperatorStream      uint8 = 4
	OperatorFileMerging uint8 = 17
)

// Keyed state handle type codes (§5.3).
const (
	KeyedNull               uint8 = 0
	KeyedKeyGroups          uint8 = 3
	KeyedIncremental        uint8 = 5
	KeyedKeyGroupsSavepoint uint8 = 7
	KeyedChangelog          uint8 = 8
	KeyedInMemoryChangelog  uint8 = 9
	KeyedChangelogFile      uint8 = 10
	KeyedIncrementalV2      uint8 = 11
	KeyedKeyGroupsV2        uint8 = 12
	KeyedChangelogFileV2    uint8 = 13
	KeyedChangelogV2        uint8 = 14
)

// Channel handle type codes. Versions 3–5 write no code; the parser fills in 1 (input) or 2 (result
// subpartition) from the list the handle is in, so the model is the same for all versions (§6).
const (
	ChannelInput                    uint8 = 1
	ChannelResultSubpartition       uint8 = 2
	ChannelMergedInput              uint8 = 3
	ChannelMergedResultSubpartition uint8 = 4
)

// Distribution modes of operator state partitions (§5.2).
const (
	SplitDistribute uint8 = 0
	Union           uint8 = 1
	Broadcast       uint8 = 2
)

// Metadata is one parsed `_metadata` file.
type Metadata struct {
	FormatVersion int
	CheckpointID  int64
	// Kind is "checkpoint", "savepoint" or "unknown". For V4+ it comes from the properties trailer
	// (a null trailer gives "unknown"); for V2/V3 from the directory name passed to Parse
	// (chk-<n> / savepoint-…). The encoder ignores it.
	Kind string
	// SavepointFormat is "canonical" or "native" for savepoints with a trailer, otherwise "".
	SavepointFormat string
	// Layout selects the same-version variants of format version 3 (§8).
	Layout       Layout
	MasterStates []MasterState
	Operators    []OperatorState
	// Properties is the V4+ trailer; nil for versions 2 and 3, never nil for V4+.
	Properties *Properties
}

// Layout names the same-version layout variants of format version 3 (§8). Both false is the
// layout of Flink 1.12+/1.15; they are invalid for any other version.
type Layout struct {
	// Flink111Channels: channel-state handles without the leading subtask index (Flink 1.11).
	Flink111Channels bool `json:",omitempty"`
	// Flink114Changelog: the short layouts of keyed codes 8, 9 and 10 (Flink 1.14).
	Flink114Changelog bool `json:",omitempty"`
}

// MasterState is the state of a JobManager-side checkpoint hook (§3.1). Always inline.
type MasterState struct {
	Version    int32
	Name       string
	PayloadLen int64
	Payload    []byte // nil unless parsed with KeepInline
}

// OperatorID is a Flink OperatorID / JobVertexID in file byte order.
type OperatorID [16]byte

// String returns the 32-char lowercase hex form Flink shows in its UI and logs.
func (id OperatorID) String() string { return hex.EncodeToString(id[:]) }

// OperatorState is the state of one operator (§4).
type OperatorState struct {
	ID             OperatorID
	Name, UID      string // V5+ only; "" = not recorded
	Parallelism    int32
	MaxParallelism int32
	ChainLength    int32        // V2 only (legacy, written as 1)
	Coordinator    StreamHandle // V3+: operator-coordinator state, code 0 or 1
	// FullyFinished is the V3+ "operator fully finished" marker (numSubtasks < 0); no subtasks then.
	FullyFinished bool
	Subtasks      []SubtaskState
}

// SubtaskState is the state of one subtask (§4.1–4.3).
type SubtaskState struct {
	Index int32
	// Finished is the V3+ finished-subtask marker (stored index < 0); no handles then.
	Finished bool
	Duration int64          // V2 only (written as -1)
	Legacy   []StreamHandle // V2 only
	// ManagedOperator / RawOperator are nil when the "has" flag is 0. A non-nil handle with code 0
	// is a present-but-null handle (legal in the grammar).
	ManagedOperator *OperatorHandle
	RawOperator     *OperatorHandle
	ManagedKeyed    KeyedHandle
	RawKeyed        KeyedHandle
	InputChannels   []ChannelHandle // V3+
	ResultSubparts  []ChannelHandle // V3+
}

// StreamHandle is a stream state handle (§5.1). Code 0 is null.
type StreamHandle struct {
	Code uint8
	// Scope of a segment handle: 0 EXCLUSIVE, 1 SHARED.
	Scope uint8
	// Path is the absolute URI (File), the relative file name (RelativeFile), the physical file
	// (SegmentFile), or the handle name of a ByteStream (a name only, never a file).
	Path string
	// Size is the stateSize; for ByteStream the number of inline bytes.
	Size int64
	// Offset is the start position of a SegmentFile inside its physical file.
	Offset        int64
	LogicalFileID string // SegmentFile
	// Data holds ByteStream bytes when parsed with KeepInline (and for encoding).
	Data      []byte
	KeyGroups *KeyGroupsInStream // code 3
}

// KeyGroupsInStream is a key-group handle nested where a stream handle is expected (stream code 3).
type KeyGroupsInStream struct {
	Start, Num int32
	Offsets    []int64
	Delegate   StreamHandle
}

// OperatorHandle is an operator state handle (§5.2). Code 0 is null.
type OperatorHandle struct {
	Code   uint8
	States []OperatorStateMeta
	// Code 17 only.
	TaskOwnedDir, SharedDir string
	Empty                   bool
	Delegate                StreamHandle
}

// OperatorStateMeta describes one named operator state inside an operator handle.
type OperatorStateMeta struct {
	Name    string
	Mode    uint8
	Offsets []int64
}

// KeyedHandle is a keyed state handle (§5.3). Code 0 is null. Which fields are used depends on Code.
type KeyedHandle struct {
	Code       uint8
	Start, Num int32 // key-group range

	// 3, 7, 12: offsets of the key groups inside Delegate.
	Offsets  []int64
	Delegate StreamHandle

	// 12, 11, 14, 8 (long), 9 (long), 13, 10 (long).
	HandleID string

	// 5, 11: incremental.
	CheckpointID     int64
	BackendID        string
	CheckpointedSize int64 // 11, 14, 8 (long), 13, 10 (long)
	Meta             StreamHandle
	Shared, Private  []NamedHandle

	// 8, 14: changelog backend handle.
	Materialized      []KeyedHandle
	NonMaterialized   []KeyedHandle
	MaterializationID int64 // 8 (long), 14 (CheckpointID holds the 14 checkpoint id)

	// 9: in-memory changelog.
	FromSeq, ToSeq int64
	Changes        []Change

	// 10, 13: changelog files.
	Files     []OffsetHandle
	StateSize int64
	StorageID string // 13
}

// NamedHandle is an entry of an incremental handle's shared/private list.
type NamedHandle struct {
	LocalPath string
	Handle    StreamHandle
}

// Change is one in-memory changelog entry (keyed code 9).
type Change struct {
	KeyGroup int32
	Len      int64
	Data     []byte // nil unless KeepInline
}

// OffsetHandle is one file increment of a changelog file handle (keyed codes 10/13).
type OffsetHandle struct {
	Offset int64
	Handle StreamHandle
}

// ChannelHandle is an unaligned-checkpoint channel-state handle (§6).
type ChannelHandle struct {
	Code         uint8 // 1..4, see ChannelInput…
	SubtaskIndex int32 // not present in the Flink 1.11 layout (0 then)
	// Plain handles (1, 2).
	A, B      int32 // gate/channel or partition/subpartition index
	Offsets   []int64
	StateSize int64
	Delegate  StreamHandle
	// Merged handles (3, 4): the channels of the serialized offsets structure.
	Merged []MergedChannel
}

// MergedChannel is one channel inside a merged channel handle's offsets structure (§6.2).
type MergedChannel struct {
	A, B      int32
	StateSize int64
	Offsets   []int64
}

// Properties is the CheckpointProperties trailer of V4+ (§7).
type Properties struct {
	// Null is the Java null trailer (State Processor API); all other fields are then zero.
	Null                                                                                bool
	DiscardCancelled, DiscardFailed, DiscardFinished, DiscardSubsumed, DiscardSuspended bool
	Forced, Unclaimed                                                                   bool
	// Savepoint: the type object is a SavepointType (else a CheckpointType).
	Savepoint bool
	TypeName  string // "Checkpoint", "Full Checkpoint", "Savepoint", "Suspend Savepoint", …
	// SharingStrategy (checkpoints): FORWARD_BACKWARD, FORWARD or NO_SHARING.
	SharingStrategy string
	// FormatType (savepoints): CANONICAL or NATIVE; PostCheckpointAction: NONE, SUSPEND, TERMINATE.
	FormatType, PostCheckpointAction string
	// TypeSerialVersionUID of the type class as written (Java computes it; do not validate).
	TypeSerialVersionUID int64
}
