package main

// Shared CLI plumbing of the index commands: --store/--index/--map/--entropy-key, the policy flags,
// --json output, and opening a Querier (a running mount's control socket first, else the index).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/cmd/ckguard/backends"
	"github.com/ckguard/ckguard/cmd/ckguard/graph"
	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/internal/jsonbytes"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/shared"
)

// Exit statuses every command follows (README "Exit codes"; main maps any other error to exitUsage).
const (
	exitOK        = 0 // the job was done and nothing wrong was found
	exitFound     = 1 // a problem was found: verify red, why refused, inspect cannot parse, demo misbehaved
	exitUsage     = 2 // usage or operational error: bad flags/arguments, store or index unreachable
	exitUntrusted = 3 // the answer cannot be trusted right now (stale index, failed sync, unparseable _metadata)
)

// locationFlags name the store and the index: every command that reads a store takes them.
func locationFlags() []cli.Flag {
	f := []cli.Flag{
		// Checked by requireStore (one line naming the flag) rather than urfave's Required, which prints
		// the whole help and then misreads PATH as a command name.
		&cli.StringFlag{Name: "store", EnvVars: []string{"CKGUARD_STORE"}, Usage: "checkpoint storage: a local/NFS directory, s3://bucket/prefix hdfs://namenode:8020/path or viewfs://cluster/path (required; or set CKGUARD_STORE)"},
		&cli.StringFlag{Name: "index", EnvVars: []string{"CKGUARD_INDEX"}, Usage: "index directory (default: the store's folder in $XDG_CACHE_HOME/ckguard, one per store whatever path names it; a running mount's when one guards the store)"},
		&cli.StringSliceFlag{Name: "map", Usage: "prefix map `PREFIX=STOREPATH` tying URIs written in _metadata to the store (repeatable), e.g. file:/flink/ckpt= or hdfs://nn:8020/flink=flink"},
		&cli.StringSliceFlag{Name: "external", Usage: "URI `PREFIX` of other storage that checkpoints legitimately reference (another bucket, savepoints on HDFS; repeatable): reported, not refused"},
		&cli.StringFlag{Name: "entropy-key", Usage: "Flink's s3.entropy.key (e.g. _entropy_), when checkpoints use entropy injection"},
	}
	return append(f, backends.Flags()...)
}

// jsonFlag is --json, on every command that can print JSON.
func jsonFlag() cli.Flag {
	return &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table (snake_case keys, RFC 3339 times, durations as in the flags: \"7d\")"}
}

// storeFlags are the flags of the query commands: the location, --json, and how to reach the index
// (a running mount's control socket, else the index opened directly).
func storeFlags() []cli.Flag {
	return append(locationFlags(),
		jsonFlag(),
		&cli.StringFlag{Name: "control-socket", Usage: "query a running mount through this socket (default: INDEX/" + control.SocketName + " when it answers)"},
		&cli.BoolFlag{Name: "no-sync", Usage: "when opening the index directly, do not sync it with the store first"},
	)
}

// durationFlag is a duration flag in ckguard's one syntax (Go's plus d and w: 90s, 1h, 7d, 2w);
// anything else, and a negative value, is rejected with one line naming the syntax.
func durationFlag(name string, value time.Duration, usage string, opts ...duration.FlagOption) cli.Flag {
	return duration.Flag(name, value, usage, opts...)
}

// policyFlags are the decision policy flags (wherever a decision is made).
func policyFlags() []cli.Flag {
	d := refindex.DefaultPolicy()
	return []cli.Flag{
		durationFlag("grace", d.Grace, "protect unreferenced files younger than this (in-flight checkpoints); e.g. 90s, 1h, 0s"),
		durationFlag("active-window", d.ActiveWindow, "protect the newest checkpoint _metadata of jobs whose newest checkpoint completed within this window; e.g. 7d, 2w"),
		durationFlag("max-staleness", d.MaxStaleness, "refuse everything when the index's last complete sync is older than this (0s = no limit)"),
		&cli.StringSliceFlag{Name: "protect", Usage: "never remove store paths matching this `GLOB` or anything below them (repeatable); a glob without / matches a file or folder name at any depth (ha, savepoint-*), one with / matches paths from the store root (flink/ha, */ha, /ha)"},
		&cli.BoolFlag{Name: "savepoint-keep-newest", Value: d.SavepointKeepNewest, Usage: "protect the _metadata of the newest savepoint of every job, whatever its age (--savepoint-keep-newest=false to dispose of one through the mount)"},
		durationFlag("savepoint-retention", d.SavepointRetention, "protect the _metadata of every savepoint completed within this period, e.g. 30d (0s = off)"),
		&cli.StringSliceFlag{Name: "forst-primary", Usage: "a ForSt primary dir set apart from the checkpoint dir (state.backend.forst.primary-dir), as a `FOLDER` relative to the store root or the URI Flink has (repeatable): its <job id>/op_*_attempt_*/ working folders are protected while their job is active (working folders in <job>/shared/ are recognised without it)"},
	}
}

