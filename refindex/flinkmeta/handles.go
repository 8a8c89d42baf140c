package flinkmeta

import (
	"fmt"
	"strings"
)

// Grammar of the state handles (§5, §6). Each reader returns the zero handle after an error; the
// cursor's sticky error stops the surrounding loops.

func (p *parser) stream(depth int) StreamHandle {
	c := p.c
	c.what = "stream state handle"
	at := c.pos()
	var h StreamHandle
	h.Code = c.u8()
	if c.err != nil {
		return h
	}
	switch h.Code {
	case StreamNull, StreamEmptySegmentFile:
	case StreamByteStream:
		c.what = "ByteStreamStateHandle"
		h.Path = c.str()
		n := c.i32()
		if c.err == nil && (n < 0 || int64(n) > c.remaining()) {
			c.back(4)
			c.failf("inline byte count between 0 and %d, got %d", c.remaining(), n)
		}
		h.Size = int64(n)
		p.inline(h.Size, &h.Data)
	case StreamFile:
		c.what = "FileStateHandle"
		h.Size = c.i64()
		pat := c.pos()
		h.Path = c.str()
		if c.err == nil && h.Path == "" {
			c.seekFail(pat, "a non-empty file path in a file state handle")
		}
	case StreamRelativeFile:
		c.what = "RelativeFileStateHandle"
		pat := c.pos()
		h.Path = c.str()
		if c.err == nil && !validRelative(h.Path) {
			c.seekFail(pat, fmt.Sprintf("a plain file name for a relative state handle (no '/', '\\', '..' or control characters), got %q", h.Path))
		}
		h.Size = c.i64()
	case StreamKeyGroups:
		if depth >= maxDepth {
			c.seekFail(at, fmt.Sprintf("handles nested at most %d deep", maxDepth))
			return h
		}
		if p.layout.Flink111Channels {
			c.seekFail(at, "no nested key-group stream handle in a Flink 1.11 file (stream code 3 is 1.13+)")
			return h
		}
		c.what = "KeyGroupsStateHandle (in stream)"
		kg := &KeyGroupsInStream{Start: c.i32()}
		kg.Num, kg.Offsets = p.keyGroupOffsets()
		kg.Delegate = p.stream(depth + 1)
		h.KeyGroups = kg
	case StreamSegmentFile:
		c.what = "SegmentFileStateHandle"
		h.Offset = c.i64()
		h.Size = c.i64()
		sat := c.pos()
		scope := c.i32()
		if c.err == nil && scope != 0 && scope != 1 {
			c.seekFail(sat, fmt.Sprintf("segment scope 0 (EXCLUSIVE) or 1 (SHARED), got %d", scope))
		}
		h.Scope = uint8(scope)
		pat := c.pos()
		h.Path = c.str()
		if c.err == nil && h.Path == "" {
			c.seekFail(pat, "a non-empty physical file path in a segment file state handle")
		}
		h.LogicalFileID = c.str()
	default:
		c.seekFail(at, fmt.Sprintf("stream state handle type code 0, 1, 2, 3, 6, 15 or 16, got %d", h.Code))
	}
	return h
}

// keyGroupOffsets reads "i32 num, i64 × num".
func (p *parser) keyGroupOffsets() (int32, []int64) {
	n := p.c.count(8, "key groups")
	return int32(n), p.c.offsets(n)
}

