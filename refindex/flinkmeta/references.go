package flinkmeta

import (
	"encoding/binary"
	"hash/maphash"
	"strings"
)

// RefKind says what kind of storage object a Reference names.
type RefKind string

const (
	RefFile      RefKind = "file"      // an absolute file (stream code 2), whole object
	RefRelative  RefKind = "relative"  // a file next to the `_metadata` (stream code 6), whole object
	RefSegment   RefKind = "segment"   // the byte range [Offset, Offset+Length) of a physical file (code 15)
	RefDirectory RefKind = "directory" // a file-merging managed directory (operator code 17), whole tree
)

// State kinds reported in Reference.StateKind: which slot of the subtask state holds the handle.
const (
	StateManagedOperator    = "managed-operator"
	StateRawOperator        = "raw-operator"
	StateManagedKeyed       = "managed-keyed"       // key-group handles of managed keyed state
	StateRawKeyed           = "raw-keyed"           // key-group handles of raw keyed state
	StateKeyedShared        = "keyed-shared"        // incremental sharedState (SST files)
	StateKeyedPrivate       = "keyed-private"       // incremental privateState
	StateKeyedMeta          = "keyed-meta"          // incremental metaStateHandle
	StateChangelog          = "changelog"           // non-materialized changelog (DSTL) files
	StateInputChannel       = "input-channel"       // unaligned checkpoint input channel state
	StateResultSubpartition = "result-subpartition" // unaligned checkpoint output state
	StateLegacy             = "legacy"              // V2 legacy (Checkpointed) operator state
	StateCoordinator        = "coordinator"         // operator coordinator (inline only in practice)
)

// Reference is one storage object (or byte range / directory) a snapshot needs.
type Reference struct {
	Kind RefKind
	// URI is the path exactly as written in the file.
	URI string
	// Resolved is URI for absolute kinds; for RefRelative it is dir(metadataPath)+"/"+URI.
	Resolved string
	// Offset and Length delimit a segment; both 0 for whole files and directories.
	Offset, Length int64
	// StateSize is the size the handle declares: for a file or relative file the bytes of the whole
	// file as Flink wrote it (a restore reads that many), for a segment its Length; 0 for directories
	// and when the handle gives none (Flink writes -1 for an unknown size).
	StateSize  int64
	OperatorID string // 32 hex chars
	Subtask    int    // subtask index; -1 for operator-level state (coordinator)
	StateKind  string
}

type refKey struct {
	kind           RefKind
	resolved       string
	offset, length int64
}

// References lists the storage objects needed to restore m, which was read from metadataPath
// (a local path or URI; "" leaves relative names unresolved). Inline ByteStream handles are never
// references. The list is deduplicated by (Kind, Resolved, Offset, Length), keeping the first
// holder, in file order.
func (m *Metadata) References(metadataPath string) []Reference {
	dir := ""
	if i := strings.LastIndexByte(metadataPath, '/'); i >= 0 {
		dir = metadataPath[:i+1]
	}
	// Deduplicate through a map of 64-bit hashes to the first index (small and fast even for
	// millions of references); a hash match is confirmed by comparing the keys, and the rare true
	// collision falls back to a map of full keys.
	n := m.countPathHandles()
	out := make([]Reference, 0, n)
	first := make(map[uint64]int32, n)
	var collided map[refKey]struct{}
	seed := maphash.MakeSeed()
	add := func(r Reference) {
		var h maphash.Hash
		h.SetSeed(seed)
		h.WriteString(string(r.Kind))
		h.WriteByte(0)
		h.WriteString(r.Resolved)
		var num [16]byte
		binary.LittleEndian.PutUint64(num[:], uint64(r.Offset))
		binary.LittleEndian.PutUint64(num[8:], uint64(r.Length))
		h.Write(num[:])
		sum := h.Sum64()
		if i, ok := first[sum]; ok {
			o := &out[i]
			if o.Kind == r.Kind && o.Resolved == r.Resolved && o.Offset == r.Offset && o.Length == r.Length {
				return
			}
			k := refKey{r.Kind, r.Resolved, r.Offset, r.Length}
			if collided == nil {
				collided = map[refKey]struct{}{}
			}
			if _, dup := collided[k]; dup {
				return
			}
			collided[k] = struct{}{}
			out = append(out, r)
			return
		}
		first[sum] = int32(len(out))
		out = append(out, r)
	}
	w := walker{
		stream: func(ctx *walkCtx, h *StreamHandle) {
			r := Reference{URI: h.Path, Resolved: h.Path, StateSize: max(h.Size, 0), OperatorID: ctx.op, Subtask: ctx.subtask, StateKind: ctx.kind}
			switch h.Code {
			case StreamFile:
				r.Kind = RefFile
			case StreamRelativeFile:
				r.Kind, r.Resolved = RefRelative, dir+h.Path
			case StreamSegmentFile:
				r.Kind, r.Offset, r.Length = RefSegment, h.Offset, h.Size
			default:
				return
			}
			add(r)
		},
		operator: func(ctx *walkCtx, h *OperatorHandle) {
			if h.Code != OperatorFileMerging {
				return
			}
			for _, d := range []string{h.TaskOwnedDir, h.SharedDir} {
				if d != "" {
					add(Reference{Kind: RefDirectory, URI: d, Resolved: d, OperatorID: ctx.op, Subtask: ctx.subtask, StateKind: ctx.kind})
				}
			}
		},
	}
	w.walk(m)
	return out
}

