package s3mount

import (
	"context"
	"io"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckguard/ckguard/s3backend/s3client"
)

// readHandle reads one object version (pinned by ETag) with ranged GETs. A sequential reader gets
// ReadAhead chunks of ReadChunk bytes fetched in parallel ahead of it; a random reader fetches exactly
// what it asks for. Memory per sequential reader: at most (ReadAhead+2) × ReadChunk (chunks are dropped as
// they are read; a reader that leaves chunks partly unread holds up to (2×ReadAhead+2) × ReadChunk), in buffers the mount
// reuses (bufPool): a fresh 8 MiB buffer per chunk cost page faults and zeroing of every byte read.
// Invariant: the chunks of all open files together hold at most ReadMemory bytes (filesystem.chunkBytes);
// a read that would need a chunk past that reads exactly its range, and no chunk is fetched ahead, so
// no number of open files makes the daemon hold or fetch more.
type readHandle struct {
	fsys *filesystem
	key  string
	size int64
	etag string

	ctx    context.Context // lives until release: chunk fetches outlive one READ request
	cancel context.CancelFunc

	mu      sync.Mutex
	chunks  map[int64]*chunk
	nextOff int64 // the end of the furthest sequential read so far
}

// chunk is one ranged GET. Its buffer goes back to the pool only when nothing can still read it: the fetch
// has finished, it left the readahead window (dropped), and no READ reply holds a slice of it (refs) —
// go-fuse writes a reply to the kernel after Read returns and calls its Done afterwards.
type chunk struct {
	done chan struct{}
	data []byte
	err  error

	// under readHandle.mu
	buf     *[]byte
	size    int64 // the bytes of buf counted in filesystem.chunkBytes
	served  int64 // the bytes READ replies took from it: all of them, and it has nothing left to give
	fetched bool
	dropped bool
	refs    int
}

func newReadHandle(fsys *filesystem, key string, o s3client.Object) *readHandle {
	ctx, cancel := context.WithCancel(context.Background())
	return &readHandle{fsys: fsys, key: key, size: o.Size, etag: o.ETag, ctx: ctx, cancel: cancel, chunks: map[int64]*chunk{}}
}

// getBuf returns a buffer of n bytes from the mount's pool.
func (f *filesystem) getBuf(n int64) *[]byte {
	if b, ok := f.bufPool.Get().(*[]byte); ok && int64(cap(*b)) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, max(n, f.opts.ReadChunk))
	return &b
}

// recycle returns c's buffer to the pool once nothing can read it any more. Caller holds r.mu.
func (r *readHandle) recycle(c *chunk) {
	if c.buf != nil && c.fetched && c.dropped && c.refs == 0 {
		b := c.buf
		c.buf, c.data = nil, nil
		r.fsys.bufPool.Put(b)
		r.fsys.chunkBytes.Add(-c.size)
	}
}

// drop removes chunk i from the window. Caller holds r.mu.
func (r *readHandle) drop(i int64) {
	if c, ok := r.chunks[i]; ok {
		delete(r.chunks, i)
		c.dropped = true
		r.recycle(c)
	}
}

// release gives up one reference to c (taken under r.mu when the READ picked it).
func (r *readHandle) release(c *chunk) {
	r.mu.Lock()
	c.refs--
	r.recycle(c)
	r.mu.Unlock()
}

// start begins fetching chunk i unless it is cached or in flight; nil when a new chunk would take the
// open files' chunks past ReadMemory. Caller holds mu.
func (r *readHandle) start(i int64) *chunk {
	if c, ok := r.chunks[i]; ok {
		return c
	}
	cs := r.fsys.opts.ReadChunk
	off := i * cs
	n := min(cs, r.size-off)
	if r.fsys.chunkBytes.Add(n) > r.fsys.opts.ReadMemory {
		r.fsys.chunkBytes.Add(-n)
		return nil
	}
	c := &chunk{done: make(chan struct{}), size: n}
	c.buf = r.fsys.getBuf(n)
	r.chunks[i] = c
	go func() {
		buf := *c.buf
		m, err := r.fsys.c.ReadAt(r.ctx, r.key, buf, off, r.etag)
		if err == io.EOF && m == len(buf) {
			err = nil
		}
		c.data, c.err = buf[:m], err
		close(c.done)
		r.mu.Lock()
		c.fetched = true
		r.recycle(c)
		r.mu.Unlock()
	}()
	return c
}

