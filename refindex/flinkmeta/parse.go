package flinkmeta

import (
	"bytes"
	"fmt"
	"io"
	"path"
	"regexp"
)

// Options control parsing.
type Options struct {
	// KeepInline retains inline payloads (ByteStream data, master-state payloads, in-memory
	// changelog changes) so the Metadata can be re-encoded. Without it only their lengths are
	// kept and memory stays proportional to the references, not to the file.
	KeepInline bool
}

// panicOnBug lets tests see parser bugs as panics instead of recovered errors.
var panicOnBug = false

// maxDepth bounds handle nesting (§9.4); Flink writes at most two levels.
const maxDepth = 8

// Parse reads a whole `_metadata` file of the given size from r. name is used in errors and, for
// versions 2/3 (which carry no properties trailer), its directory name decides Kind
// (chk-<n> → checkpoint, savepoint-… → savepoint, else unknown). The file must be consumed
// exactly to its end. Errors are *ParseError, *UnsupportedVersionError or I/O errors from r.
func Parse(r io.ReaderAt, size int64, name string, opts Options) (m *Metadata, err error) {
	if b, ok := r.(*bytes.Reader); ok && b.Size() == size && size < 1<<20 {
		// Small in-memory readers: avoid the buffered path's extra copy.
		buf := make([]byte, size)
		if _, err := b.ReadAt(buf, 0); err != nil && err != io.EOF {
			return nil, err
		}
		return ParseBytes(buf, name, opts)
	}
	return parseReaderAt(r, size, name, opts, readBufSize)
}

func parseReaderAt(r io.ReaderAt, size int64, name string, opts Options, bufSize int) (*Metadata, error) {
	if size < 0 {
		return nil, fmt.Errorf("%s: negative file size %d", name, size)
	}
	return parse(func() *cursor { return newCursor(r, size, name, bufSize) }, name, opts)
}

// ParseBytes parses a `_metadata` file held in memory. The returned Metadata never aliases b.
//
// Parsed strings share a few large backing allocations (see stringArena); a caller that keeps
// only a handful of strings from many files should strings.Clone them.
func ParseBytes(b []byte, name string, opts Options) (*Metadata, error) {
	return parse(func() *cursor { return newBytesCursor(b, name) }, name, opts)
}

func parse(newC func() *cursor, name string, opts Options) (m *Metadata, err error) {
	defer func() {
		// Defence in depth only: every read is bounds-checked; a panic here is a bug, and it must
		// still fail closed rather than crash a long-running index or mount.
		if r := recover(); r != nil {
			if panicOnBug {
				panic(r)
			}
			m, err = nil, fmt.Errorf("%s: internal error while parsing (please report): %v", name, r)
		}
	}()
	first := &parser{c: newC(), opts: opts}
	m, err = first.run()
	if err != nil {
		if _, unsup := err.(*UnsupportedVersionError); unsup || first.version != 3 {
			return nil, err
		}
	} else if m.FormatVersion != 3 || (!first.sawChannel && !first.sawChangelogV1) {
		m.Kind, m.SavepointFormat = deriveKind(m, name)
		return m, nil
	}
	// Version 3 with an ambiguous item or a failed first attempt: try every layout combination
	// (§8) and accept only a unique answer.
	var ok []layoutResult
	if err == nil {
		ok = append(ok, layoutResult{m, Layout{}})
	}
	firstErr := err
	for _, l := range []Layout{{Flink111Channels: true}, {Flink114Changelog: true}, {Flink111Channels: true, Flink114Changelog: true}} {
		p := &parser{c: newC(), opts: opts, layout: l}
		if mm, e := p.run(); e == nil {
			ok = append(ok, layoutResult{mm, l})
		}
	}
	m, err = pickLayout(name, ok, firstErr)
	if err != nil {
		return nil, err
	}
	m.Kind, m.SavepointFormat = deriveKind(m, name)
	return m, nil
}

// layoutResult is one successful reading of a version-3 file under a layout variant.
type layoutResult struct {
	m *Metadata
	l Layout
}

