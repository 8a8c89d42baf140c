package flinkmeta

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// richSubtask builds one subtask using every handle family valid in format version v.
func richSubtask(v int, idx int32) SubtaskState {
	seed := fmt.Sprintf("st%d", idx)
	st := SubtaskState{Index: idx}
	start, num := KeyGroupRange(128, 4, idx)
	switch {
	case v == 2:
		st.Legacy = []StreamHandle{File("hdfs://nn:8020/flink/legacy-"+seed, 10)}
		st.ManagedOperator = OperatorStateHandle(File("file:/tmp/flink/op-"+seed, 300), "a", "b")
		kg := KeyGroups(start, num, File("s3://bucket/job/chk-7/kg-"+seed, 512))
		kg.Code, kg.HandleID = KeyedKeyGroups, ""
		st.ManagedKeyed = kg
		st.RawKeyed = IncrementalV1(Incremental(7, start, num, Inline("file:/x/meta", []byte("meta")),
			SSTs("s3://bucket/job/shared", seed, 3, 1000), RelativeFilesV2Safe(seed)))
		return st
	default:
		st.ManagedOperator = OperatorStateHandle(Relative(UUID(seed+"op"), 281), "source-state")
		st.RawOperator = FileMergingOperatorHandle("s3://b/job/taskowned/tm_1", "s3://b/job/shared/job_op_"+seed,
			Segment("s3://b/job/shared/job_op_"+seed+"/"+UUID(seed+"seg"), 100, 50, true), "raw")
		st.ManagedKeyed = Incremental(7, start, num, Relative(UUID(seed+"meta"), 77),
			append(SSTs("s3://bucket/job/shared", seed, 2, 1000), append(SSTs("hdfs://nn:8020/flink/shared", seed+"h", 1, 2000),
				append(SSTs("file:/tmp/flink/shared", seed+"f", 1, 3000),
					NamedHandle{LocalPath: "000099.sst", Handle: Segment("s3://b/job/shared/seg-"+seed, 0, 4096, true)},
					NamedHandle{LocalPath: "000100.sst", Handle: EmptySegment()},
					NamedHandle{LocalPath: "000101.sst", Handle: Inline("file:/tmp/inline-"+seed, []byte{1, 2, 3})})...)...),
			RelativeFiles(seed, "MANIFEST-000004", "OPTIONS-000009", "CURRENT"))
		st.RawKeyed = Changelog(7, 3, start, num,
			[]KeyedHandle{KeyGroups(start, num, KeyGroupsInStreamHandle(start, num, File("s3://bucket/job/kgs-"+seed, 900)))},
			[]KeyedHandle{
				ChangelogFiles(start, num, OffsetHandle{0, File("s3://dstl/base/"+UUID(seed+"d1"), 700)}, OffsetHandle{700, File("s3://dstl/base/"+UUID(seed+"d2"), 800)}),
				InMemoryChangelog(start, num, 1, 9, Change{KeyGroup: start, Data: []byte("chg")}, Change{KeyGroup: -1}),
			})
		if v == 3 {
			// Flink 1.15 writes KeyGroupsSavepoint (7) and incremental v1 (5) only in other jobs,
			// but the grammar allows mixing; changelog 14/13 are 1.16+ so use the 1.15 codes here.
			st.RawKeyed.Code = KeyedChangelog
			st.RawKeyed.NonMaterialized[0].Code = KeyedChangelogFile
			st.RawKeyed.NonMaterialized[0].StorageID = ""
			st.RawKeyed.CheckpointID = 0
		}
	}
	delegate := Relative(UUID(seed+"chan"), 4096)
	if v >= 6 {
		st.InputChannels = []ChannelHandle{MergedChannels(true, idx, delegate,
			MergedChannel{A: 0, B: 1, StateSize: 100, Offsets: []int64{0, 50}}, MergedChannel{A: 0, B: 2, StateSize: 10, Offsets: []int64{100}}),
			Channel(true, idx, 1, 0, 20, File("s3://bucket/job/chk-7/chan-"+seed, 20), 0)}
		st.ResultSubparts = []ChannelHandle{MergedChannels(false, idx, delegate, MergedChannel{A: 0, B: 0, StateSize: 5, Offsets: []int64{200}}),
			Channel(false, idx, 0, 3, 30, delegate, 300)}
	} else {
		st.InputChannels = []ChannelHandle{Channel(true, idx, 0, 1, 100, delegate, 0, 50)}
		st.ResultSubparts = []ChannelHandle{Channel(false, idx, 0, 0, 5, delegate, 200)}
	}
	return st
}

