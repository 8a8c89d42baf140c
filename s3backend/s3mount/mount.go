// Package s3mount is the guard FUSE filesystem over an S3 bucket/prefix: the same guarded operations as the
// local mount (localbackend/localfs), decided through fs/guard's Enforcer, with S3's namespace (common prefixes and
// "dir/" markers), ranged reads with readahead, spooled writes uploaded on close, conditional deletes, and
// streamed directory listings. docs/SEMANTICS.md describes every operation and how stale a view can be.
package s3mount

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/fs/mountutil"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/s3backend/deleteq"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// Options configure an S3 guard mount.
// ListingSink takes complete folder listings (refindex.ListingEvidence): BeginListing starts one whose
// first page was requested at started; add takes each key and subfolder of each page, in order, as the
// bucket names them; end(true) hands it over after its last page, end(false) drops one that failed or
// stopped before it.
type ListingSink interface {
	BeginListing(dir string, started time.Time) (add func(key string), end func(complete bool))
}

type Options struct {
	Client     *s3client.Client
	Mountpoint string
	Enforcer   *guard.Enforcer
	Metrics    *metrics.Metrics // nil: no FUSE latency metrics
	AllowOther bool
	Debug      bool
	Logger     *slog.Logger

	// SpoolDir holds files being written until they are uploaded on close. Default: a fresh directory under
	// os.TempDir(), removed at unmount.
	SpoolDir string
	// StatTTL bounds how long a listed or HEADed attribute answers stat (default 10s). See
	// s3client.AttrCache. A change made beside the mount shows within StatTTL plus the kernel's 1 s.
	StatTTL time.Duration
	// ETagTTL bounds how old a cached ETag unlink/rename may use for their conditional request (default 60s).
	ETagTTL time.Duration
	// FreshETags makes unlink HEAD the object before every decision instead of using a cached ETag: for
	// servers that ignore If-Match on DeleteObject (ProbeIfMatch), where a stale ETag would not stop the
	// delete of an object replaced since it was listed.
	FreshETags bool
	// ReadChunk is the size of one readahead GET (default 8 MiB); ReadAhead the number of chunks fetched
	// in parallel ahead of a sequential reader (default 8: like aws s3 cp's 10 concurrent ranges, about
	// 80 MiB of memory per sequentially read open file).
	ReadChunk int64
	ReadAhead int
	// ReadMemory bounds the chunk buffers all open files hold together (default 256 MiB: three
	// sequential readers at full readahead). Past it a read fetches exactly the range it asks for, as a
	// random reader's does: any user of an --allow-other mount can open files by the thousand and read a
	// byte of each, and each would otherwise make the daemon fetch and hold ReadAhead+1 chunks.
	ReadMemory int64
	// KernelReadAhead is the kernel's readahead for the mount (its BDI's read_ahead_kb), default 4 MiB: the
	// kernel otherwise caps FUSE readahead at 128 KiB whatever max_readahead the INIT reply asks for, so a
	// sequential reader's cp turns into one 128 KiB READ request (and context switch) after another.
	// Setting it needs root (it is skipped otherwise); < 0 leaves the kernel's default.
	KernelReadAhead int64
	// PartSize is the multipart part size; files larger than it are uploaded in parts (default 16 MiB),
	// UploadParallel parts at a time (default 4).
	PartSize       int64
	UploadParallel int
	// PageSize is the number of keys per ListObjectsV2 page in readdir (default 1000, the S3 maximum).
	PageSize int32
	// ListAhead is how many listing requests the mount sends ahead of a walk's opendirs at once (0: 8;
	// negative: none): the first pages of the subfolders a readdir shows and, deeper, of those the pages
	// listed ahead show, and the following pages of big folders. See listAhead.
	ListAhead int
	// ListAheadMemory bounds the memory of the pages listed ahead and not yet opened (default 32 MiB):
	// beyond it no page is listed ahead, and the folder a walk would reach last is evicted.
	ListAheadMemory int64
	// MaxInodes bounds the file inodes the kernel (and go-fuse, and so the mount) holds: beyond it the
	// oldest not touched since are pruned (default 50,000, about 35 MB of the mount's memory; < 0: no
	// bound, the kernel keeps what it looked up until memory pressure). See inodes.
	MaxInodes int
	// UID/GID own every file (default: the mount process's).
	UID, GID uint32
	// Attrs is the attribute cache; share it with the index's store (s3store.Options.Attrs) so a decision
	// about an object the mount just listed costs no HEAD. Default: a private cache.
	Attrs *s3client.AttrCache
	// DeleteQueueDir, when set (the index directory), makes unlink acknowledge an allowed deletion once it
	// is in the durable queue there and apply it afterwards in rounds (s3backend/deleteq); "" (or
	// FreshETags) deletes synchronously in unlink. DeleteBatch: the server honours per-key ETags in
	// DeleteObjects (ProbeBatchIfMatch), so rounds are batches. DeleteQueueLimit bounds the queue
	// (default 100,000); a full queue makes unlink delete synchronously.
	DeleteQueueDir   string
	DeleteBatch      bool
	DeleteQueueLimit int
	// Quarantine, when set, stages every allowed deletion in the store's quarantine area
	// (s3backend/s3quarantine: a server-side copy, or the delete marker on a versioned bucket) instead
	// of destroying it.
	Quarantine Area
	// Listings, when set, receives every complete folder listing a readdir made (all pages, in order,
	// none failed): the loss check takes them as evidence that the keys they showed existed when the
	// first page was requested (refindex.ListingEvidence), and sends fewer requests of its own while a
	// find or rm walks the bucket.
	Listings ListingSink

	tuneQueue       func(*deleteq.Options) // tests
	inoHash         func(string) uint64    // tests
	listAheadTTL    time.Duration          // tests
	listAheadClock  aheadClock             // tests
	listAheadEvents func()                 // tests
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.StatTTL <= 0 {
		o.StatTTL = 10 * time.Second
	}
	if o.ETagTTL <= 0 {
		o.ETagTTL = time.Minute
	}
	if o.ReadChunk <= 0 {
		o.ReadChunk = 8 << 20
	}
	if o.ReadAhead <= 0 {
		o.ReadAhead = 8
	}
	if o.ReadMemory <= 0 {
		o.ReadMemory = 256 << 20
	}
	if o.KernelReadAhead == 0 {
		o.KernelReadAhead = 4 << 20
	}
	if o.PartSize <= 0 {
		o.PartSize = 16 << 20
	}
	if o.UploadParallel <= 0 {
		o.UploadParallel = 4
	}
	if o.PageSize <= 0 {
		o.PageSize = 1000
	}
	if o.MaxInodes == 0 {
		o.MaxInodes = DefaultMaxInodes
	}
	if o.Attrs == nil {
		o.Attrs = s3client.NewAttrCache(DefaultCacheEntries)
	}
	if o.UID == 0 && o.GID == 0 {
		o.UID, o.GID = uint32(os.Getuid()), uint32(os.Getgid())
	}
}