// pickLayout applies §8: the first successful reading wins, unless another successful reading
// disagrees on the referenced files, in which case the file is unparseable (fail closed).
func pickLayout(name string, ok []layoutResult, firstErr error) (*Metadata, error) {
	if len(ok) == 0 {
		return nil, firstErr
	}
	want := refSet(ok[0].m)
	for _, r := range ok[1:] {
		if refSet(r.m) != want {
			return nil, &ParseError{File: name, Offset: 8, Expected: fmt.Sprintf(
				"one consistent reading of this version-3 file, but the layouts %s and %s both parse it and disagree on the referenced files (§8: failing closed)", ok[0].l, r.l)}
		}
	}
	return ok[0].m, nil
}

// String names a layout for messages.
func (l Layout) String() string {
	switch {
	case l.Flink111Channels && l.Flink114Changelog:
		return "Flink 1.11 channels + Flink 1.14 changelog"
	case l.Flink111Channels:
		return "Flink 1.11 channels"
	case l.Flink114Changelog:
		return "Flink 1.14 changelog"
	}
	return "Flink 1.12+/1.15"
}

// refSet renders the references of m (without a base directory) for comparing layout readings.
func refSet(m *Metadata) string {
	var b bytes.Buffer
	for _, r := range m.References("") {
		fmt.Fprintf(&b, "%s|%s|%d|%d\n", r.Kind, r.URI, r.Offset, r.Length)
	}
	return b.String()
}

var (
	chkDir       = regexp.MustCompile(`^chk-[0-9]+$`)
	savepointDir = regexp.MustCompile(`^savepoint-`)
)

func deriveKind(m *Metadata, name string) (string, string) {
	if m.FormatVersion >= 4 {
		return kindOf(m.Properties)
	}
	dir := path.Base(path.Dir(path.Clean("/" + name)))
	switch {
	case chkDir.MatchString(dir):
		return "checkpoint", ""
	case savepointDir.MatchString(dir):
		return "savepoint", ""
	}
	return "unknown", ""
}

type parser struct {
	c       *cursor
	opts    Options
	layout  Layout
	version int
	// What the attempt saw, for the §8 layout decision.
	sawChannel, sawChangelogV1 bool
}

func (p *parser) run() (*Metadata, error) {
	c := p.c
	c.what = "file header"
	if magic := c.i32(); c.err == nil && magic != Magic {
		c.seekFail(0, fmt.Sprintf("magic number 0x4960672D of a Flink _metadata file, got 0x%08X", uint32(magic)))
	}
	v := c.i32()
	if c.err != nil {
		return nil, c.err
	}
	if v < 2 || v > 6 {
		return nil, &UnsupportedVersionError{File: c.name, Version: v}
	}
	p.version = int(v)
	m := &Metadata{FormatVersion: int(v), Layout: p.layout}
	if p.version != 3 && p.layout != (Layout{}) {
		return nil, fmt.Errorf("layout variants apply to version 3 only")
	}
	c.what = "checkpoint id"
	m.CheckpointID = c.i64()
	if c.err == nil && m.CheckpointID < 0 {
		c.back(8)
		c.failf("non-negative checkpoint id, got %d", m.CheckpointID)
	}
	c.what = "master states"
	if n := c.count(4+4+10, "master states"); n > 0 {
		m.MasterStates = make([]MasterState, 0, capFor(n))
		for k := 0; k < n && c.err == nil; k++ {
			m.MasterStates = append(m.MasterStates, p.master())
		}
	}
	c.what = "operator count"
	minOp := int64(16 + 4 + 4 + 4)
	if p.version >= 5 {
		minOp += 4
	}
	if n := c.count(minOp, "operators"); n > 0 {
		m.Operators = make([]OperatorState, 0, capFor(n))
		for k := 0; k < n && c.err == nil; k++ {
			m.Operators = append(m.Operators, p.operator())
		}
	}
	if p.version >= 4 && c.err == nil {
		c.what = "properties trailer"
		m.Properties = readProperties(c)
	}
	if c.err == nil && c.remaining() != 0 {
		c.failf("end of file after the %s, but %d bytes follow", map[bool]string{true: "properties trailer", false: "last operator"}[p.version >= 4], c.remaining())
	}
	if c.err != nil {
		return nil, c.err
	}
	return m, nil
}