// countPathHandles is an upper bound of the references (handles that name storage paths).
func (m *Metadata) countPathHandles() int {
	n := 0
	w := walker{
		stream: func(_ *walkCtx, h *StreamHandle) {
			if h.Code == StreamFile || h.Code == StreamRelativeFile || h.Code == StreamSegmentFile {
				n++
			}
		},
		operator: func(_ *walkCtx, h *OperatorHandle) {
			if h.Code == OperatorFileMerging {
				n += 2
			}
		},
	}
	w.walk(m)
	return n
}

// InlineBytes is the number of state bytes held inside the file itself: ByteStream payloads
// (including coordinator state), master-state payloads and in-memory changelog changes.
func (m *Metadata) InlineBytes() int64 {
	var n int64
	for i := range m.MasterStates {
		n += m.MasterStates[i].PayloadLen
	}
	w := walker{
		stream: func(_ *walkCtx, h *StreamHandle) {
			if h.Code == StreamByteStream {
				n += h.Size
			}
		},
		keyed: func(_ *walkCtx, h *KeyedHandle) {
			for i := range h.Changes {
				n += h.Changes[i].Len
			}
		},
	}
	w.walk(m)
	return n
}

// HandleCounts counts the non-null handles of m by type name (see HandleTypeName).
func (m *Metadata) HandleCounts() map[string]int {
	counts := map[string]int{}
	w := walker{
		stream:   func(_ *walkCtx, h *StreamHandle) { counts[streamNames[h.Code]]++ },
		operator: func(_ *walkCtx, h *OperatorHandle) { counts[operatorNames[h.Code]]++ },
		keyed:    func(_ *walkCtx, h *KeyedHandle) { counts[keyedNames[h.Code]]++ },
		channel:  func(_ *walkCtx, h *ChannelHandle) { counts[channelNames[h.Code]]++ },
	}
	w.walk(m)
	return counts
}

var (
	streamNames = map[uint8]string{
		StreamByteStream: "ByteStreamStateHandle", StreamFile: "FileStateHandle",
		StreamKeyGroups: "KeyGroupsStateHandle(stream)", StreamRelativeFile: "RelativeFileStateHandle",
		StreamSegmentFile: "SegmentFileStateHandle", StreamEmptySegmentFile: "EmptySegmentFileStateHandle",
	}
	operatorNames = map[uint8]string{
		OperatorStream: "OperatorStreamStateHandle", OperatorFileMerging: "FileMergingOperatorStreamStateHandle",
	}
	keyedNames = map[uint8]string{
		KeyedKeyGroups: "KeyGroupsStateHandle", KeyedKeyGroupsV2: "KeyGroupsStateHandleV2",
		KeyedKeyGroupsSavepoint: "KeyGroupsSavepointStateHandle", KeyedIncremental: "IncrementalRemoteKeyedStateHandle",
		KeyedIncrementalV2: "IncrementalRemoteKeyedStateHandleV2", KeyedChangelog: "ChangelogStateBackendHandle",
		KeyedChangelogV2: "ChangelogStateBackendHandleV2", KeyedInMemoryChangelog: "InMemoryChangelogStateHandle",
		KeyedChangelogFile: "ChangelogStateHandleStreamImpl", KeyedChangelogFileV2: "ChangelogStateHandleStreamImplV2",
	}
	channelNames = map[uint8]string{
		ChannelInput: "InputChannelStateHandle", ChannelResultSubpartition: "ResultSubpartitionStateHandle",
		ChannelMergedInput: "MergedInputChannelStateHandle", ChannelMergedResultSubpartition: "MergedResultSubpartitionStateHandle",
	}
)

