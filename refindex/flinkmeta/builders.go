package flinkmeta

import (
	"crypto/sha256"
	"fmt"
)

// Builders for realistic `_metadata` content (tests, treegen, demo). They produce exactly what
// Parse returns for the encoded bytes, so Parse(Encode(m)) deep-equals m. Identifiers that Flink
// generates randomly (UUIDs) are derived deterministically from a seed string, so the same calls
// always build the same bytes.

// NewCheckpoint returns an empty regular checkpoint in format version v (2–6). For v ≥ 4 the
// trailer is CheckpointProps(retained).
func NewCheckpoint(v int, checkpointID int64, retained bool) *Metadata {
	m := &Metadata{FormatVersion: v, CheckpointID: checkpointID, Kind: "checkpoint"}
	if v >= 4 {
		m.Properties = CheckpointProps(retained)
	} else {
		m.Kind = "unknown" // V2/V3 carry no kind; Parse derives it from a chk-<n> directory name
	}
	return m
}

// NewSavepoint returns an empty savepoint (canonical or native) in format version v.
func NewSavepoint(v int, checkpointID int64, native bool) *Metadata {
	m := &Metadata{FormatVersion: v, CheckpointID: checkpointID, Kind: "savepoint"}
	if v >= 4 {
		m.Properties = SavepointProps(native)
		m.SavepointFormat = "canonical"
		if native {
			m.SavepointFormat = "native"
		}
	} else {
		m.Kind = "unknown"
	}
	return m
}

// CheckpointProps is the trailer of a regular incremental checkpoint; retained checkpoints are
// kept on cancellation, failure and suspension (externalized checkpoints).
func CheckpointProps(retained bool) *Properties {
	return &Properties{
		DiscardSubsumed: true, DiscardFinished: true,
		DiscardCancelled: !retained, DiscardFailed: !retained, DiscardSuspended: !retained,
		TypeName: "Checkpoint", SharingStrategy: "FORWARD_BACKWARD",
		TypeSerialVersionUID: DefaultCheckpointTypeUID,
	}
}

// SavepointProps is the trailer of a user-triggered savepoint.
func SavepointProps(native bool) *Properties {
	f := "CANONICAL"
	if native {
		f = "NATIVE"
	}
	return &Properties{
		Forced: true, Savepoint: true, TypeName: "Savepoint", FormatType: f,
		PostCheckpointAction: "NONE", TypeSerialVersionUID: DefaultSavepointTypeUID,
	}
}

// ID derives a deterministic OperatorID from a seed (not Flink's uid hash).
func ID(seed string) OperatorID {
	var id OperatorID
	s := sha256.Sum256([]byte("operator:" + seed))
	copy(id[:], s[:16])
	return id
}

// UUID derives a deterministic UUID-formatted string from a seed, as Flink writes state handle
// ids, backend ids and generated file names.
func UUID(seed string) string {
	s := sha256.Sum256([]byte("uuid:" + seed))
	return fmt.Sprintf("%x-%x-%x-%x-%x", s[0:4], s[4:6], s[6:8], s[8:10], s[10:16])
}

// NewOperator returns an operator with no subtasks; name/uid are only encoded in V5+.
func NewOperator(id OperatorID, name, uid string, parallelism, maxParallelism int32) OperatorState {
	return OperatorState{ID: id, Name: name, UID: uid, Parallelism: parallelism, MaxParallelism: maxParallelism}
}

// ForVersion fixes fields whose presence depends on the format version: V2 gets chain length 1
// and subtask duration -1 (what Flink writes); name/uid are dropped below V5.
func (op *OperatorState) ForVersion(v int) {
	if v < 5 {
		op.Name, op.UID = "", ""
	}
	if v == 2 {
		op.ChainLength = 1
		for i := range op.Subtasks {
			op.Subtasks[i].Duration = -1
		}
	}
}

// KeyGroupRange splits [0, maxParallelism) evenly over parallelism subtasks and returns the
// (start, num) of subtask i, as Flink assigns key groups.
func KeyGroupRange(maxParallelism, parallelism, i int32) (start, num int32) {
	start = int32(int64(i) * int64(maxParallelism) / int64(parallelism))
	end := int32(int64(i+1) * int64(maxParallelism) / int64(parallelism))
	return start, end - start
}

// ---- stream handles ----

