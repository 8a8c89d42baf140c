// Package s3store implements the index's store.Store on S3 (s3client): stat by HEAD, reads by ranged
// GETs, walks by paged ListObjectsV2, and a `_metadata` discovery that does not walk the whole bucket on
// every sync (see discovery.go).
package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// Options tune the store. The zero value is usable.
type Options struct {
	// FullWalk makes every ListMetadata a full walk of the prefix (complete for any layout at every
	// sync, at a cost in proportion to the objects). Default: the descent of delimiter listings with a
	// background reconciliation walk (discovery.go).
	FullWalk bool
	// ReconcileEvery is the shortest interval between reconciliation walks (default 1h; the interval
	// is also at least ten times the last walk's duration). < 0: none (a one-shot CLI sync; its
	// rebuilds and orphans walk the store anyway).
	ReconcileEvery time.Duration
	// Logger receives the reconciliation walk's findings. Default slog.Default().
	Logger *slog.Logger
	// Parallel bounds concurrent LIST requests of one full walk. Default 16.
	Parallel int
	// DescentParallel bounds concurrent HEAD/LIST requests of one descent (the per-sync discovery, one
	// HEAD per checkpoint: at 20,000 checkpoints and 20 ms per request, 16 in flight take 25 s). Default
	// three quarters of the client's connections (48 of 64), at least Parallel: the rest stay free for
	// the mount's own reads, listings and deletes while a sync runs.
	DescentParallel int
	// BlockSize is the unit of the reader's ranged GETs. Default 1 MiB.
	BlockSize int64
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
	// Attrs, when set, answers Stat for files some listing or HEAD saw within AttrsTTL (default 60s)
	// without a request: the S3 mount shares its cache here, so deciding an unlink the mount just listed
	// costs no HEAD. Safe because the mount's DeleteObject carries If-Match with the ETag of that same
	// entry: if the object changed since, the delete fails and is decided again on fresh data. The mount
	// hands that entry to the decision (guard.Check.Observed, StatObserved), which judges it, so a
	// newer or older entry put into the cache between the mount's look and the decision is not judged
	// instead.
	Attrs    *s3client.AttrCache
	AttrsTTL time.Duration
}

// Store is a store.Store over one bucket/prefix.
type Store struct {
	c    *s3client.Client
	opts Options

	mu              sync.Mutex
	disc            discovery
	cancelReconcile context.CancelFunc
	stats           Stats
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.FullLister = (*Store)(nil)
	_ store.Clock      = (*Store)(nil)
)

// StoreTime reads the S3 service's clock, which stamps LastModified (store.Clock).
func (s *Store) StoreTime(ctx context.Context) (time.Time, error) { return s.c.ServerTime(ctx) }