// RelativeFilesV2Safe: V2 never contains relative handles (§9.2), so use absolute private files.
func RelativeFilesV2Safe(seed string) []NamedHandle {
	return []NamedHandle{{LocalPath: "MANIFEST-000001", Handle: File("file:/tmp/flink/chk-7/"+UUID(seed), 10)}}
}

func richMetadata(v int) *Metadata {
	m := NewCheckpoint(v, 7, true)
	m.MasterStates = []MasterState{{Version: 1, Name: "hook", PayloadLen: 3, Payload: []byte{9, 8, 7}}}
	for o := 0; o < 3; o++ {
		op := NewOperator(ID(fmt.Sprint(o)), fmt.Sprintf("Map %d", o), fmt.Sprintf("uid-%d", o), 4, 128)
		for i := int32(0); i < 2; i++ {
			op.Subtasks = append(op.Subtasks, richSubtask(v, i))
		}
		if v >= 3 {
			op.Coordinator = Inline("coordinator", []byte("coord"))
			op.Subtasks = append(op.Subtasks, SubtaskState{Index: 3, Finished: true})
		}
		op.ForVersion(v)
		m.Operators = append(m.Operators, op)
	}
	if v >= 3 {
		fin := NewOperator(ID("finished"), "Sink", "", 1, 1)
		fin.FullyFinished = true
		fin.ForVersion(v)
		m.Operators = append(m.Operators, fin)
	}
	return m
}

func roundTrip(t *testing.T, m *Metadata, name string) *Metadata {
	t.Helper()
	b, err := Encode(m)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	got, err := ParseBytes(b, name, Options{KeepInline: true})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("parse(encode(m)) != m\n got: %+v\nwant: %+v", got, m)
	}
	return got
}

func TestEncodeRoundTripAllCodes(t *testing.T) {
	for v := 2; v <= 6; v++ {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			m := richMetadata(v)
			if v <= 3 {
				m.Kind = "checkpoint"
			}
			got := roundTrip(t, m, "s3://bucket/job/chk-7/_metadata")
			counts := got.HandleCounts()
			wantCodes := []string{"FileStateHandle", "OperatorStreamStateHandle"}
			if v >= 3 {
				wantCodes = append(wantCodes, "SegmentFileStateHandle", "EmptySegmentFileStateHandle", "FileMergingOperatorStreamStateHandle",
					"KeyGroupsStateHandle(stream)", "InMemoryChangelogStateHandle", "RelativeFileStateHandle")
			}
			if v >= 4 {
				wantCodes = append(wantCodes, "ChangelogStateBackendHandleV2", "ChangelogStateHandleStreamImplV2")
			}
			if v >= 6 {
				wantCodes = append(wantCodes, "MergedInputChannelStateHandle", "MergedResultSubpartitionStateHandle", "InputChannelStateHandle")
			}
			for _, c := range wantCodes {
				if counts[c] == 0 {
					t.Errorf("no %s in %v", c, counts)
				}
			}
		})
	}
}

