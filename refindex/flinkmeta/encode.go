package flinkmeta

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Encode writes m in format version m.FormatVersion (2–6), using the layout variants in m.Layout.
// It is the inverse of Parse: Parse(Encode(m)) deep-equals m for every m that Encode accepts
// (with Kind/SavepointFormat derived as Parse derives them). Inline bytes must be present: a
// Metadata parsed without KeepInline cannot be re-encoded if it has non-empty inline handles.
func Encode(m *Metadata) ([]byte, error) {
	e := &encoder{m: m, v: m.FormatVersion}
	if err := e.metadata(); err != nil {
		return nil, err
	}
	return e.b, nil
}

// EncodeTo writes Encode(m) to w.
func EncodeTo(w io.Writer, m *Metadata) error {
	b, err := Encode(m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

type encoder struct {
	m   *Metadata
	v   int
	b   []byte
	err error
}

func (e *encoder) fail(format string, args ...any) {
	if e.err == nil {
		e.err = fmt.Errorf("flinkmeta encode: "+format, args...)
	}
}

func (e *encoder) u8(x uint8)  { e.b = append(e.b, x) }
func (e *encoder) i32(x int32) { e.b = binary.BigEndian.AppendUint32(e.b, uint32(x)) }
func (e *encoder) i64(x int64) { e.b = binary.BigEndian.AppendUint64(e.b, uint64(x)) }
func (e *encoder) boolean(x bool) {
	if x {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

func (e *encoder) str(s string) {
	n := mutf8Len(s)
	if n < 0 {
		e.fail("string %q is not valid UTF-8", s)
		return
	}
	if n > 0xFFFF {
		e.fail("string of %d encoded bytes exceeds the 65535 limit of writeUTF", n)
		return
	}
	e.b = binary.BigEndian.AppendUint16(e.b, uint16(n))
	e.b = appendMUTF8(e.b, s)
}

func (e *encoder) count(n int) {
	if n > 0x7FFFFFFF {
		e.fail("count %d too large", n)
	}
	e.i32(int32(n))
}

func (e *encoder) offsets(o []int64) {
	e.count(len(o))
	for _, x := range o {
		e.i64(x)
	}
}

func (e *encoder) metadata() error {
	m := e.m
	switch {
	case e.v < 2 || e.v > 6:
		return fmt.Errorf("flinkmeta encode: format version %d not supported (2–6)", e.v)
	case e.v != 3 && (m.Layout.Flink111Channels || m.Layout.Flink114Changelog):
		return fmt.Errorf("flinkmeta encode: layout variants exist only in format version 3, not %d", e.v)
	case e.v >= 4 && m.Properties == nil:
		return fmt.Errorf("flinkmeta encode: format version %d needs Properties (use &Properties{Null: true} for a null trailer)", e.v)
	case e.v < 4 && m.Properties != nil:
		return fmt.Errorf("flinkmeta encode: format version %d has no properties trailer", e.v)
	case m.CheckpointID < 0:
		return fmt.Errorf("flinkmeta encode: negative checkpoint id %d", m.CheckpointID)
	}
	e.b = make([]byte, 0, 4096)
	e.i32(Magic)
	e.i32(int32(e.v))
	e.i64(m.CheckpointID)
	e.count(len(m.MasterStates))
	for i := range m.MasterStates {
		e.master(&m.MasterStates[i])
	}
	e.count(len(m.Operators))
	for i := range m.Operators {
		e.operator(&m.Operators[i])
	}
	if e.v >= 4 {
		e.b = appendProperties(e.b, m.Properties)
	}
	return e.err
}

func (e *encoder) master(ms *MasterState) {
	if int64(len(ms.Payload)) != ms.PayloadLen {
		e.fail("master state %q: payload has %d bytes, PayloadLen says %d (parse with KeepInline to re-encode)", ms.Name, len(ms.Payload), ms.PayloadLen)
		return
	}
	e.i32(masterStateMagic)
	lenAt := len(e.b)
	e.i32(0)
	e.i32(ms.Version)
	e.str(ms.Name)
	e.count(len(ms.Payload))
	e.b = append(e.b, ms.Payload...)
	binary.BigEndian.PutUint32(e.b[lenAt:], uint32(len(e.b)-lenAt-4))
}

func (e *encoder) operator(op *OperatorState) {
	if e.v >= 5 {
		e.str(op.Name)
		e.str(op.UID)
	} else if op.Name != "" || op.UID != "" {
		e.fail("operator %s: name/uid exist only in format version 5+", op.ID)
	}
	e.b = append(e.b, op.ID[:]...)
	e.i32(op.Parallelism)
	e.i32(op.MaxParallelism)
	if e.v == 2 {
		e.i32(op.ChainLength)
		e.count(len(op.Subtasks))
		for i := range op.Subtasks {
			st := &op.Subtasks[i]
			if st.Finished || st.Index < 0 {
				e.fail("operator %s: finished subtasks do not exist in format version 2", op.ID)
			}
			e.i32(st.Index)
			e.i64(st.Duration)
			e.count(len(st.Legacy))
			for j := range st.Legacy {
				e.stream(&st.Legacy[j], 0)
			}
			e.common(st)
		}
		return
	}
	if op.ChainLength != 0 {
		e.fail("operator %s: chain length exists only in format version 2", op.ID)
	}
	if c := op.Coordinator.Code; c != StreamNull && c != StreamByteStream {
		e.fail("operator %s: coordinator state must be null or ByteStream, not code %d", op.ID, c)
	}
	e.stream(&op.Coordinator, 0)
	if op.FullyFinished {
		if len(op.Subtasks) != 0 || op.Coordinator.Code != StreamNull {
			e.fail("operator %s: a fully finished operator has no subtasks and no coordinator state", op.ID)
		}
		e.i32(-1)
		return
	}
	e.count(len(op.Subtasks))
	for i := range op.Subtasks {
		st := &op.Subtasks[i]
		if st.Finished {
			if st.Index < 0 {
				e.fail("operator %s: negative subtask index %d", op.ID, st.Index)
			}
			e.i32(-st.Index - 1)
			continue
		}
		if st.Index < 0 {
			e.fail("operator %s: negative subtask index %d", op.ID, st.Index)
		}
		if st.Duration != 0 || len(st.Legacy) != 0 {
			e.fail("operator %s: duration/legacy state exist only in format version 2", op.ID)
		}
		e.i32(st.Index)
		e.common(st)
		e.channels(st.InputChannels, ChannelInput)
		e.channels(st.ResultSubparts, ChannelResultSubpartition)
	}
}

func (e *encoder) common(st *SubtaskState) {
	for _, h := range []*OperatorHandle{st.ManagedOperator, st.RawOperator} {
		if h == nil {
			e.i32(0)
			continue
		}
		e.i32(1)
		e.operatorHandle(h)
	}
	e.keyed(&st.ManagedKeyed, 0)
	e.keyed(&st.RawKeyed, 0)
}

func (e *encoder) stream(h *StreamHandle, depth int) {
	if depth > maxDepth {
		e.fail("handles nested deeper than %d", maxDepth)
		return
	}
	e.u8(h.Code)
	switch h.Code {
	case StreamNull:
	case StreamByteStream:
		if int64(len(h.Data)) != h.Size {
			e.fail("ByteStream %q: %d data bytes but Size %d (parse with KeepInline to re-encode)", h.Path, len(h.Data), h.Size)
			return
		}
		e.str(h.Path)
		e.count(len(h.Data))
		e.b = append(e.b, h.Data...)
	case StreamFile:
		e.i64(h.Size)
		e.str(h.Path)
	case StreamRelativeFile:
		e.str(h.Path)
		e.i64(h.Size)
	case StreamKeyGroups:
		if h.KeyGroups == nil {
			e.fail("stream code 3 without KeyGroups")
			return
		}
		kg := h.KeyGroups
		e.i32(kg.Start)
		e.offsetsN(kg.Num, kg.Offsets)
		e.stream(&kg.Delegate, depth+1)
	case StreamSegmentFile:
		if h.Scope > 1 {
			e.fail("segment scope %d not in {0,1}", h.Scope)
		}
		e.i64(h.Offset)
		e.i64(h.Size)
		e.i32(int32(h.Scope))
		e.str(h.Path)
		e.str(h.LogicalFileID)
	case StreamEmptySegmentFile:
	default:
		e.fail("unknown stream handle code %d", h.Code)
	}
}

// offsetsN writes "i32 num, i64 × num" for key-group ranges, where num must equal len(offsets).
func (e *encoder) offsetsN(num int32, o []int64) {
	if int(num) != len(o) {
		e.fail("key-group range of %d groups has %d offsets", num, len(o))
	}
	e.offsets(o)
}

func (e *encoder) operatorHandle(h *OperatorHandle) {
	e.u8(h.Code)
	switch h.Code {
	case OperatorNull:
		return
	case OperatorStream, OperatorFileMerging:
	default:
		e.fail("unknown operator handle code %d", h.Code)
		return
	}
	e.count(len(h.States))
	for i := range h.States {
		s := &h.States[i]
		if s.Mode > Broadcast {
			e.fail("operator state %q: distribution mode %d not in {0,1,2}", s.Name, s.Mode)
		}
		e.str(s.Name)
		e.u8(s.Mode)
		e.offsets(s.Offsets)
	}
	if h.Code == OperatorFileMerging {
		if c := h.Delegate.Code; c != StreamSegmentFile && c != StreamEmptySegmentFile {
			e.fail("operator handle 17 delegate must be code 15 or 16, not %d", c)
		}
		e.str(h.TaskOwnedDir)
		e.str(h.SharedDir)
		e.boolean(h.Empty)
	}
	e.stream(&h.Delegate, 1)
}

func (e *encoder) keyed(h *KeyedHandle, depth int) {
	if depth > maxDepth {
		e.fail("handles nested deeper than %d", maxDepth)
		return
	}
	short := e.m.Layout.Flink114Changelog
	e.u8(h.Code)
	switch h.Code {
	case KeyedNull:
	case KeyedKeyGroups, KeyedKeyGroupsV2, KeyedKeyGroupsSavepoint:
		e.i32(h.Start)
		e.offsetsN(h.Num, h.Offsets)
		e.stream(&h.Delegate, depth+1)
		if h.Code == KeyedKeyGroupsV2 {
			e.str(h.HandleID)
		}
	case KeyedIncremental, KeyedIncrementalV2:
		e.i64(h.CheckpointID)
		e.str(h.BackendID)
		e.i32(h.Start)
		e.i32(h.Num)
		if h.Code == KeyedIncrementalV2 {
			e.i64(h.CheckpointedSize)
		}
		e.stream(&h.Meta, depth+1)
		e.named(h.Shared, depth)
		e.named(h.Private, depth)
		if h.Code == KeyedIncrementalV2 {
			e.str(h.HandleID)
		}
	case KeyedChangelog, KeyedChangelogV2:
		e.i32(h.Start)
		e.i32(h.Num)
		long := h.Code == KeyedChangelogV2 || !short
		if long {
			e.i64(h.CheckpointedSize)
		}
		e.count(len(h.Materialized))
		for i := range h.Materialized {
			e.keyed(&h.Materialized[i], depth+1)
		}
		e.count(len(h.NonMaterialized))
		for i := range h.NonMaterialized {
			e.keyed(&h.NonMaterialized[i], depth+1)
		}
		if long {
			e.i64(h.MaterializationID)
			if h.Code == KeyedChangelogV2 {
				e.i64(h.CheckpointID)
			}
			e.str(h.HandleID)
		}
	case KeyedInMemoryChangelog:
		e.i32(h.Start)
		e.i32(h.Num)
		e.i64(h.FromSeq)
		e.i64(h.ToSeq)
		e.count(len(h.Changes))
		for i := range h.Changes {
			c := &h.Changes[i]
			if int64(len(c.Data)) != c.Len {
				e.fail("in-memory changelog change: %d data bytes but Len %d (parse with KeepInline to re-encode)", len(c.Data), c.Len)
				return
			}
			e.i32(c.KeyGroup)
			e.count(len(c.Data))
			e.b = append(e.b, c.Data...)
		}
		if !short {
			e.str(h.HandleID)
		}
	case KeyedChangelogFile, KeyedChangelogFileV2:
		e.i32(h.Start)
		e.i32(h.Num)
		e.count(len(h.Files))
		for i := range h.Files {
			e.i64(h.Files[i].Offset)
			e.stream(&h.Files[i].Handle, depth+1)
		}
		e.i64(h.StateSize)
		if h.Code == KeyedChangelogFileV2 || !short {
			e.i64(h.CheckpointedSize)
			e.str(h.HandleID)
		}
		if h.Code == KeyedChangelogFileV2 {
			e.str(h.StorageID)
		}
	default:
		e.fail("unknown keyed handle code %d", h.Code)
	}
}

func (e *encoder) named(list []NamedHandle, depth int) {
	e.count(len(list))
	for i := range list {
		e.str(list[i].LocalPath)
		e.stream(&list[i].Handle, depth+1)
	}
}

func (e *encoder) channels(list []ChannelHandle, plainCode uint8) {
	e.count(len(list))
	mergedCode := plainCode + 2
	for i := range list {
		h := &list[i]
		if h.Code != plainCode && (e.v < 6 || h.Code != mergedCode) {
			e.fail("channel handle code %d not valid in this list for format version %d", h.Code, e.v)
			return
		}
		if e.v >= 6 {
			e.u8(h.Code)
		}
		if h.Code == mergedCode {
			e.i32(h.SubtaskIndex)
			e.i64(h.StateSize)
			e.stream(&h.Delegate, 1)
			lenAt := len(e.b)
			e.i32(0)
			e.count(len(h.Merged))
			for j := range h.Merged {
				c := &h.Merged[j]
				e.i32(c.A)
				e.i32(c.B)
				e.i64(c.StateSize)
				e.offsets(c.Offsets)
			}
			binary.BigEndian.PutUint32(e.b[lenAt:], uint32(len(e.b)-lenAt-4))
			continue
		}
		if e.m.Layout.Flink111Channels {
			if h.SubtaskIndex != 0 {
				e.fail("the Flink 1.11 channel layout has no subtask index (got %d)", h.SubtaskIndex)
			}
		} else {
			e.i32(h.SubtaskIndex)
		}
		e.i32(h.A)
		e.i32(h.B)
		e.offsets(h.Offsets)
		e.i64(h.StateSize)
		e.stream(&h.Delegate, 1)
		if len(h.Merged) != 0 {
			e.fail("plain channel handle with merged channels")
		}
	}
}