// New returns a store over c.
func New(c *s3client.Client, opts Options) *Store {
	if opts.Parallel <= 0 {
		opts.Parallel = 16
	}
	if opts.DescentParallel <= 0 {
		opts.DescentParallel = max(opts.Parallel, c.MaxConns()*3/4)
	}
	if opts.BlockSize <= 0 {
		opts.BlockSize = 1 << 20
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ReconcileEvery == 0 {
		opts.ReconcileEvery = time.Hour
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.AttrsTTL <= 0 {
		opts.AttrsTTL = time.Minute
	}
	return &Store{c: c, opts: opts}
}

// Client returns the underlying S3 client.
func (s *Store) Client() *s3client.Client { return s.c }

// Root is s3://bucket/prefix (without the trailing slash), as Flink names it.
func (s *Store) Root() string {
	return strings.TrimSuffix(s.c.Location().String(), "/")
}

// Stats returns discovery counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

func info(o s3client.Object) store.ObjectInfo {
	return store.ObjectInfo{Path: o.Key, Size: o.Size, ModTime: o.ModTime, ETag: o.ETag, IsDir: o.IsDir}
}

// Stat is a HEAD; when there is no such object, a key with anything below it is a directory (S3 has no
// directories: common prefixes and "dir/" markers stand for them).
func (s *Store) Stat(ctx context.Context, p string) (store.ObjectInfo, error) {
	return s.stat(ctx, p, true)
}

// StatFresh is Stat without the shared attribute cache: a HEAD (and a one-key listing for a
// directory) now. The loss check needs it: the cache says an object exists for up to AttrsTTL after
// the mount last saw it, also when it was deleted beside the mount meanwhile.
func (s *Store) StatFresh(ctx context.Context, p string) (store.ObjectInfo, error) {
	return s.stat(ctx, p, false)
}

func (s *Store) stat(ctx context.Context, p string, cached bool) (store.ObjectInfo, error) {
	key, err := store.CleanKey(p)
	if err != nil {
		return store.ObjectInfo{}, err
	}
	if key == "" {
		if err := s.c.Check(ctx); err != nil {
			return store.ObjectInfo{}, err
		}
		return store.ObjectInfo{Path: "", IsDir: true}, nil
	}
	if s.opts.Attrs != nil && cached {
		if e, ok := s.opts.Attrs.Get(key, s.opts.AttrsTTL); ok && e.Exists && !e.Obj.IsDir && e.Obj.ETag != "" {
			o := e.Obj
			o.Key = key
			return info(o), nil
		}
	}
	o, err := s.c.Head(ctx, key)
	if err == nil {
		return info(o), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return store.ObjectInfo{}, err
	}
	pg, lerr := s.c.ListPage(ctx, key+"/", false, "", "", 1)
	if lerr != nil {
		return store.ObjectInfo{}, lerr
	}
	if len(pg.Objects) > 0 {
		d := store.ObjectInfo{Path: key, IsDir: true}
		if pg.Objects[0].Key == key+"/" { // a directory marker carries a time
			d.ModTime = pg.Objects[0].ModTime
		}
		return d, nil
	}
	return store.ObjectInfo{}, store.NotExist("stat", key)
}

// StatObserved judges seen, the version of seen.Path the mount's conditional request (If-Match on
// seen.ETag) is about to change. With the shared cache (a server that honours If-Match) that is exactly
// seen, whatever the cache holds by now: were the decision to judge the mtime of another, old version
// while the request is conditional on a young one, the young (in-flight) object would be deleted.
// Without it (FreshETags: the condition protects nothing) a HEAD of its own, later than the mount's
// look, is judged: it sees a version that replaced seen meanwhile; but a 404 then (a node of a flapping
// server that has not seen it, a delete beside the mount) must not make the object count as gone and
// its deletion allowed, so seen is judged. A directory, or an object without an ETag, is stat'ed as usual.
func (s *Store) StatObserved(ctx context.Context, seen store.ObjectInfo) (store.ObjectInfo, error) {
	key, err := store.CleanKey(seen.Path)
	if err != nil {
		return store.ObjectInfo{}, err
	}
	if key == "" || seen.IsDir || seen.ETag == "" {
		return s.Stat(ctx, key)
	}
	seen.Path = key
	if s.opts.Attrs != nil {
		return seen, nil
	}
	o, err := s.c.Head(ctx, key)
	switch {
	case err == nil:
		return info(o), nil
	case errors.Is(err, fs.ErrNotExist):
		return seen, nil
	}
	return store.ObjectInfo{}, err
}

// Open HEADs the object and returns a reader whose ranged GETs are pinned to the ETag seen, so a reader
// never mixes two versions of a replaced object (it fails with ESTALE instead).
func (s *Store) Open(ctx context.Context, p string) (store.Reader, error) {
	key, err := store.CleanKey(p)
	if err != nil {
		return nil, err
	}
	o, err := s.c.Head(ctx, key)
	if err != nil {
		return nil, err
	}
	s.Learn(key)
	return &reader{ctx: ctx, c: s.c, key: key, size: o.Size, etag: o.ETag, block: s.opts.BlockSize}, nil
}

// Walk lists every object below the directory prefix, page by page, in key order. Directory markers
// ("dir/") are reported as directories.
func (s *Store) Walk(ctx context.Context, prefix string, fn func(store.ObjectInfo) error) error {
	key, err := store.CleanKey(prefix)
	if err != nil {
		return err
	}
	if key != "" {
		key += "/"
	}
	return s.c.Walk(ctx, key, func(o s3client.Object) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasSuffix(o.Key, "/") {
			o.Key, o.IsDir = strings.TrimSuffix(o.Key, "/"), true
			if o.Key == "" {
				return nil
			}
		}
		if store.InQuarantine(o.Key) {
			return nil // staged deletions are not store data (store.QuarantineDir)
		}
		return fn(info(o))
	})
}

// reader reads one object with block-aligned ranged GETs and keeps the last block, so the parser's many
// small reads cost one request per block.
type reader struct {
	ctx   context.Context
	c     *s3client.Client
	key   string
	size  int64
	etag  string
	block int64

	mu     sync.Mutex
	bufOff int64
	buf    []byte
}

func (r *reader) Size() int64  { return r.size }
func (r *reader) Close() error { return nil }

func (r *reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s: negative offset", r.key)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && off < r.size {
		r.mu.Lock()
		if r.buf == nil || off < r.bufOff || off >= r.bufOff+int64(len(r.buf)) {
			start := off - off%r.block
			want := min(r.block, r.size-start)
			if int64(len(p)-n) > r.block { // large reads go straight through
				start, want = off, min(int64(len(p)-n), r.size-off)
			}
			b := make([]byte, want)
			m, err := r.c.ReadAt(r.ctx, r.key, b, start, r.etag)
			if err != nil && (err != io.EOF || int64(m) != want) {
				r.mu.Unlock()
				switch {
				case err == io.EOF:
					err = fmt.Errorf("read %s: object shorter than its size %d: %w", r.key, r.size, io.ErrUnexpectedEOF)
				case errors.Is(err, s3client.ErrPrecondition):
					// Replaced since the open (If-Match of its ETag failed): blocks read so far are of
					// another object.
					err = fmt.Errorf("read %s: %w (%w)", r.key, store.ErrChanged, err)
				}
				return n, err
			}
			r.buf, r.bufOff = b, start
		}
		c := copy(p[n:], r.buf[off-r.bufOff:])
		r.mu.Unlock()
		n += c
		off += int64(c)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