func TestReferencesOfBuiltCheckpoint(t *testing.T) {
	m := richMetadata(6)
	refs := m.References("s3://bucket/job/chk-7/_metadata")
	byKind := map[RefKind]int{}
	byState := map[string]int{}
	seen := map[string]bool{}
	for _, r := range refs {
		byKind[r.Kind]++
		byState[r.StateKind]++
		key := fmt.Sprintf("%s|%s|%d|%d", r.Kind, r.Resolved, r.Offset, r.Length)
		if seen[key] {
			t.Errorf("duplicate reference %s", key)
		}
		seen[key] = true
		if strings.Contains(r.URI, "inline") || r.URI == "coordinator" {
			t.Errorf("inline handle name %q listed as a reference", r.URI)
		}
		if len(r.OperatorID) != 32 {
			t.Errorf("operator id %q", r.OperatorID)
		}
		switch r.Kind {
		case RefRelative:
			if r.Resolved != "s3://bucket/job/chk-7/"+r.URI {
				t.Errorf("relative %s resolved to %s", r.URI, r.Resolved)
			}
		case RefSegment:
			if r.Length <= 0 {
				t.Errorf("segment without length: %+v", r)
			}
		default:
			if r.Resolved != r.URI || r.Offset != 0 || r.Length != 0 {
				t.Errorf("absolute reference rewritten: %+v", r)
			}
		}
	}
	for _, prefix := range []string{"s3://bucket/job/shared/", "hdfs://nn:8020/flink/shared/", "file:/tmp/flink/shared/", "s3://dstl/base/", "s3://b/job/taskowned/tm_1"} {
		found := false
		for _, r := range refs {
			found = found || strings.HasPrefix(r.URI, prefix)
		}
		if !found {
			t.Errorf("no reference under %s", prefix)
		}
	}
	for _, k := range []RefKind{RefFile, RefRelative, RefSegment, RefDirectory} {
		if byKind[k] == 0 {
			t.Errorf("no %s reference: %v", k, byKind)
		}
	}
	for _, s := range []string{StateKeyedShared, StateKeyedPrivate, StateKeyedMeta, StateChangelog, StateInputChannel, StateManagedOperator, StateRawOperator, StateRawKeyed} {
		if byState[s] == 0 {
			t.Errorf("no %s reference: %v", s, byState)
		}
	}
	// 3 operators × 2 subtasks: 4 distinct SST files each; directories: 1 task-owned + 2 shared.
	if n := byKind[RefDirectory]; n != 1+2 {
		t.Errorf("%d directory references, want 3", n)
	}
	if m.InlineBytes() == 0 {
		t.Error("inline bytes not counted")
	}
}

func TestSavepointAndNullTrailer(t *testing.T) {
	for _, native := range []bool{false, true} {
		m := NewSavepoint(5, 3, native)
		got := roundTrip(t, m, "sp/savepoint-abcdef-0123456789ab/_metadata")
		if got.Kind != "savepoint" || got.SavepointFormat != map[bool]string{false: "canonical", true: "native"}[native] {
			t.Errorf("kind %s/%s", got.Kind, got.SavepointFormat)
		}
	}
	m := &Metadata{FormatVersion: 4, Kind: "unknown", Properties: &Properties{Null: true}}
	b := roundTrip(t, m, "x/_metadata")
	_ = b
	enc, _ := Encode(m)
	if tail := enc[len(enc)-5:]; string(tail) != "\xac\xed\x00\x05\x70" {
		t.Errorf("null trailer %x", tail)
	}
	cp := roundTrip(t, NewCheckpoint(6, 9, false), "x/chk-9/_metadata")
	if cp.Kind != "checkpoint" || !cp.Properties.DiscardCancelled {
		t.Errorf("checkpoint properties %+v", cp.Properties)
	}
	// V2/V3 kind comes from the directory name.
	for name, kind := range map[string]string{"a/chk-12/_metadata": "checkpoint", "a/savepoint-abcdef-0123456789ab/_metadata": "savepoint", "a/b/_metadata": "unknown", "_metadata": "unknown"} {
		b, _ := Encode(NewCheckpoint(3, 1, true))
		got, err := ParseBytes(b, name, Options{})
		if err != nil || got.Kind != kind {
			t.Errorf("%s: kind %q err %v, want %s", name, got.Kind, err, kind)
		}
	}
}