// policyFrom reads the policy flags (defaults when a command has none).
func policyFrom(c *cli.Context) (refindex.Policy, error) {
	p := refindex.DefaultPolicy()
	if hasFlag(c, "grace") {
		p.Grace = c.Duration("grace")
		p.ActiveWindow = c.Duration("active-window")
		p.MaxStaleness = c.Duration("max-staleness")
		p.Protect = c.StringSlice("protect")
		p.SavepointKeepNewest = c.Bool("savepoint-keep-newest")
		p.SavepointRetention = c.Duration("savepoint-retention")
		p.ForStPrimary = c.StringSlice("forst-primary")
		if err := protectNotHostPaths(p.Protect, c.String("store"), c.Args().First()); err != nil {
			return p, err
		}
	}
	return p, p.Validate()
}

// usageError is a bad invocation of the running command: one line naming the command and where the
// full help is, exit status exitUsage.
func usageError(c *cli.Context, format string, args ...any) error {
	name := "ckguard"
	if c != nil && c.Command != nil && c.Command.FullName() != "" {
		name += " " + c.Command.FullName()
	}
	return cli.Exit(fmt.Sprintf("%s: %s (see `%s --help`)", name, fmt.Sprintf(format, args...), name), exitUsage)
}

// requireStore is the Before hook of every command with --store: without it nothing can be answered.
func requireStore(c *cli.Context) error {
	if c.String("store") == "" {
		return usageError(c, "--store is required: the checkpoint storage, a local/NFS directory or s3://bucket/prefix (or set CKGUARD_STORE)")
	}
	return nil
}

// protectNotHostPaths refuses a --protect glob written as a path on this host (below the store directory
// or the mountpoint) or as a URI: globs are matched against store keys, relative to the store root, so
// such a glob would match nothing and protect nothing without a word.
func protectNotHostPaths(globs []string, dirs ...string) error {
	for _, g := range globs {
		if strings.Contains(g, "://") {
			return fmt.Errorf("--protect %q is a URI; give the path relative to the store root (e.g. flink/ha) or a name (ha)", g)
		}
		for _, d := range dirs {
			if d == "" || strings.Contains(d, "://") {
				continue
			}
			abs, err := filepath.Abs(d)
			if err != nil {
				continue
			}
			for _, root := range []string{filepath.Clean(d), abs} {
				if root == "/" {
					continue
				}
				if filepath.Clean(g) == root {
					return fmt.Errorf("--protect %q is the directory %s itself, on this host; globs are relative to the store root (e.g. flink/ha, or a name: ha)", g, root)
				}
				if rel, ok := strings.CutPrefix(filepath.Clean(g), root+"/"); ok {
					return fmt.Errorf("--protect %q is a path on this host, below %s; give it relative to the store root (--protect %q)", g, root, rel)
				}
			}
		}
	}
	return nil
}

