package flinkmeta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// cursor reads big-endian primitives from an io.ReaderAt (or a byte slice) through its own buffer,
// tracking the absolute file offset. Errors are sticky: after the first failure every read returns
// zero, so the grammar code can check c.err once per loop instead of after every field.
type cursor struct {
	r       io.ReaderAt // nil when parsing a byte slice (buf is then the whole file)
	size    int64
	buf     []byte
	bufOff  int64 // file offset of buf[0]
	i       int   // read position inside buf
	err     error
	name    string
	what    string      // the item being read, for truncation errors
	bufSize int         // refill size for ReaderAt input
	arena   stringArena // backs parsed strings
}

const readBufSize = 256 << 10 // holds the longest mutf8 string (65535 bytes) with room to spare

func newCursor(r io.ReaderAt, size int64, name string, bufSize int) *cursor {
	return &cursor{r: r, size: size, name: name, bufSize: bufSize}
}

func newBytesCursor(b []byte, name string) *cursor {
	return &cursor{buf: b, size: int64(len(b)), name: name}
}

func (c *cursor) pos() int64       { return c.bufOff + int64(c.i) }
func (c *cursor) remaining() int64 { return c.size - c.pos() }

// setErr records the first error and makes every later read fail fast.
func (c *cursor) setErr(err error) {
	if c.err == nil {
		c.err = err
	}
	c.bufOff += int64(c.i)
	c.buf, c.i = nil, 0
	c.r = nil
	c.size = c.bufOff
}

func (c *cursor) seekFail(off int64, expected string) {
	if c.err == nil {
		c.err = &ParseError{File: c.name, Offset: off, Expected: expected}
	}
	c.setErr(c.err)
}

func (c *cursor) failf(format string, args ...any) {
	c.seekFail(c.pos(), fmt.Sprintf(format, args...))
}

// back moves the cursor n bytes back (within the buffer) so an error names the offending item.
func (c *cursor) back(n int) {
	if c.err == nil && c.i >= n {
		c.i -= n
	}
}

// fill makes n bytes available at buf[i:], or fails.
func (c *cursor) fill(n int) bool {
	if c.err != nil {
		return false
	}
	if int64(n) > c.remaining() {
		what := c.what
		if what == "" {
			what = "data"
		}
		c.failf("%d more bytes of %s, but the file ends at byte %d (truncated or corrupt)", n, what, c.size)
		return false
	}
	if c.r == nil { // byte slice: everything is already in buf
		return true
	}
	// Refill: move the window to the current position.
	p := c.pos()
	want := c.bufSize
	if n > want {
		want = n
	}
	if rem := c.remaining(); int64(want) > rem {
		want = int(rem)
	}
	if cap(c.buf) < want {
		c.buf = make([]byte, want, max(want, c.bufSize))
	}
	c.buf = c.buf[:want]
	m, err := c.r.ReadAt(c.buf, p)
	if m < n {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		c.setErr(fmt.Errorf("%s: read at byte offset %d: %w", c.name, p, err))
		return false
	}
	c.buf, c.bufOff, c.i = c.buf[:m], p, 0
	return true
}

func (c *cursor) u8() uint8 {
	if c.i >= len(c.buf) && !c.fill(1) {
		return 0
	}
	v := c.buf[c.i]
	c.i++
	return v
}

// The fixed-width integers are big-endian (Java's DataOutput); a short read yields 0 with c.err set.
func (c *cursor) u16() uint16 { return decodeOr0(c.bytesN(2), binary.BigEndian.Uint16) }
func (c *cursor) i32() int32  { return int32(decodeOr0(c.bytesN(4), binary.BigEndian.Uint32)) }
func (c *cursor) i64() int64  { return int64(decodeOr0(c.bytesN(8), binary.BigEndian.Uint64)) }

func decodeOr0[T uint16 | uint32 | uint64](b []byte, decode func([]byte) T) T {
	if b == nil {
		return 0
	}
	return decode(b)
}

// bytesN returns the next n bytes; valid only until the next read.
func (c *cursor) bytesN(n int) []byte {
	if len(c.buf)-c.i < n && !c.fill(n) {
		return nil
	}
	b := c.buf[c.i : c.i+n : c.i+n]
	c.i += n
	return b
}

// mutf8Body decodes n bytes of modified UTF-8.
func (c *cursor) mutf8Body(n int) string {
	start := c.pos()
	b := c.bytesN(n)
	if b == nil {
		return ""
	}
	s, err := decodeMUTF8In(&c.arena, b)
	if err != nil {
		c.seekFail(start, fmt.Sprintf("well-formed modified UTF-8 string of %d bytes", n))
		return ""
	}
	return s
}

// str reads a writeUTF string (u16 length + modified UTF-8).
func (c *cursor) str() string {
	return c.mutf8Body(int(c.u16()))
}

// skip advances n bytes without reading them (inline payloads with KeepInline=false).
func (c *cursor) skip(n int64) {
	if c.err != nil {
		return
	}
	if n < 0 || n > c.remaining() {
		c.failf("%d bytes of %s, but only %d remain", n, c.what, c.remaining())
		return
	}
	if n <= int64(len(c.buf)-c.i) {
		c.i += int(n)
		return
	}
	c.bufOff, c.buf, c.i = c.pos()+n, c.buf[:0], 0
}

// copyN returns a fresh copy of the next n bytes (n already checked against remaining()).
func (c *cursor) copyN(n int64) []byte {
	if c.err != nil {
		return nil
	}
	if n < 0 || n > c.remaining() {
		c.failf("%d bytes of %s, but only %d remain", n, c.what, c.remaining())
		return nil
	}
	out := make([]byte, n)
	if have := int64(len(c.buf) - c.i); n <= have {
		copy(out, c.buf[c.i:])
		c.i += int(n)
		return out
	}
	p := c.pos()
	k := copy(out, c.buf[c.i:])
	if c.r == nil {
		c.failf("%d bytes of %s", n, c.what)
		return nil
	}
	if m, err := c.r.ReadAt(out[k:], p+int64(k)); int64(m) < n-int64(k) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		c.setErr(fmt.Errorf("%s: read at byte offset %d: %w", c.name, p+int64(k), err))
		return nil
	}
	c.bufOff, c.buf, c.i = p+n, c.buf[:0], 0
	return out
}

// count reads an i32 element count and checks it against the bytes left, given the smallest
// possible encoded size of one element. This is what keeps hostile counts from allocating.
func (c *cursor) count(minSize int64, what string) int {
	start := c.pos()
	n := c.i32()
	if c.err != nil {
		return 0
	}
	if n < 0 || int64(n)*minSize > c.remaining() {
		c.seekFail(start, fmt.Sprintf("count of %s between 0 and %d (the bytes left allow no more), got %d", what, c.remaining()/max(minSize, 1), n))
		return 0
	}
	return int(n)
}

// capFor bounds the initial capacity of a slice about to receive n elements: the count is already
// checked against the bytes left, but the in-memory element may be much larger than its encoding.
func capFor(n int) int { return min(n, 1024) }

// offsets reads n i64 values.
func (c *cursor) offsets(n int) []int64 {
	if n == 0 || c.err != nil {
		return nil
	}
	if int64(n)*8 > c.remaining() {
		c.failf("%d offsets of 8 bytes", n)
		return nil
	}
	out := make([]int64, n)
	for k := range out {
		out[k] = c.i64()
	}
	return out
}

var _ = errors.New