// File is an absolute file handle (code 2): s3://…, hdfs://…, file:/….
func File(uri string, size int64) StreamHandle {
	return StreamHandle{Code: StreamFile, Path: uri, Size: size}
}

// Relative is a relative file handle (code 6) naming a file next to `_metadata`.
func Relative(name string, size int64) StreamHandle {
	return StreamHandle{Code: StreamRelativeFile, Path: name, Size: size}
}

// Inline is a ByteStream handle (code 1). name is only a label (Flink uses the path the data
// would have had); data may be nil for an empty payload.
func Inline(name string, data []byte) StreamHandle {
	if len(data) == 0 {
		data = nil
	}
	return StreamHandle{Code: StreamByteStream, Path: name, Data: data, Size: int64(len(data))}
}

// Segment is a file-merging segment handle (code 15): bytes [offset, offset+size) of a physical
// file, SHARED or EXCLUSIVE scope.
func Segment(physicalFile string, offset, size int64, shared bool) StreamHandle {
	h := StreamHandle{Code: StreamSegmentFile, Path: physicalFile, Offset: offset, Size: size,
		LogicalFileID: UUID(fmt.Sprintf("%s@%d+%d", physicalFile, offset, size))}
	if shared {
		h.Scope = 1
	}
	return h
}

// EmptySegment is code 16.
func EmptySegment() StreamHandle { return StreamHandle{Code: StreamEmptySegmentFile} }

// KeyGroupsInStreamHandle is stream code 3: a key-group handle where a stream handle is expected.
func KeyGroupsInStreamHandle(start, num int32, delegate StreamHandle) StreamHandle {
	return StreamHandle{Code: StreamKeyGroups, KeyGroups: &KeyGroupsInStream{Start: start, Num: num, Offsets: evenOffsets(num, delegate.Size), Delegate: delegate}}
}

func evenOffsets(num int32, size int64) []int64 {
	if num <= 0 {
		return nil
	}
	out := make([]int64, num)
	for i := range out {
		out[i] = int64(i) * max(size, 0) / int64(num)
	}
	return out
}

// ---- operator handles ----

// OperatorStateHandle is operator code 4 with one state per name (SPLIT_DISTRIBUTE), offsets
// spread over the delegate.
func OperatorStateHandle(delegate StreamHandle, names ...string) *OperatorHandle {
	return &OperatorHandle{Code: OperatorStream, States: operatorStates(delegate, names), Delegate: delegate}
}

// FileMergingOperatorHandle is operator code 17 with its two managed directories and a segment
// delegate (Segment or EmptySegment; empty=true for the "Empty…" variant).
func FileMergingOperatorHandle(taskOwnedDir, sharedDir string, delegate StreamHandle, names ...string) *OperatorHandle {
	return &OperatorHandle{Code: OperatorFileMerging, States: operatorStates(delegate, names),
		TaskOwnedDir: taskOwnedDir, SharedDir: sharedDir, Empty: delegate.Code == StreamEmptySegmentFile, Delegate: delegate}
}

func operatorStates(delegate StreamHandle, names []string) []OperatorStateMeta {
	var out []OperatorStateMeta
	for i, n := range names {
		out = append(out, OperatorStateMeta{Name: n, Mode: SplitDistribute, Offsets: []int64{int64(i) * max(delegate.Size, 0) / int64(len(names))}})
	}
	return out
}

// ---- keyed handles ----

// KeyGroups is keyed code 12 (Flink 1.15+; use code 3 for V2) over key groups [start, start+num).
func KeyGroups(start, num int32, delegate StreamHandle) KeyedHandle {
	return KeyedHandle{Code: KeyedKeyGroupsV2, Start: start, Num: num, Offsets: evenOffsets(num, delegate.Size), Delegate: delegate,
		HandleID: UUID(fmt.Sprintf("kg:%d:%d:%s", start, num, delegate.Path))}
}

// SSTs builds n shared-state entries "000001.sst"… as absolute File handles base/<uuid>, e.g.
// base = "s3://bucket/flink/<job>/shared". seed makes file names unique per subtask/checkpoint.
func SSTs(base, seed string, n int, size int64) []NamedHandle {
	out := make([]NamedHandle, n)
	for i := range out {
		out[i] = NamedHandle{LocalPath: fmt.Sprintf("%06d.sst", i+1), Handle: File(base+"/"+UUID(fmt.Sprintf("%s/sst/%d", seed, i)), size)}
	}
	return out
}