// hasFlag reports whether the running command defines flag name.
func hasFlag(c *cli.Context, name string) bool {
	if c.Command == nil {
		return false
	}
	for _, f := range c.Command.Flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

// pathMaps parses the --map flags.
func pathMaps(c *cli.Context) ([]pathnorm.Mapping, error) {
	var maps []pathnorm.Mapping
	for _, m := range c.StringSlice("map") {
		pm, err := pathnorm.ParseMapping(m)
		if err != nil {
			return nil, err
		}
		maps = append(maps, pm)
	}
	return maps, nil
}

// storeRefs reads references straight from the store's _metadata, normalised by the --map and
// --entropy-key flags, attributing entropy-injected keys to the job folders of res.
func storeRefs(c *cli.Context, res *refindex.CheckpointsResult) (*graph.StoreRefs, error) {
	st, err := openStore(c)
	if err != nil {
		return nil, err
	}
	maps, err := pathMaps(c)
	if err != nil {
		return nil, exitf(exitUsage, "%v", err)
	}
	refs, err := graph.NewStoreRefs(st, maps, c.String("entropy-key"))
	if err != nil {
		return nil, exitf(exitUsage, "%v", err)
	}
	known := map[string]bool{}
	for _, j := range res.Jobs {
		known[j.Job] = true
	}
	refs.Known = func(f string) bool { return known[f] }
	return refs, nil
}

// indexOptions builds the index options from the path flags.
func indexOptions(c *cli.Context) ([]refindex.Option, error) {
	maps, err := pathMaps(c)
	if err != nil {
		return nil, err
	}
	opts := []refindex.Option{refindex.WithPathMap(maps, c.String("entropy-key")), refindex.WithExternal(c.StringSlice("external")), refindex.WithLogger(cliLogger())}
	if isTerminal(os.Stderr) {
		opts = append(opts, refindex.WithProgress(os.Stderr))
	}
	return opts, nil
}

func cliLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("CKGUARD_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// openStore opens --store.
func openStore(c *cli.Context) (store.Store, error) {
	s := c.String("store")
	return backends.For(s).OpenStore(c, s)
}

// openSharedArea opens the store and returns its shared state area: nil (and no error) when no
// --shared mount made one.
func openSharedArea(c *cli.Context) (shared.CAS, error) {
	st, err := openStore(c)
	if err != nil {
		return nil, err
	}
	return backends.For(c.String("store")).SharedArea(c.Context, c.String("store"), st)
}

// openIndex opens the index directly (no mount running), with extra options.
func openIndex(c *cli.Context, extra ...refindex.Option) (*refindex.Index, error) {
	st, err := openStore(c)
	if err != nil {
		return nil, err
	}
	dir, err := indexDir(c)
	if err != nil {
		return nil, err
	}
	pol, err := policyFrom(c)
	if err != nil {
		return nil, cli.Exit(err.Error(), 2)
	}
	opts, err := indexOptions(c)
	if err != nil {
		return nil, cli.Exit(err.Error(), 2)
	}
	// A store with a shared state area (a --shared mount made it) keeps its pins there: the index
	// opened here reads and writes them there too (fleet.go).
	area, err := backends.For(c.String("store")).SharedArea(c.Context, c.String("store"), st)
	if err != nil {
		return nil, err
	}
	if area != nil {
		host, _ := os.Hostname()
		opts = append(opts, refindex.WithSharedPins(shared.NewPins(area, host)))
	}
	softMemoryLimit(cliMemoryLimit)
	ix, err := refindex.Open(dir, st, pol, append(opts, extra...)...)
	if err != nil {
		return nil, err
	}
	recordIdentity(c, dir)
	return ix, nil
}

// openQuerier returns the Querier for a command: a running mount's control socket when one answers
// (the mount holds the index lock and its own policy), else the index opened directly and — unless
// --no-sync — synced with the store first, so that answers reflect the store as it is now.
func openQuerier(c *cli.Context) (refindex.Querier, func() error, error) {
	dir, err := indexDir(c)
	if err != nil {
		return nil, nil, err
	}
	sock := c.String("control-socket")
	explicit := sock != ""
	if !explicit {
		sock = control.DefaultSocket(dir)
	}
	if _, err := os.Stat(sock); err == nil || explicit {
		q, err := control.DialQuerier(sock)
		if err == nil {
			return q, q.Close, nil
		}
		if explicit {
			return nil, nil, fmt.Errorf("control socket %s: %w", sock, err)
		}
	}
	ix, err := openIndex(c)
	if err != nil {
		return nil, nil, err
	}
	if !c.Bool("no-sync") {
		if err := ix.Sync(c.Context); err != nil {
			ix.Close()
			return nil, nil, fmt.Errorf("sync index with %s: %w", c.String("store"), err)
		}
	}
	return ix, ix.Close, nil
}

// storeKey turns a command-line PATH into a store key: paths under a ckguard mount of this store and
// absolute paths under a local --store are made relative to it; a relative path that exists where the
// user stands (inside the store or the mount) is that file; anything else is taken as a key.
func storeKey(c *cli.Context, p string) string {
	s := c.String("store")
	if !filepath.IsAbs(p) && !strings.Contains(p, "://") {
		if _, err := os.Lstat(p); err == nil {
			if a, err := filepath.Abs(p); err == nil {
				if k, ok := absStoreKey(s, a); ok {
					return k
				}
			}
		}
		return strings.Trim(p, "/")
	}
	if filepath.IsAbs(p) {
		if k, ok := absStoreKey(s, p); ok {
			return k
		}
	}
	return uriStoreKey(s, p)
}

// absStoreKey maps an absolute local path to a store key: under a ckguard mount of the store, or under
// the local store directory itself.
func absStoreKey(s, p string) (string, bool) {
	mounts := localGuardMounts()
	for _, cand := range []string{p, evalOr(p)} {
		if k, ok := mountRelative(mounts, s, cand); ok {
			return k, true
		}
	}
	if !backends.For(s).Remote() {
		if root, err := filepath.Abs(s); err == nil {
			if r, err := filepath.EvalSymlinks(root); err == nil {
				root = r
			}
			for _, cand := range []string{p, evalOr(p)} {
				if rel, err := filepath.Rel(root, cand); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
					if rel == "." {
						return "", true
					}
					return filepath.ToSlash(rel), true
				}
			}
		}
	}
	return "", false
}

// uriStoreKey maps a URI under --store to its key (backends.Backend.KeyOfURI); anything else is taken
// as a key as written.
func uriStoreKey(s, p string) string {
	if k, ok := backends.For(s).KeyOfURI(s, p); ok {
		return k
	}
	return strings.Trim(p, "/")
}

func evalOr(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// printJSON writes v as indented JSON. A name that is not valid UTF-8 keeps its exact bytes beside
// it (jsonbytes.Printable: "NAME_bytes", base64), where JSON alone would show U+FFFD only.
func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(jsonbytes.Escape(v))
	if err == nil {
		b, err = jsonbytes.Printable(b)
	}
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// humanBytes formats a byte count.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// fmtTime is the one form of a time in text output: RFC 3339 in UTC, with its zone (as in --json).
func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// plural is "1 checkpoint", "2 checkpoints" (many: its own plural when the word is irregular).
func plural(n int, one string, many ...string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	if len(many) > 0 {
		return fmt.Sprintf("%d %s", n, many[0])
	}
	return fmt.Sprintf("%d %ss", n, one)
}

// exitf is an error with an exit status.
func exitf(code int, format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), code)
}