func (p *parser) operatorHandle() OperatorHandle {
	c := p.c
	c.what = "operator state handle"
	at := c.pos()
	var h OperatorHandle
	h.Code = c.u8()
	if c.err != nil || h.Code == OperatorNull {
		return h
	}
	if h.Code != OperatorStream && h.Code != OperatorFileMerging {
		c.seekFail(at, fmt.Sprintf("operator state handle type code 0, 4 or 17, got %d", h.Code))
		return h
	}
	c.what = "OperatorStreamStateHandle"
	n := c.count(2+1+4, "operator states")
	if n > 0 {
		h.States = make([]OperatorStateMeta, 0, capFor(n))
	}
	for k := 0; k < n && c.err == nil; k++ {
		s := OperatorStateMeta{Name: c.str()}
		mat := c.pos()
		s.Mode = c.u8()
		if c.err == nil && s.Mode > Broadcast {
			c.seekFail(mat, fmt.Sprintf("distribution mode 0, 1 or 2, got %d", s.Mode))
		}
		s.Offsets = c.offsets(c.count(8, "partition offsets"))
		h.States = append(h.States, s)
	}
	if h.Code == OperatorFileMerging {
		c.what = "FileMergingOperatorStreamStateHandle"
		h.TaskOwnedDir = c.str()
		h.SharedDir = c.str()
		bat := c.pos()
		switch b := c.u8(); b {
		case 0, 1:
			h.Empty = b == 1
		default:
			c.seekFail(bat, fmt.Sprintf("boolean 0 or 1, got %d", b))
		}
		dat := c.pos()
		h.Delegate = p.stream(1)
		if c.err == nil && h.Delegate.Code != StreamSegmentFile && h.Delegate.Code != StreamEmptySegmentFile {
			c.seekFail(dat, fmt.Sprintf("segment delegate (stream code 15 or 16) of operator handle 17, got %d", h.Delegate.Code))
		}
		return h
	}
	h.Delegate = p.stream(1)
	return h
}

func (p *parser) keyed(depth int) KeyedHandle {
	c := p.c
	c.what = "keyed state handle"
	at := c.pos()
	var h KeyedHandle
	h.Code = c.u8()
	if c.err != nil || h.Code == KeyedNull {
		return h
	}
	if depth >= maxDepth {
		c.seekFail(at, fmt.Sprintf("handles nested at most %d deep", maxDepth))
		return h
	}
	if !p.keyedCodeFitsLayout(at, h.Code) {
		return h
	}
	// Each reads the fields that follow the code, in the order the release that wrote the code wrote
	// them; short: the Flink 1.14 layout, which lacks some of them.
	short := p.layout.Flink114Changelog
	switch h.Code {
	case KeyedKeyGroups, KeyedKeyGroupsV2, KeyedKeyGroupsSavepoint:
		p.keyGroupsHandle(&h, depth)
	case KeyedIncremental, KeyedIncrementalV2:
		p.incrementalHandle(&h, depth)
	case KeyedChangelog, KeyedChangelogV2:
		p.changelogBackendHandle(&h, depth, short)
	case KeyedInMemoryChangelog:
		p.inMemoryChangelogHandle(&h, short)
	case KeyedChangelogFile, KeyedChangelogFileV2:
		p.changelogFileHandle(&h, depth, short)
	default:
		c.seekFail(at, fmt.Sprintf("keyed state handle type code 0, 3, 5, 7, 8, 9, 10, 11, 12, 13 or 14, got %d", h.Code))
	}
	return h
}

// keyedCodeFitsLayout checks the keyed handle code read at at against the §8 layout attempt: only
// the codes the releases of that layout wrote are accepted (else the parse fails there).
func (p *parser) keyedCodeFitsLayout(at int64, code uint8) bool {
	switch {
	case p.layout.Flink111Channels && code != KeyedKeyGroups && code != KeyedIncremental:
		p.c.seekFail(at, fmt.Sprintf("keyed handle code 3 or 5 in a Flink 1.11 file, got %d", code))
		return false
	case p.layout.Flink114Changelog && (code == KeyedIncrementalV2 || code == KeyedKeyGroupsV2 || code > KeyedKeyGroupsV2):
		p.c.seekFail(at, fmt.Sprintf("no Flink 1.15+ keyed handle code in a Flink 1.14 file, got %d", code))
		return false
	}
	return true
}

func (p *parser) keyGroupsHandle(h *KeyedHandle, depth int) {
	c := p.c
	c.what = "KeyGroupsStateHandle"
	h.Start = c.i32()
	h.Num, h.Offsets = p.keyGroupOffsets()
	h.Delegate = p.stream(depth + 1)
	if h.Code == KeyedKeyGroupsV2 {
		h.HandleID = c.str()
	}
}

func (p *parser) incrementalHandle(h *KeyedHandle, depth int) {
	c := p.c
	c.what = "IncrementalRemoteKeyedStateHandle"
	h.CheckpointID = c.i64()
	h.BackendID = c.str()
	h.Start, h.Num = p.keyGroupRange()
	if h.Code == KeyedIncrementalV2 {
		h.CheckpointedSize = c.i64()
	}
	h.Meta = p.stream(depth + 1)
	h.Shared = p.named(depth)
	h.Private = p.named(depth)
	if h.Code == KeyedIncrementalV2 {
		h.HandleID = c.str()
	}
}

