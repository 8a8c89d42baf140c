package refindex

import (
	"io"
	"log/slog"
	"time"

	"github.com/ckguard/ckguard/refindex/pathnorm"
)

// Option configures Open.
type Option func(*options)

type options struct {
	maps        []pathnorm.Mapping
	external    []string
	mountpoints []string
	entropyKey  string
	log         *slog.Logger
	progress    io.Writer
	progressLog time.Duration // without progress: log progress this often (0: default, < 0: never)
	workers     int
	rebuild     bool
	parse       parseFunc
	ports       map[string]int
	work        func() (done func())
	txnWrites   int // > 0: an apply commits after this many writes (tests of multi-transaction changes)
	history     HistoryLimits
	sharedPins  SharedPins // pins from the store's shared area (sharedpins.go)
	valueThresh int64      // > 0: badger's ValueThreshold instead of the index's (tests: an index written with values in the value log)
}

// WithPathMap sets the prefix maps (--map) and the S3 entropy key (--entropy-key) used to normalise
// references. Changing them changes derived keys: the next Sync rebuilds the index.
func WithPathMap(maps []pathnorm.Mapping, entropyKey string) Option {
	return func(o *options) { o.maps, o.entropyKey = maps, entropyKey }
}

// WithExternal declares URI prefixes of other storage that checkpoints may legitimately reference
// (--external): references below them are reported, never refused (pathnorm.Config.External). Changing
// them changes the index: the next Sync rebuilds it.
func WithExternal(prefixes []string) Option {
	return func(o *options) { o.external = prefixes }
}

// WithMountpoint tells the index that a guard mount shows the store at dir: Flink configured with the
// mountpoint writes references as file:<dir>/…, and they name store keys. The prefix map file:<dir>= is
// added unless a --map already maps that prefix (the user's mapping wins). Both mount daemons set it.
func WithMountpoint(dir string) Option {
	return func(o *options) { o.mountpoints = append(o.mountpoints, dir) }
}

// WithDefaultPorts sets the port an authority without one means, per scheme (nil = hdfs 8020; see
// pathnorm.Config.DefaultPorts).
func WithDefaultPorts(ports map[string]int) Option { return func(o *options) { o.ports = ports } }

// WithWork sets a hook called when CPU-heavy index work starts (a sync, a rebuild, the reference
// filter's fill, a verify or orphans walk); the work calls the function it returns when it ends. A mount
// daemon raises GOMAXPROCS for that time (fs/procs).
func WithWork(begin func() (done func())) Option { return func(o *options) { o.work = begin } }

// WithLogger sets the structured logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithProgress shows progress bars for rebuild, sync, verify and orphans on w (pass os.Stderr when it is a
// terminal; nil = none).
func WithProgress(w io.Writer) Option { return func(o *options) { o.progress = w } }

// WithProgressLog sets how often long work (a rebuild's listing and parse, a sync's parse, verify,
// orphans) logs a progress line at level info when no WithProgress writer is set: a daemon's journal
// then shows a rebuild of a big bucket advancing. 0 = every 30 s (the default), negative = never.
func WithProgressLog(every time.Duration) Option { return func(o *options) { o.progressLog = every } }

// WithParseWorkers bounds how many `_metadata` files are read and parsed at once (default 2×CPUs,
// at least 4: reading is I/O bound on network stores).
func WithParseWorkers(n int) Option { return func(o *options) { o.workers = n } }

// WithFreshIndex makes Open start from an empty generation when the current one cannot be used
// (another schema, a damaged generation) instead of failing; that generation is stale, so the caller
// then runs Rebuild, or Sync (which rebuilds it). A usable generation is still opened. `ckguard index
// rebuild` and the mount use it.
func WithFreshIndex() Option { return func(o *options) { o.rebuild = true } }