// DefaultCacheEntries bounds the attribute cache (about 220 bytes an entry, so about 45 MB whatever the
// bucket holds): a walk needs the entries of the pages it is consuming, a decision those of the objects
// just listed; what is evicted is asked for again (s3client.AttrCache).
const DefaultCacheEntries = 200_000

// DefaultMaxInodes is the default of Options.MaxInodes.
const DefaultMaxInodes = 50_000

// Mounted is a running S3 guard mount.
type Mounted struct {
	server     *fuse.Server
	mountpoint string
	fsys       *filesystem
	stopPrune  context.CancelFunc
}

// Mount checks the bucket, mounts, and returns once the kernel has the mount. A stale mount left by a
// crashed daemon on the mountpoint is replaced; a live one is an error.
// StagingArea is the quarantine area the mount stages deletions in (nil without --quarantine).
func (m *Mounted) StagingArea() quarantine.Staging {
	if m.fsys.opts.Quarantine == nil {
		return nil
	}
	return m.fsys.opts.Quarantine
}

func Mount(ctx context.Context, o Options) (*Mounted, error) {
	o.defaults()
	if o.Enforcer == nil {
		return nil, fmt.Errorf("mount %s: no enforcer", o.Mountpoint)
	}
	if o.Client == nil {
		return nil, fmt.Errorf("mount %s: no S3 client", o.Mountpoint)
	}
	loc := o.Client.Location()
	if err := o.Client.Check(ctx); err != nil {
		return nil, fmt.Errorf("bucket %s is not reachable (check --s3-endpoint, credentials, --s3-path-style): %w", loc, err)
	}
	mnt, err := mountutil.PrepareAbs(o.Mountpoint, o.Logger)
	if err != nil {
		return nil, err
	}
	ownSpool := o.SpoolDir == ""
	if ownSpool {
		if o.SpoolDir, err = os.MkdirTemp("", "ckguard-spool-"); err != nil {
			return nil, fmt.Errorf("spool directory: %w", err)
		}
	} else if err := os.MkdirAll(o.SpoolDir, 0o700); err != nil {
		return nil, fmt.Errorf("spool directory: %w", err)
	}
	fsys := &filesystem{opts: o, c: o.Client, g: o.Enforcer, cache: o.Attrs, log: o.Logger,
		started: time.Now(), ownSpool: ownSpool, inos: newInodes(o.MaxInodes, o.Logger)}
	fsys.ahead = newListAhead(aheadConfig{lister: o.Client, pageSize: o.PageSize, max: o.ListAhead, ttl: o.listAheadTTL,
		budget: o.ListAheadMemory, clock: o.listAheadClock, events: o.listAheadEvents})
	if o.inoHash != nil {
		fsys.inos.hash = o.inoHash
	}
	if err := fsys.openQueue(); err != nil {
		return nil, err
	}
	root := &node{fsys: fsys}
	opts := mountutil.RemoteOptions(o.UID, o.GID)
	opts.MountOptions = fuse.MountOptions{
		AllowOther:    o.AllowOther,
		FsName:        loc.String(),
		Name:          "ckguard-s3",
		Options:       []string{"default_permissions"},
		DirectMount:   true,
		Debug:         o.Debug,
		MaxReadAhead:  1 << 20, // the most one READ request can carry (max_pages); see KernelReadAhead
		MaxWrite:      1 << 20,
		MaxBackground: 64,
	}
	server, err := mountutil.Serve(root, mnt, opts, o.Metrics, loc.String())
	if err != nil {
		fsys.closeQueue()
		return nil, err
	}
	if err := mountutil.SetKernelReadAhead(mnt, o.KernelReadAhead); err != nil {
		o.Logger.Debug("could not raise the kernel's readahead of the mount (sequential reads stay in 128 KiB requests)", "err", err)
	}
	pctx, stop := context.WithCancel(context.Background())
	fsys.inos.mu.Lock()
	fsys.inos.root = root.EmbeddedInode()
	fsys.inos.mu.Unlock()
	go fsys.inos.run(pctx)
	return &Mounted{server: server, mountpoint: mnt, fsys: fsys, stopPrune: stop}, nil
}

// Mountpoint is the absolute mountpoint.
func (m *Mounted) Mountpoint() string { return m.mountpoint }

// Unmount unmounts (EBUSY while files are open, like umount(8)) and removes the mount's own spool.
func (m *Mounted) Unmount() error {
	if err := m.server.Unmount(); err != nil {
		return err
	}
	m.cleanup()
	return nil
}

// Wait blocks until the mount is gone.
func (m *Mounted) Wait() {
	m.server.Wait()
	m.cleanup()
}

func (m *Mounted) cleanup() {
	m.stopPrune()
	m.fsys.ahead.stop() // the listings nobody will read
	m.fsys.closeQueue()
	if m.fsys.ownSpool {
		_ = os.RemoveAll(m.fsys.opts.SpoolDir)
	}
}