func (p *parser) changelogBackendHandle(h *KeyedHandle, depth int, short bool) {
	c := p.c
	p.changelogStart(h, "ChangelogStateBackendHandle", h.Code == KeyedChangelog)
	long := h.Code == KeyedChangelogV2 || !short
	if long {
		h.CheckpointedSize = c.i64()
	}
	h.Materialized = p.keyedList(depth, false)
	h.NonMaterialized = p.keyedList(depth, true)
	if long {
		c.what = "ChangelogStateBackendHandle"
		h.MaterializationID = c.i64()
		if h.Code == KeyedChangelogV2 {
			h.CheckpointID = c.i64()
		}
		h.HandleID = c.str()
	}
}

// inMemoryChangelogHandle reads the changes inline; each change's length is checked against what is
// left of the file before its bytes are taken.
func (p *parser) inMemoryChangelogHandle(h *KeyedHandle, short bool) {
	c := p.c
	p.changelogStart(h, "InMemoryChangelogStateHandle", true) // its id field is absent in the 1.14 layout
	h.FromSeq = c.i64()
	h.ToSeq = c.i64()
	n := c.count(8, "changelog changes")
	if n > 0 {
		h.Changes = make([]Change, 0, capFor(n))
	}
	for k := 0; k < n && c.err == nil; k++ {
		ch := Change{KeyGroup: c.i32()}
		lat := c.pos()
		l := c.i32()
		if c.err == nil && (l < 0 || int64(l) > c.remaining()) {
			c.seekFail(lat, fmt.Sprintf("change length between 0 and %d, got %d", c.remaining(), l))
		}
		ch.Len = int64(l)
		p.inline(ch.Len, &ch.Data)
		h.Changes = append(h.Changes, ch)
	}
	if !short {
		h.HandleID = c.str()
	}
}

func (p *parser) changelogFileHandle(h *KeyedHandle, depth int, short bool) {
	c := p.c
	p.changelogStart(h, "ChangelogStateHandleStreamImpl", h.Code == KeyedChangelogFile)
	n := c.count(8+1, "changelog file increments")
	if n > 0 {
		h.Files = make([]OffsetHandle, 0, capFor(n))
	}
	for k := 0; k < n && c.err == nil; k++ {
		f := OffsetHandle{Offset: c.i64()}
		f.Handle = p.stream(depth + 1)
		h.Files = append(h.Files, f)
	}
	c.what = "ChangelogStateHandleStreamImpl"
	h.StateSize = c.i64()
	if h.Code == KeyedChangelogFileV2 || !short {
		h.CheckpointedSize = c.i64()
		h.HandleID = c.str()
	}
	if h.Code == KeyedChangelogFileV2 {
		h.StorageID = c.str()
	}
}

// changelogStart reads the key-group range every changelog handle starts with. A code that exists
// only in the Flink 1.14 layout (v1) marks the file as such, which decides how later handles are read.
func (p *parser) changelogStart(h *KeyedHandle, what string, v1 bool) {
	p.c.what = what
	if v1 {
		p.sawChangelogV1 = true
	}
	h.Start, h.Num = p.keyGroupRange()
}

// keyGroupRange reads "i32 start, i32 num" with num >= 0.
func (p *parser) keyGroupRange() (int32, int32) {
	c := p.c
	start := c.i32()
	at := c.pos()
	num := c.i32()
	if c.err == nil && num < 0 {
		c.seekFail(at, fmt.Sprintf("non-negative number of key groups, got %d", num))
	}
	return start, num
}