func (p *parser) master() MasterState {
	c := p.c
	c.what = "master state"
	start := c.pos()
	if mg := c.i32(); c.err == nil && mg != masterStateMagic {
		c.seekFail(start, fmt.Sprintf("master state magic 0xC96B1696, got 0x%08X", uint32(mg)))
	}
	n := c.i32()
	if c.err != nil {
		return MasterState{}
	}
	if n <= 0 || int64(n) > c.remaining() {
		c.back(4)
		c.failf("master state length between 1 and %d, got %d", c.remaining(), n)
		return MasterState{}
	}
	end := c.pos() + int64(n)
	ms := MasterState{Version: c.i32(), Name: c.str()}
	pl := c.i32()
	if c.err == nil && (pl < 0 || c.pos()+int64(pl) != end) {
		c.back(4)
		c.failf("master state payload length %d ending its block, got %d", end-c.pos()-4, pl)
	}
	ms.PayloadLen = int64(pl)
	p.inline(int64(pl), &ms.Payload)
	return ms
}

// inline consumes n inline bytes, keeping them only with KeepInline.
func (p *parser) inline(n int64, dst *[]byte) {
	if p.opts.KeepInline && n > 0 {
		*dst = p.c.copyN(n)
		return
	}
	p.c.skip(n)
}

func (p *parser) operator() OperatorState {
	c := p.c
	var op OperatorState
	if p.version >= 5 {
		c.what = "operator name"
		op.Name = c.str()
		op.UID = c.str()
	}
	c.what = "operator"
	copy(op.ID[:], c.bytesN(16))
	op.Parallelism = c.i32()
	op.MaxParallelism = c.i32()
	if p.version == 2 {
		op.ChainLength = c.i32()
		n := c.count(4+8+4+4+4+2, "subtask states")
		if n > 0 {
			op.Subtasks = make([]SubtaskState, 0, capFor(n))
		}
		for k := 0; k < n && c.err == nil; k++ {
			var st SubtaskState
			at := c.pos()
			st.Index = c.i32()
			if c.err == nil && st.Index < 0 {
				c.seekFail(at, fmt.Sprintf("non-negative subtask index, got %d", st.Index))
			}
			st.Duration = c.i64()
			nl := c.count(1, "legacy stream handles")
			for j := 0; j < nl && c.err == nil; j++ {
				st.Legacy = append(st.Legacy, p.stream(0))
			}
			p.common(&st)
			op.Subtasks = append(op.Subtasks, st)
		}
		return op
	}
	c.what = "coordinator state"
	at := c.pos()
	op.Coordinator = p.stream(0)
	if c.err == nil && op.Coordinator.Code != StreamNull && op.Coordinator.Code != StreamByteStream {
		c.seekFail(at, fmt.Sprintf("coordinator state handle code 0 or 1, got %d", op.Coordinator.Code))
	}
	at = c.pos()
	n := c.i32()
	if c.err != nil {
		return op
	}
	if n < 0 {
		if p.layout.Flink111Channels {
			c.seekFail(at, "no finished-operator marker in a Flink 1.11 file")
		}
		if op.Coordinator.Code != StreamNull {
			c.seekFail(at, "null coordinator state for a fully finished operator")
		}
		op.FullyFinished = true
		return op
	}
	if int64(n)*4 > c.remaining() {
		c.seekFail(at, fmt.Sprintf("subtask count at most %d, got %d", c.remaining()/4, n))
		return op
	}
	if n > 0 {
		op.Subtasks = make([]SubtaskState, 0, capFor(int(n)))
	}
	for k := 0; k < int(n) && c.err == nil; k++ {
		var st SubtaskState
		at := c.pos()
		st.Index = c.i32()
		if st.Index < 0 {
			if p.layout.Flink111Channels && c.err == nil {
				c.seekFail(at, "no finished-subtask marker in a Flink 1.11 file")
			}
			st.Index = -(st.Index + 1)
			st.Finished = true
			op.Subtasks = append(op.Subtasks, st)
			continue
		}
		p.common(&st)
		st.InputChannels = p.channels(ChannelInput)
		st.ResultSubparts = p.channels(ChannelResultSubpartition)
		op.Subtasks = append(op.Subtasks, st)
	}
	return op
}

func (p *parser) common(st *SubtaskState) {
	c := p.c
	for _, dst := range []**OperatorHandle{&st.ManagedOperator, &st.RawOperator} {
		c.what = "operator state flag"
		if has := c.i32(); has != 0 && c.err == nil {
			h := p.operatorHandle()
			*dst = &h
		}
	}
	st.ManagedKeyed = p.keyed(0)
	st.RawKeyed = p.keyed(0)
}
