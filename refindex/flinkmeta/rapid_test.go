package flinkmeta

import (
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// gen draws random but grammatical Metadata for one format version and layout, in the canonical
// form Parse returns (nil for empty slices, derived Kind, …).
type gen struct {
	t      *rapid.T
	v      int
	layout Layout
}

func (g gen) i32(label string) int32 { return rapid.Int32().Draw(g.t, label) }
func (g gen) i64(label string) int64 { return rapid.Int64().Draw(g.t, label) }
func (g gen) str(label string) string {
	return rapid.StringN(0, 12, -1).Draw(g.t, label)
}
func (g gen) n(label string, max int) int { return rapid.IntRange(0, max).Draw(g.t, label) }

func (g gen) data(label string) []byte {
	b := rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(g.t, label)
	if len(b) == 0 {
		return nil
	}
	return b
}

func (g gen) offsets(label string) []int64 {
	n := g.n(label+"#", 3)
	if n == 0 {
		return nil
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = g.i64(label)
	}
	return out
}

func (g gen) stream(depth int) StreamHandle {
	codes := []uint8{0, 1, 2, 6, 15, 16}
	if depth < 3 && !g.layout.Flink111Channels {
		codes = append(codes, 3)
	}
	h := StreamHandle{Code: rapid.SampledFrom(codes).Draw(g.t, "stream code")}
	switch h.Code {
	case StreamByteStream:
		h.Path, h.Data = g.str("bs name"), g.data("bs data")
		h.Size = int64(len(h.Data))
	case StreamFile:
		h.Path = rapid.SampledFrom([]string{"s3://b/k", "s3a://b/shared/x", "hdfs://nn:8020/f/shared/y", "file:/tmp/z", "/abs/p", "s3://b/ünï/😀"}).Draw(g.t, "uri") + g.str("suffix")
		h.Size = g.i64("size")
	case StreamRelativeFile:
		h.Path = rapid.StringMatching(`[A-Za-z0-9_-]{1,20}`).Draw(g.t, "rel")
		h.Size = g.i64("size")
	case StreamSegmentFile:
		h.Path, h.Offset, h.Size = "s3://b/seg/"+g.str("seg"), g.i64("off"), g.i64("size")
		h.Scope = uint8(g.n("scope", 1))
		h.LogicalFileID = g.str("lid")
	case StreamKeyGroups:
		kg := &KeyGroupsInStream{Start: g.i32("start"), Offsets: g.offsets("kg")}
		kg.Num = int32(len(kg.Offsets))
		kg.Delegate = g.stream(depth + 1)
		h.KeyGroups = kg
	}
	return h
}

func (g gen) named(depth int) []NamedHandle {
	n := g.n("named", 3)
	if n == 0 {
		return nil
	}
	out := make([]NamedHandle, n)
	for i := range out {
		out[i] = NamedHandle{LocalPath: g.str("local"), Handle: g.stream(depth + 1)}
	}
	return out
}

func (g gen) keyed(depth int, allowed []uint8) KeyedHandle {
	var codes []uint8
	for _, c := range allowed {
		switch {
		case g.layout.Flink111Channels && c != 0 && c != KeyedKeyGroups && c != KeyedIncremental:
		case g.layout.Flink114Changelog && (c == KeyedIncrementalV2 || c >= KeyedKeyGroupsV2):
		case depth >= 2 && (c == KeyedChangelog || c == KeyedChangelogV2):
		default:
			codes = append(codes, c)
		}
	}
	h := KeyedHandle{Code: rapid.SampledFrom(codes).Draw(g.t, "keyed code")}
	short := g.layout.Flink114Changelog
	switch h.Code {
	case KeyedNull:
		return h
	case KeyedKeyGroups, KeyedKeyGroupsV2, KeyedKeyGroupsSavepoint:
		h.Start, h.Offsets = g.i32("start"), g.offsets("kg")
		h.Num = int32(len(h.Offsets))
		h.Delegate = g.stream(depth + 1)
		if h.Code == KeyedKeyGroupsV2 {
			h.HandleID = g.str("id")
		}
		return h
	}
	h.Start, h.Num = g.i32("start"), int32(g.n("num", 1<<20))
	switch h.Code {
	case KeyedIncremental, KeyedIncrementalV2:
		h.CheckpointID, h.BackendID = g.i64("cid"), g.str("backend")
		h.Meta, h.Shared, h.Private = g.stream(depth+1), g.named(depth), g.named(depth)
		if h.Code == KeyedIncrementalV2 {
			h.CheckpointedSize, h.HandleID = g.i64("cs"), g.str("id")
		}
	case KeyedChangelog, KeyedChangelogV2:
		for i := g.n("mat", 2); i > 0; i-- {
			h.Materialized = append(h.Materialized, g.keyed(depth+1, []uint8{0, 3, 5, 7, 11, 12}))
		}
		for i := g.n("nonmat", 2); i > 0; i-- {
			h.NonMaterialized = append(h.NonMaterialized, g.keyed(depth+1, []uint8{0, 9, 10, 13}))
		}
		if h.Code == KeyedChangelogV2 || !short {
			h.CheckpointedSize, h.MaterializationID, h.HandleID = g.i64("cs"), g.i64("mid"), g.str("id")
		}
		if h.Code == KeyedChangelogV2 {
			h.CheckpointID = g.i64("cid")
		}
	case KeyedInMemoryChangelog:
		h.FromSeq, h.ToSeq = g.i64("from"), g.i64("to")
		for i := g.n("changes", 2); i > 0; i-- {
			c := Change{KeyGroup: g.i32("kg"), Data: g.data("change")}
			c.Len = int64(len(c.Data))
			h.Changes = append(h.Changes, c)
		}
		if !short {
			h.HandleID = g.str("id")
		}
	case KeyedChangelogFile, KeyedChangelogFileV2:
		for i := g.n("files", 2); i > 0; i-- {
			h.Files = append(h.Files, OffsetHandle{Offset: g.i64("off"), Handle: g.stream(depth + 1)})
		}
		h.StateSize = g.i64("ss")
		if h.Code == KeyedChangelogFileV2 || !short {
			h.CheckpointedSize, h.HandleID = g.i64("cs"), g.str("id")
		}
		if h.Code == KeyedChangelogFileV2 {
			h.StorageID = g.str("storage")
		}
	}
	return h
}

func (g gen) operatorHandle() *OperatorHandle {
	switch g.n("has op", 2) {
	case 0:
		return nil
	case 1:
		return &OperatorHandle{}
	}
	h := &OperatorHandle{Code: rapid.SampledFrom([]uint8{4, 17}).Draw(g.t, "op code")}
	for i := g.n("states", 2); i > 0; i-- {
		h.States = append(h.States, OperatorStateMeta{Name: g.str("state"), Mode: uint8(g.n("mode", 2)), Offsets: g.offsets("po")})
	}
	if h.Code == OperatorFileMerging {
		h.TaskOwnedDir, h.SharedDir, h.Empty = "s3://b/taskowned/"+g.str("d"), "s3://b/shared/"+g.str("d"), rapid.Bool().Draw(g.t, "empty")
		h.Delegate = StreamHandle{Code: StreamEmptySegmentFile}
		if rapid.Bool().Draw(g.t, "seg") {
			h.Delegate = StreamHandle{Code: StreamSegmentFile, Path: "s3://b/seg", Offset: g.i64("o"), Size: g.i64("s"), LogicalFileID: g.str("l")}
		}
		return h
	}
	h.Delegate = g.stream(1)
	return h
}

func (g gen) channels(plain uint8) []ChannelHandle {
	var out []ChannelHandle
	for i := g.n("channels", 2); i > 0; i-- {
		h := ChannelHandle{Code: plain}
		if g.v >= 6 && rapid.Bool().Draw(g.t, "merged") {
			h.Code = plain + 2
			h.SubtaskIndex, h.StateSize, h.Delegate = g.i32("sub"), g.i64("size"), g.stream(1)
			for j := g.n("merged", 2); j > 0; j-- {
				h.Merged = append(h.Merged, MergedChannel{A: g.i32("a"), B: g.i32("b"), StateSize: g.i64("s"), Offsets: g.offsets("mo")})
			}
		} else {
			if !g.layout.Flink111Channels {
				h.SubtaskIndex = g.i32("sub")
			}
			h.A, h.B, h.Offsets, h.StateSize, h.Delegate = g.i32("a"), g.i32("b"), g.offsets("co"), g.i64("size"), g.stream(1)
		}
		out = append(out, h)
	}
	return out
}

func (g gen) metadata() *Metadata {
	m := &Metadata{FormatVersion: g.v, CheckpointID: rapid.Int64Min(0).Draw(g.t, "ckpt"), Layout: g.layout}
	for i := g.n("masters", 2); i > 0; i-- {
		ms := MasterState{Version: g.i32("hv"), Name: g.str("hook"), Payload: g.data("payload")}
		ms.PayloadLen = int64(len(ms.Payload))
		m.MasterStates = append(m.MasterStates, ms)
	}
	allKeyed := []uint8{0, 3, 5, 7, 8, 9, 10, 11, 12, 13, 14}
	for i := g.n("operators", 3); i > 0; i-- {
		op := OperatorState{Parallelism: g.i32("p"), MaxParallelism: g.i32("mp")}
		copy(op.ID[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(g.t, "id"))
		if g.v >= 5 {
			op.Name, op.UID = g.str("name"), g.str("uid")
		}
		if g.v == 2 {
			op.ChainLength = g.i32("chain")
		} else if !g.layout.Flink111Channels && g.n("finished op", 4) == 0 {
			op.FullyFinished = true
			m.Operators = append(m.Operators, op)
			continue
		} else if rapid.Bool().Draw(g.t, "coord") {
			op.Coordinator = StreamHandle{Code: StreamByteStream, Path: g.str("c"), Data: g.data("cd")}
			op.Coordinator.Size = int64(len(op.Coordinator.Data))
		}
		for j := g.n("subtasks", 3); j > 0; j-- {
			st := SubtaskState{Index: rapid.Int32Range(0, 1<<30).Draw(g.t, "idx")}
			if g.v > 2 && !g.layout.Flink111Channels && g.n("finished", 3) == 0 {
				st.Finished = true
				op.Subtasks = append(op.Subtasks, st)
				continue
			}
			if g.v == 2 {
				st.Duration = g.i64("dur")
				for k := g.n("legacy", 1); k > 0; k-- {
					st.Legacy = append(st.Legacy, g.stream(0))
				}
			}
			st.ManagedOperator, st.RawOperator = g.operatorHandle(), g.operatorHandle()
			st.ManagedKeyed, st.RawKeyed = g.keyed(0, allKeyed), g.keyed(0, allKeyed)
			if g.v >= 3 {
				st.InputChannels, st.ResultSubparts = g.channels(ChannelInput), g.channels(ChannelResultSubpartition)
			}
			op.Subtasks = append(op.Subtasks, st)
		}
		m.Operators = append(m.Operators, op)
	}
	if g.v >= 4 {
		p := &Properties{}
		if rapid.Bool().Draw(g.t, "null props") {
			p.Null = true
		} else {
			p.DiscardCancelled, p.DiscardFailed, p.DiscardFinished = rapid.Bool().Draw(g.t, "d1"), rapid.Bool().Draw(g.t, "d2"), rapid.Bool().Draw(g.t, "d3")
			p.DiscardSubsumed, p.DiscardSuspended, p.Forced, p.Unclaimed = rapid.Bool().Draw(g.t, "d4"), rapid.Bool().Draw(g.t, "d5"), rapid.Bool().Draw(g.t, "f"), rapid.Bool().Draw(g.t, "u")
			p.TypeName, p.TypeSerialVersionUID = g.str("type name"), g.i64("uid")
			if p.Savepoint = rapid.Bool().Draw(g.t, "savepoint"); p.Savepoint {
				p.FormatType = rapid.SampledFrom([]string{"CANONICAL", "NATIVE", "FUTURE"}).Draw(g.t, "fmt")
				p.PostCheckpointAction = rapid.SampledFrom([]string{"NONE", "SUSPEND", "TERMINATE"}).Draw(g.t, "post")
			} else {
				p.SharingStrategy = rapid.SampledFrom([]string{"FORWARD_BACKWARD", "FORWARD", "NO_SHARING"}).Draw(g.t, "sharing")
			}
		}
		m.Properties = p
	}
	m.Kind, m.SavepointFormat = deriveKind(m, "x/_metadata")
	return m
}

// TestRapidRoundTrip: Parse(Encode(m)) deep-equals m for random metadata of every version and
// layout variant.
func TestRapidRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := rapid.IntRange(2, 6).Draw(t, "version")
		var l Layout
		if v == 3 {
			l = Layout{Flink111Channels: rapid.Bool().Draw(t, "111"), Flink114Changelog: rapid.Bool().Draw(t, "114")}
		}
		m := gen{t: t, v: v, layout: l}.metadata()
		b, err := Encode(m)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		got, err := ParseBytes(b, "x/_metadata", Options{KeepInline: true})
		if err != nil {
			if l != (Layout{}) {
				return // the bytes are also (differently) readable under another layout: §8 fails closed
			}
			t.Fatalf("parse: %v", err)
		}
		if got.Layout != l {
			// Another layout reads the same bytes with the same references and was tried first:
			// an inherent ambiguity of version 3, resolved as §8 prescribes.
			if refSet(got) != refSet(m) {
				t.Fatalf("layout %v chosen over %v with different references", got.Layout, l)
			}
			return
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("parse(encode(m)) != m\n got %+v\nwant %+v", got, m)
		}
	})
}
