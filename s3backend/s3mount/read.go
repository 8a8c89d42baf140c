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
// what it asks for. Memory per sequential reader: at most (ReadAhead+2) × ReadChunk.
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

type chunk struct {
	done chan struct{}
	data []byte
	err  error
}

func newReadHandle(fsys *filesystem, key string, o s3client.Object) *readHandle {
	ctx, cancel := context.WithCancel(context.Background())
	return &readHandle{fsys: fsys, key: key, size: o.Size, etag: o.ETag, ctx: ctx, cancel: cancel, chunks: map[int64]*chunk{}}
}

// start begins fetching chunk i unless it is cached or in flight. Caller holds mu.
func (r *readHandle) start(i int64) *chunk {
	if c, ok := r.chunks[i]; ok {
		return c
	}
	cs := r.fsys.opts.ReadChunk
	off := i * cs
	c := &chunk{done: make(chan struct{})}
	r.chunks[i] = c
	go func() {
		defer close(c.done)
		buf := make([]byte, min(cs, r.size-off))
		m, err := r.fsys.c.ReadAt(r.ctx, r.key, buf, off, r.etag)
		if err == io.EOF && int64(m) == int64(len(buf)) {
			err = nil
		}
		c.data, c.err = buf[:m], err
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
		buf := dest[:end-off]
		m, err := r.fsys.c.ReadAt(ctx, r.key, buf, off, r.etag)
		if err != nil && err != io.EOF {
			return nil, s3client.Errno(err)
		}
		return fuse.ReadResultData(buf[:m]), 0
	}
	r.nextOff = max(r.nextOff, end)
	first, last := off/cs, (end-1)/cs
	want := make([]*chunk, 0, last-first+1)
	for i := first; i <= last; i++ {
		want = append(want, r.start(i))
	}
	for i := last + 1; i <= last+ahead && i*cs < r.size; i++ {
		r.start(i)
	}
	for i := range r.chunks {
		if i < first-1 || i > last+ahead { // keep one chunk behind for reads that arrive late
			delete(r.chunks, i)
		}
	}
	r.mu.Unlock()

	if len(want) == 1 { // the common case: serve from the chunk without copying it
		c := want[0]
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, syscall.EINTR
		}
		if c.err != nil {
			r.mu.Lock()
			delete(r.chunks, first)
			r.mu.Unlock()
			return nil, s3client.Errno(c.err)
		}
		cOff := first * cs
		from, to := off-cOff, min(end-cOff, int64(len(c.data)))
		if from >= to {
			return fuse.ReadResultData(nil), 0
		}
		return fuse.ReadResultData(c.data[from:to]), 0
	}
	n := 0
	for k, c := range want {
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, syscall.EINTR
		}
		if c.err != nil {
			r.mu.Lock()
			delete(r.chunks, first+int64(k)) // let a retry refetch
			r.mu.Unlock()
			return nil, s3client.Errno(c.err)
		}
		cOff := (first + int64(k)) * cs
		from := max(off, cOff) - cOff
		to := min(end-cOff, int64(len(c.data)))
		if from < to {
			n += copy(dest[n:], c.data[from:to])
		}
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (r *readHandle) Release(ctx context.Context) syscall.Errno {
	r.cancel()
	r.mu.Lock()
	clear(r.chunks)
	r.mu.Unlock()
	return 0
}
