package flinkmeta

import "unsafe"

// stringArena backs the parsed strings with a few large chunks instead of one allocation per
// string: a 200 MB `_metadata` holds millions of paths, and per-string allocations dominate the
// parse time and GC work. A chunk is append-only: bytes once handed out as a string are never
// written again, which is what makes unsafe.String safe here. Chunks grow geometrically so that
// a small file does not pin a large chunk.
type stringArena struct {
	buf  []byte
	next int // size of the next chunk
}

const (
	arenaFirstChunk = 1 << 10
	arenaMaxChunk   = 256 << 10
	arenaMaxString  = 4 << 10 // longer strings get their own allocation
)

func (a *stringArena) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > arenaMaxString {
		return string(b)
	}
	if cap(a.buf)-len(a.buf) < len(b) {
		if a.next == 0 {
			a.next = arenaFirstChunk
		}
		a.buf = make([]byte, 0, a.next)
		a.next = min(2*a.next, arenaMaxChunk)
	}
	start := len(a.buf)
	a.buf = append(a.buf, b...)
	return unsafe.String(&a.buf[start], len(b))
}