// walkCtx says where in the file the visited handle sits.
type walkCtx struct {
	op      string
	subtask int
	kind    string
}

// walker visits every non-null handle of a Metadata in file order.
type walker struct {
	stream   func(*walkCtx, *StreamHandle)
	operator func(*walkCtx, *OperatorHandle)
	keyed    func(*walkCtx, *KeyedHandle)
	channel  func(*walkCtx, *ChannelHandle)
}

func (w *walker) walk(m *Metadata) {
	for i := range m.Operators {
		op := &m.Operators[i]
		ctx := &walkCtx{op: op.ID.String(), subtask: -1, kind: StateCoordinator}
		w.visitStream(ctx, &op.Coordinator)
		for j := range op.Subtasks {
			st := &op.Subtasks[j]
			ctx.subtask = int(st.Index)
			ctx.kind = StateLegacy
			for k := range st.Legacy {
				w.visitStream(ctx, &st.Legacy[k])
			}
			ctx.kind = StateManagedOperator
			w.visitOperator(ctx, st.ManagedOperator)
			ctx.kind = StateRawOperator
			w.visitOperator(ctx, st.RawOperator)
			w.visitKeyed(ctx, &st.ManagedKeyed, StateManagedKeyed)
			w.visitKeyed(ctx, &st.RawKeyed, StateRawKeyed)
			for _, l := range []struct {
				hs   []ChannelHandle
				kind string
			}{{st.InputChannels, StateInputChannel}, {st.ResultSubparts, StateResultSubpartition}} {
				ctx.kind = l.kind
				for k := range l.hs {
					if w.channel != nil {
						w.channel(ctx, &l.hs[k])
					}
					w.visitStream(ctx, &l.hs[k].Delegate)
				}
			}
		}
	}
}

func (w *walker) visitStream(ctx *walkCtx, h *StreamHandle) {
	for h != nil && h.Code != StreamNull {
		if w.stream != nil {
			w.stream(ctx, h)
		}
		if h.KeyGroups == nil {
			return
		}
		h = &h.KeyGroups.Delegate
	}
}

func (w *walker) visitOperator(ctx *walkCtx, h *OperatorHandle) {
	if h == nil || h.Code == OperatorNull {
		return
	}
	if w.operator != nil {
		w.operator(ctx, h)
	}
	w.visitStream(ctx, &h.Delegate)
}

// visitKeyed visits h; kind is the state kind of plain key-group data in this slot.
func (w *walker) visitKeyed(ctx *walkCtx, h *KeyedHandle, kind string) {
	if h.Code == KeyedNull {
		return
	}
	if w.keyed != nil {
		w.keyed(ctx, h)
	}
	ctx.kind = kind
	w.visitStream(ctx, &h.Delegate)
	ctx.kind = StateKeyedMeta
	w.visitStream(ctx, &h.Meta)
	ctx.kind = StateKeyedShared
	for i := range h.Shared {
		w.visitStream(ctx, &h.Shared[i].Handle)
	}
	ctx.kind = StateKeyedPrivate
	for i := range h.Private {
		w.visitStream(ctx, &h.Private[i].Handle)
	}
	for i := range h.Materialized {
		w.visitKeyed(ctx, &h.Materialized[i], kind)
	}
	for i := range h.NonMaterialized {
		w.visitKeyed(ctx, &h.NonMaterialized[i], kind)
	}
	ctx.kind = StateChangelog
	for i := range h.Files {
		w.visitStream(ctx, &h.Files[i].Handle)
	}
}