// TestLayoutVariants: the Flink 1.11 channel layout and the Flink 1.14 changelog layouts are
// detected from the bytes alone (§8).
func TestLayoutVariants(t *testing.T) {
	d := Relative(UUID("chan"), 100)
	v111 := NewCheckpoint(3, 5, true)
	v111.Kind = "checkpoint"
	v111.Layout = Layout{Flink111Channels: true}
	op := NewOperator(ID("a"), "", "", 2, 128)
	st := SubtaskState{Index: 0, ManagedKeyed: IncrementalV1(Incremental(5, 0, 64, Relative(UUID("m"), 5), nil, RelativeFiles("p", "CURRENT")))}
	st.InputChannels = []ChannelHandle{Channel(true, 0, 0, 1, 100, d, 0, 40), Channel(true, 0, 0, 2, 10, d, 90)}
	st.ResultSubparts = []ChannelHandle{Channel(false, 0, 0, 0, 10, d, 0)}
	op.Subtasks = []SubtaskState{st}
	v111.Operators = []OperatorState{op}
	got := roundTrip(t, v111, "x/chk-5/_metadata")
	if got.Layout != (Layout{Flink111Channels: true}) {
		t.Errorf("layout %v", got.Layout)
	}

	v114 := NewCheckpoint(3, 6, true)
	v114.Kind = "checkpoint"
	v114.Layout = Layout{Flink114Changelog: true}
	op = NewOperator(ID("b"), "", "", 1, 128)
	files := ChangelogFiles(0, 128, OffsetHandle{0, File("s3://dstl/1", 10)}, OffsetHandle{10, File("s3://dstl/2", 20)})
	files.Code, files.CheckpointedSize, files.HandleID, files.StorageID = KeyedChangelogFile, 0, "", ""
	mem := InMemoryChangelog(0, 128, 1, 2, Change{KeyGroup: 3, Data: []byte("x")})
	mem.HandleID = ""
	mat := IncrementalV1(Incremental(6, 0, 128, Relative(UUID("meta"), 5), SSTs("s3://b/shared", "x", 2, 10), nil))
	cl := KeyedHandle{Code: KeyedChangelog, Start: 0, Num: 128, Materialized: []KeyedHandle{mat}, NonMaterialized: []KeyedHandle{files, mem}}
	op.Subtasks = []SubtaskState{{Index: 0, ManagedKeyed: cl}}
	v114.Operators = []OperatorState{op}
	got = roundTrip(t, v114, "x/chk-6/_metadata")
	if got.Layout != (Layout{Flink114Changelog: true}) {
		t.Errorf("layout %v", got.Layout)
	}
	if len(got.References("")) != 4 { // 2 DSTL files, 2 SSTs (+ relative meta = 5)
		t.Logf("refs %v", got.References(""))
	}

	// The 1.15 long layouts of the same codes stay the default reading.
	v115 := NewCheckpoint(3, 6, true)
	v115.Kind = "checkpoint"
	files15 := ChangelogFiles(0, 128, OffsetHandle{0, File("s3://dstl/1", 10)})
	files15.Code, files15.StorageID = KeyedChangelogFile, ""
	op = NewOperator(ID("c"), "", "", 1, 128)
	op.Subtasks = []SubtaskState{{Index: 0, ManagedKeyed: KeyedHandle{Code: KeyedChangelog, Num: 128, CheckpointedSize: 5,
		Materialized: []KeyedHandle{Incremental(6, 0, 128, Relative(UUID("meta"), 5), nil, nil)}, NonMaterialized: []KeyedHandle{files15}, MaterializationID: 2, HandleID: UUID("h")}}}
	v115.Operators = []OperatorState{op}
	if got = roundTrip(t, v115, "x/chk-6/_metadata"); got.Layout != (Layout{}) {
		t.Errorf("layout %v", got.Layout)
	}
}