// RelativeFiles builds private-state entries (MANIFEST, OPTIONS, CURRENT, …) as relative handles;
// the returned names are the files to create next to `_metadata`.
func RelativeFiles(seed string, localNames ...string) []NamedHandle {
	out := make([]NamedHandle, len(localNames))
	for i, l := range localNames {
		out[i] = NamedHandle{LocalPath: l, Handle: Relative(UUID(seed+"/"+l), 1024)}
	}
	return out
}

// Incremental is an incremental RocksDB/ForSt handle (code 11; code 5 for Flink ≤1.14) with the
// given meta handle and shared/private files.
func Incremental(checkpointID int64, start, num int32, meta StreamHandle, shared, private []NamedHandle) KeyedHandle {
	seed := fmt.Sprintf("inc:%d:%d:%d", checkpointID, start, num)
	var size int64
	for _, l := range [][]NamedHandle{shared, private} {
		for _, e := range l {
			size += max(e.Handle.Size, 0)
		}
	}
	return KeyedHandle{Code: KeyedIncrementalV2, CheckpointID: checkpointID, BackendID: UUID(seed + ":backend"),
		Start: start, Num: num, CheckpointedSize: size, Meta: meta, Shared: shared, Private: private, HandleID: UUID(seed)}
}

// IncrementalV1 converts an Incremental handle to the Flink ≤1.14 code 5 (no size, no id).
func IncrementalV1(h KeyedHandle) KeyedHandle {
	h.Code, h.CheckpointedSize, h.HandleID = KeyedIncremental, 0, ""
	return h
}

// ChangelogFiles is keyed code 13: DSTL file increments (usually absolute File handles).
func ChangelogFiles(start, num int32, files ...OffsetHandle) KeyedHandle {
	var size int64
	for _, f := range files {
		size += max(f.Handle.Size, 0)
	}
	return KeyedHandle{Code: KeyedChangelogFileV2, Start: start, Num: num, Files: files, StateSize: size, CheckpointedSize: size,
		HandleID: UUID(fmt.Sprintf("dstl:%d:%d:%d", start, num, len(files))), StorageID: "filesystem"}
}

// InMemoryChangelog is keyed code 9 with inline changes.
func InMemoryChangelog(start, num int32, from, to int64, changes ...Change) KeyedHandle {
	for i := range changes {
		changes[i].Len = int64(len(changes[i].Data))
		if len(changes[i].Data) == 0 {
			changes[i].Data = nil
		}
	}
	return KeyedHandle{Code: KeyedInMemoryChangelog, Start: start, Num: num, FromSeq: from, ToSeq: to, Changes: changes,
		HandleID: UUID(fmt.Sprintf("mem:%d:%d:%d:%d", start, num, from, to))}
}

// Changelog is keyed code 14: a materialized part plus non-materialized changelog handles.
func Changelog(checkpointID, materializationID int64, start, num int32, materialized, nonMaterialized []KeyedHandle) KeyedHandle {
	return KeyedHandle{Code: KeyedChangelogV2, Start: start, Num: num, CheckpointedSize: 0, Materialized: materialized,
		NonMaterialized: nonMaterialized, MaterializationID: materializationID, CheckpointID: checkpointID,
		HandleID: UUID(fmt.Sprintf("cl:%d:%d:%d", checkpointID, start, num))}
}

// ---- channel handles ----

// MergedChannels is a V6 merged channel handle (code 3 input / 4 output) over one delegate.
func MergedChannels(input bool, subtask int32, delegate StreamHandle, channels ...MergedChannel) ChannelHandle {
	code := ChannelMergedResultSubpartition
	if input {
		code = ChannelMergedInput
	}
	var size int64
	for _, c := range channels {
		size += c.StateSize
	}
	return ChannelHandle{Code: code, SubtaskIndex: subtask, StateSize: size, Delegate: delegate, Merged: channels}
}

// Channel is a plain channel handle (code 1 input / 2 output; untyped in V3–V5).
func Channel(input bool, subtask, a, b int32, size int64, delegate StreamHandle, offsets ...int64) ChannelHandle {
	code := ChannelResultSubpartition
	if input {
		code = ChannelInput
	}
	return ChannelHandle{Code: code, SubtaskIndex: subtask, A: a, B: b, Offsets: offsets, StateSize: size, Delegate: delegate}
}