// query runs one question against the index (openQuerier) and prints its answer: as JSON with --json,
// else with text. The answer is returned so the command can set its exit status from it.
func query[T any](c *cli.Context, ask func(context.Context, refindex.Querier) (T, error), text func(io.Writer, T)) (res T, err error) {
	q, closeFn, err := openQuerier(c)
	if err != nil {
		return res, err
	}
	defer closeFn()
	stop := progressFor(c, q)
	res, err = ask(c.Context, q)
	stop()
	if err != nil {
		return res, err
	}
	if c.Bool("json") {
		return res, printJSON(c.App.Writer, res)
	}
	text(c.App.Writer, res)
	return res, nil
}

// Progress of a long command: the index draws bars on a terminal when the CLI opens it itself; when a
// running mount answers (the work happens in the daemon) or stderr is a log, a line every
// progressEvery says the command is still at work, so nothing looks hung.
const (
	progressFirst = 5 * time.Second
	progressEvery = 15 * time.Second
)

// progressFor starts the still-working lines for the running command on q; stop ends them.
func progressFor(c *cli.Context, q refindex.Querier) (stop func()) {
	if _, direct := q.(*refindex.Index); direct && isTerminal(os.Stderr) {
		return func() {} // the index's own progress bars
	}
	via := "the index"
	switch q.(type) {
	case nil:
		via = "the store"
	case *refindex.Index:
	default:
		via = "the running mount"
	}
	// Ticks after progressFirst, then every progressEvery, until quit.
	ticks, quit := make(chan time.Time), make(chan struct{})
	go func() {
		wait := progressFirst
		for {
			t := time.NewTimer(wait)
			select {
			case now := <-t.C:
				select {
				case ticks <- now:
				case <-quit:
					return
				}
			case <-quit:
				t.Stop()
				return
			}
			wait = progressEvery
		}
	}()
	s := stillWorking(cliProgressLogger(), "ckguard "+c.Command.FullName(), via, time.Now, ticks)
	return func() {
		s()
		close(quit)
	}
}

// stillWorking logs, at every tick until stop, that what is still running and for how long (the
// tick's time minus now() at the start).
func stillWorking(log *slog.Logger, what, via string, now func() time.Time, ticks <-chan time.Time) (stop func()) {
	start := now()
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case t, ok := <-ticks:
				if !ok {
					return
				}
				log.Info(what+": still working", "elapsed", duration.Format(t.Sub(start).Round(time.Second)), "via", via)
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-exited }) }
}

// cliProgressLogger logs progress lines (level info, unlike cliLogger's warnings) to stderr.
func cliProgressLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// The soft limits on the Go heap (runtime/debug.SetMemoryLimit) unless GOMEMLIMIT is set. A rebuild of
// millions of references churns through parse garbage, and the default GOGC lets the heap grow to twice
// its live size before collecting; under the limit the collector runs earlier instead. It is soft: a
// live heap above it is never refused memory (the collector only works harder, at most half the CPU),
// so it caps no correctness, only the garbage kept.
const (
	cliMemoryLimit = 512 << 20
	// mountMemoryLimit is the mount's: its steady state is the index's caches (badger memtables and
	// block cache, under 200 MiB), the bounded attribute cache and inode table, and a sync's working
	// set; the first build of a big store is its peak.
	mountMemoryLimit = 768 << 20
)

func softMemoryLimit(limit int64) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(limit)
	}
}