// keyedList reads the materialized / non-materialized lists of a changelog handle.
func (p *parser) keyedList(depth int, nonMaterialized bool) []KeyedHandle {
	c := p.c
	n := c.count(1, "nested keyed handles")
	if n == 0 {
		return nil
	}
	out := make([]KeyedHandle, 0, capFor(n))
	for k := 0; k < n && c.err == nil; k++ {
		at := c.pos()
		h := p.keyed(depth + 1)
		if c.err != nil {
			break
		}
		switch {
		case nonMaterialized && h.Code != KeyedNull && h.Code != KeyedInMemoryChangelog && h.Code != KeyedChangelogFile && h.Code != KeyedChangelogFileV2:
			c.seekFail(at, fmt.Sprintf("non-materialized changelog part of code 9, 10 or 13, got %d", h.Code))
		case !nonMaterialized && (h.Code == KeyedChangelog || h.Code == KeyedChangelogV2 || h.Code == KeyedInMemoryChangelog || h.Code == KeyedChangelogFile || h.Code == KeyedChangelogFileV2):
			c.seekFail(at, fmt.Sprintf("materialized changelog part that is not itself a changelog handle, got %d", h.Code))
		}
		out = append(out, h)
	}
	return out
}

func (p *parser) named(depth int) []NamedHandle {
	c := p.c
	c.what = "incremental state file list"
	n := c.count(2+1, "incremental state files")
	if n == 0 {
		return nil
	}
	out := make([]NamedHandle, 0, capFor(n))
	for k := 0; k < n && c.err == nil; k++ {
		c.what = "incremental state file list"
		e := NamedHandle{LocalPath: c.str()}
		e.Handle = p.stream(depth + 1)
		out = append(out, e)
	}
	return out
}

func (p *parser) channels(plain uint8) []ChannelHandle {
	c := p.c
	c.what = "channel state handles"
	min := int64(4 + 4 + 4 + 8 + 1)
	if p.version >= 6 {
		min = 1 + 4 + 8 + 1 + 4 // merged is the smallest
	}
	n := c.count(min, "channel state handles")
	if n == 0 {
		return nil
	}
	p.sawChannel = true
	out := make([]ChannelHandle, 0, capFor(n))
	merged := plain + 2
	for k := 0; k < n && c.err == nil; k++ {
		h := ChannelHandle{Code: plain}
		if p.version >= 6 {
			at := c.pos()
			h.Code = c.u8()
			if c.err == nil && h.Code != plain && h.Code != merged {
				c.seekFail(at, fmt.Sprintf("channel handle type code %d or %d in this list, got %d", plain, merged, h.Code))
			}
		}
		c.what = "channel state handle"
		if h.Code == merged {
			h.SubtaskIndex = c.i32()
			h.StateSize = c.i64()
			h.Delegate = p.stream(1)
			h.Merged = p.mergedOffsets()
			out = append(out, h)
			continue
		}
		if !p.layout.Flink111Channels {
			h.SubtaskIndex = c.i32()
		}
		h.A = c.i32()
		h.B = c.i32()
		h.Offsets = c.offsets(c.count(8, "channel buffer offsets"))
		h.StateSize = c.i64()
		h.Delegate = p.stream(1)
		out = append(out, h)
	}
	return out
}

// mergedOffsets reads the length-prefixed serialized channel offsets of a merged handle (§6.2)
// and requires the structure to fill the block exactly.
func (p *parser) mergedOffsets() []MergedChannel {
	c := p.c
	c.what = "merged channel offsets"
	lat := c.pos()
	l := c.i32()
	if c.err != nil {
		return nil
	}
	if l < 4 || int64(l) > c.remaining() {
		c.seekFail(lat, fmt.Sprintf("merged channel offsets length between 4 and %d, got %d", c.remaining(), l))
		return nil
	}
	end := c.pos() + int64(l)
	n := c.count(4+4+8+4, "merged channels")
	var out []MergedChannel
	if n > 0 {
		out = make([]MergedChannel, 0, capFor(n))
	}
	for k := 0; k < n && c.err == nil; k++ {
		mc := MergedChannel{A: c.i32(), B: c.i32(), StateSize: c.i64()}
		mc.Offsets = c.offsets(c.count(8, "channel buffer offsets"))
		out = append(out, mc)
	}
	if c.err == nil && c.pos() != end {
		c.failf("merged channel offsets ending at byte %d (its length prefix), but they end at %d", end, c.pos())
	}
	return out
}

// validRelative reports whether a relative handle's name is a plain file name. Flink only writes
// generated file names there (§9.2); anything that could climb out of the snapshot directory is
// treated as hostile.
func validRelative(name string) bool {
	if name == "" || name == "." || strings.Contains(name, "..") || strings.ContainsAny(name, "/\\") {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] == 0x7F {
			return false
		}
	}
	return true
}