// TestPickLayout: several readings that agree on references are fine; disagreeing ones fail
// closed (§8).
func TestPickLayout(t *testing.T) {
	mk := func(uri string) *Metadata {
		m := NewCheckpoint(3, 1, true)
		op := NewOperator(ID("x"), "", "", 1, 1)
		op.Subtasks = []SubtaskState{{ManagedOperator: OperatorStateHandle(File(uri, 1), "s")}}
		m.Operators = []OperatorState{op}
		return m
	}
	a, b := mk("s3://b/one"), mk("s3://b/two")
	if got, err := pickLayout("f", []layoutResult{{a, Layout{}}, {mk("s3://b/one"), Layout{Flink111Channels: true}}}, nil); err != nil || got != a {
		t.Errorf("agreeing readings: %v %v", got, err)
	}
	_, err := pickLayout("f", []layoutResult{{a, Layout{}}, {b, Layout{Flink114Changelog: true}}}, nil)
	var pe *ParseError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "disagree") {
		t.Errorf("disagreeing readings must fail closed, got %v", err)
	}
	sentinel := errors.New("first")
	if _, err := pickLayout("f", nil, sentinel); err != sentinel {
		t.Errorf("no reading: %v", err)
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	cases := map[string]func(m *Metadata){
		"version 7":        func(m *Metadata) { m.FormatVersion = 7 },
		"v4 no properties": func(m *Metadata) { m.FormatVersion, m.Properties = 4, nil },
		"layout in v4": func(m *Metadata) {
			m.FormatVersion, m.Properties, m.Layout.Flink111Channels = 4, CheckpointProps(true), true
		},
		"stripped inline": func(m *Metadata) { m.Operators[0].Coordinator = StreamHandle{Code: 1, Size: 5} },
		"bad stream code": func(m *Metadata) { m.Operators[0].Subtasks[0].ManagedKeyed = KeyGroups(0, 1, StreamHandle{Code: 9}) },
		"17 bad delegate": func(m *Metadata) {
			m.Operators[0].Subtasks[0].RawOperator = FileMergingOperatorHandle("a", "b", File("x", 1))
		},
		"name below v5": func(m *Metadata) { m.Operators[0].Name = "n" },
		"merged below v6": func(m *Metadata) {
			m.Operators[0].Subtasks[0].InputChannels = []ChannelHandle{MergedChannels(true, 0, File("x", 1))}
		},
		"long string": func(m *Metadata) {
			m.Operators[0].Subtasks[0].ManagedKeyed = KeyGroups(0, 1, File(strings.Repeat("a", 70000), 1))
		},
		"negative ckpt id": func(m *Metadata) { m.CheckpointID = -1 },
	}
	for name, mutate := range cases {
		m := NewCheckpoint(3, 1, true)
		op := NewOperator(ID("x"), "", "", 1, 1)
		op.Subtasks = []SubtaskState{{}}
		m.Operators = []OperatorState{op}
		mutate(m)
		if _, err := Encode(m); err == nil {
			t.Errorf("%s: encoded without error", name)
		}
	}
}

// TestIDFromUID checks the uid hash against the operator ids and uids recorded in real V5+ files.
func TestIDFromUID(t *testing.T) {
	if got := IDFromUID("CheckpointingSource2").String(); got != "1f2b5df5a66154aca61fcb26193792be" {
		t.Errorf("IDFromUID = %s", got)
	}
	checked := 0
	for _, f := range loadFixtures(t) {
		m, err := ParseBytes(f.data, f.path, Options{})
		if err != nil || m.FormatVersion < 5 {
			continue
		}
		for _, op := range m.Operators {
			if op.UID != "" && IDFromUID(op.UID) == op.ID {
				checked++
			}
		}
	}
	if checked == 0 {
		t.Error("no V5+ fixture operator id matches the hash of its uid")
	}
	t.Logf("%d operator ids match their uid hash", checked)
}