func (r *readHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= r.size || len(dest) == 0 {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), r.size)
	cs := r.fsys.opts.ReadChunk
	ahead := int64(r.fsys.opts.ReadAhead)

	r.mu.Lock()
	// The kernel's readahead sends several reads at once and they arrive out of order, so "sequential"
	// means: within the readahead window around where the stream is (or the start of the file).
	window := (ahead + 1) * cs
	if !(off == 0 || (off >= r.nextOff-window && off <= r.nextOff+window)) {
		r.mu.Unlock()
		// Random access: read exactly the range; the stream's chunks stay for the sequential reader.
		return r.readRange(ctx, dest, off, end)
	}
	r.nextOff = max(r.nextOff, end)
	first, last := off/cs, (end-1)/cs
	// The window is anchored at the stream's head (next: the chunk of the first byte past the furthest
	// read), not at this read, because READs arrive in any order: a READ that arrives late must neither
	// fetch again, as readahead, the chunks later READs consumed, nor see its own chunks dropped by a
	// READ further on that arrived first. So a chunk leaves the window when READs have taken every byte
	// of it (see served), or when it is further than the sequential window behind the head, or beyond
	// the readahead. The window moves first, so chunks it left give their bytes back before new ones
	// count against ReadMemory.
	next := r.nextOff / cs
	for i := range r.chunks {
		if i < next-ahead-1 || i > next+ahead {
			r.drop(i)
		}
	}
	want := make([]*chunk, 0, last-first+1)
	for i := first; i <= last; i++ {
		c := r.start(i)
		if c == nil {
			// The open files' chunks are at ReadMemory: read exactly the range, like a random reader.
			for _, w := range want {
				w.refs--
				r.recycle(w)
			}
			r.mu.Unlock()
			return r.readRange(ctx, dest, off, end)
		}
		c.refs++
		want = append(want, c)
	}
	for i := max(last+1, next); i <= next+ahead && i*cs < r.size && r.nextOff < r.size; i++ {
		if r.start(i) == nil {
			break
		}
	}
	r.mu.Unlock()

	// Every chunk in want holds a reference until its data is copied or (one chunk) the reply is sent.
	held := want
	defer func() {
		for _, c := range held {
			r.release(c)
		}
	}()
	for k, c := range want {
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, syscall.EINTR
		}
		if c.err != nil {
			r.mu.Lock()
			if r.chunks[first+int64(k)] == c {
				r.drop(first + int64(k)) // let a retry refetch
			}
			r.mu.Unlock()
			return nil, s3client.Errno(c.err)
		}
	}
	if len(want) == 1 { // the common case: reply from the chunk's buffer without copying it
		c := want[0]
		cOff := first * cs
		from, to := off-cOff, min(end-cOff, int64(len(c.data)))
		if from >= to {
			return fuse.ReadResultData(nil), 0
		}
		r.served(first, c, to-from)
		held = nil // the reply's Done releases it
		return &chunkResult{r: r, c: c, data: c.data[from:to]}, 0
	}
	n := 0
	for k, c := range want {
		cOff := (first + int64(k)) * cs
		from := max(off, cOff) - cOff
		to := min(end-cOff, int64(len(c.data)))
		if from < to {
			n += copy(dest[n:], c.data[from:to])
			r.served(first+int64(k), c, to-from)
		}
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// served counts n bytes of chunk i given to a READ reply and drops the chunk once every byte of it was:
// the kernel caches what it read, so nothing will ask for them again (a rare re-read fetches the
// chunk anew).
func (r *readHandle) served(i int64, c *chunk, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.served += n
	if c.served >= int64(len(c.data)) && r.chunks[i] == c {
		r.drop(i)
	}
}

// readRange reads exactly [off, end) into dest with one ranged GET, holding no chunk.
func (r *readHandle) readRange(ctx context.Context, dest []byte, off, end int64) (fuse.ReadResult, syscall.Errno) {
	buf := dest[:end-off]
	m, err := r.fsys.c.ReadAt(ctx, r.key, buf, off, r.etag)
	if err != nil && err != io.EOF {
		return nil, s3client.Errno(err)
	}
	return fuse.ReadResultData(buf[:m]), 0
}

func (r *readHandle) Release(ctx context.Context) syscall.Errno {
	r.cancel()
	r.mu.Lock()
	for i := range r.chunks {
		r.drop(i)
	}
	r.mu.Unlock()
	return 0
}

// chunkResult is a READ reply served from a chunk's buffer; go-fuse calls Done once the reply is written
// to the kernel (or dropped), and only then may the buffer be reused.
type chunkResult struct {
	r    *readHandle
	c    *chunk
	data []byte
	once sync.Once
}

var _ fuse.ReadResult = (*chunkResult)(nil)

func (cr *chunkResult) Size() int { return len(cr.data) }

// Bytes copies: a caller that calls Done before it writes what Bytes returned must not get the pooled
// buffer. go-fuse uses Slices (no copy) when writing to /dev/fuse.
func (cr *chunkResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	if cap(buf) < len(cr.data) {
		buf = make([]byte, len(cr.data))
	}
	return buf[:copy(buf[:len(cr.data)], cr.data)], fuse.OK
}

// Slices lets go-fuse write the reply straight from the chunk (writev), before it calls Done.
func (cr *chunkResult) Slices() ([][]byte, fuse.Status) { return [][]byte{cr.data}, fuse.OK }

func (cr *chunkResult) Done() { cr.once.Do(func() { cr.r.release(cr.c) }) }
