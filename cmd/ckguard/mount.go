package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/cmd/ckguard/backends"
	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/fs/daemon"
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/internal/bytesize"
	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinkrest"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// defaultQuarantine is how long an allowed deletion stays restorable: the post-mortem's procedure ("move
// the folder to a temporary location, watch for 24 hours, only then delete") and the monitoring rules'
// assumption. A day covers a cleanup run overnight noticed the next morning, and costs the store one
// day of deletions in space (ckguard_quarantine_bytes shows it).
const defaultQuarantine = 24 * time.Hour

func mountCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.BoolFlag{Name: "allow-other", Usage: "let other users use the mount (kernel permission checks stay on)"},
		durationFlag("sync-interval", 30*time.Second, "re-sync the index with the store this often (picks up changes made directly); keep it well below --max-staleness"),
		&cli.StringFlag{Name: "refuse-errno", Value: "EPERM", Usage: "errno for refused operations: EPERM, EACCES, EROFS, EBUSY or a number"},
		&cli.StringFlag{Name: "audit-log", Usage: "JSON-lines audit log of every decision (default INDEX/audit.jsonl)"},
		durationFlag("audit-fsync", time.Second, "fsync the audit log this often (records are written before each reply regardless); negative: after every record", duration.AllowNegative()),
		&cli.StringFlag{Name: "metrics-addr", Usage: "serve Prometheus metrics on this address, e.g. 127.0.0.1:9477"},
		&cli.BoolFlag{Name: "foreground", Aliases: []string{"f"}, Usage: "stay in the foreground (for systemd Type=notify and containers); default: detach once mounted"},
		&cli.StringFlag{Name: "log-file", Usage: "daemon mode: log here (default INDEX/ckguard.log)"},
		&cli.BoolFlag{Name: "debug", Usage: "log every FUSE request"},
		&cli.IntFlag{Name: "loss-check-budget", Usage: "from the first sync on the mount checks, pass after pass beside the sync loop, that the objects live checkpoints reference are still in the store: at most this many requests per pass (a stat per object; on S3 a listing per 1,000 referenced keys of a folder), in a rotation of passes beyond that, besides one stat per object already found missing. Default: everything on a local store, 2000 requests on S3 (about 2,000,000 referenced objects in shared folders). -1: everything in every pass"},
		&cli.Float64Flag{Name: "loss-check-rate", Usage: "the loss check's requests per second to the store (10 a second or a fifth of it when slower, one at a time, while the mount sends requests of its own), so that it never competes with the mount for the server. Passes start three quarters of --sync-interval apart (back to back when one takes longer) and report after every chunk of an eighth of the interval, so a loss shows within 7/8 of the interval while a pass fits in 3/4 of it: at 75 requests/s and 30 s syncs up to about 1,600,000 referenced objects in shared folders (ckguard_loss_check_bound_seconds says what the store measures). Default: 75 on S3, unpaced on a local store (a pass rests nine times its duration instead). -1: unpaced"},
		&cli.StringFlag{Name: "hold", Value: "off", Usage: "server-side holds on what live checkpoints reference (S3: a legal hold on the current version of every referenced object and _metadata, released once the guard would allow the deletion; a delete marker put on a held object beside the mount is removed; local ext4/XFS: the immutable flag FS_IMMUTABLE_FL on every referenced file and _metadata, cleared before the mount's own changes, needs CAP_LINUX_IMMUTABLE; HDFS: snapshots ckguard-<time> of the store root after each sync with a new checkpoint, for `ckguard restore-lost`): off, best-effort (run without them, loudly, where the bucket cannot hold) or required (refuse to start where the bucket or filesystem cannot)"},
		durationFlag("quarantine", defaultQuarantine, "stage every deletion the guard allows in the store's quarantine folder (invisible in the mount) for this long before it is purged; `ckguard quarantine list|restore|purge`. 0s: deletions are final. Default 0s on S3 (opt-in: staging there is a server-side copy per deletion) and on HDFS (opt-in: there deletions go to the HDFS trash when the NameNode has one; with --quarantine they are staged instead, a rename per deletion)"),
		&cli.StringFlag{Name: "quarantine-max-bytes", Usage: "with --quarantine: the quarantine holds at most this many bytes (e.g. 50GiB); over it the mount purges the oldest entries first, before their TTL, each logged and audited. Default: no bound"},
		&cli.StringFlag{Name: "quarantine-min-free", Value: "5%", Usage: "with --quarantine, on a local, NFS or HDFS store: while the store's filesystem (HDFS: the cluster, or the store folder's space quota) has less free than this (bytes, or a percentage of its size), the mount purges the oldest quarantine entries first, before their TTL, each logged and audited, so that the safety net never fills the disk Flink checkpoints to. 0: no bound"},
		&cli.BoolFlag{Name: "shared", Usage: "share pins and the registry of mounts with every other --shared mount of the store through its shared state folder (.ckguard at the store root, invisible in the mount): a `ckguard pin` on any host protects on every host from its next sync; `ckguard fleet` lists the mounts. Local, NFS, S3 and HDFS stores"},
		&cli.BoolFlag{Name: "shared-read-only", Usage: "as --shared, but only observe: the pins in the store's shared state folder protect through this mount, which writes nothing there (no heartbeat, no pins through it; with --quarantine it stages deletions and leaves their purge to the --shared mounts); for hosts without write access to it"},
		&cli.IntFlag{Name: "serve-procs", Value: 1, Usage: "GOMAXPROCS while the mount only answers requests (index syncs and queries raise it back); fewer idle Go threads make each request cheaper, rm -rf about 30% faster on 2 cores. 0: leave GOMAXPROCS alone. Local stores only, unless given explicitly"},
	}
	// --store, --index, --map, --entropy-key and the S3 flags are shared with every index command
	// (common.go), as are the policy flags; --json and --no-sync mean nothing here, and --control-socket
	// is where the mount serves the query commands.
	flags = append(append(append(locationFlags(), policyFlags()...),
		&cli.StringFlag{Name: "control-socket", Usage: "serve the query commands (why, checkpoints, stats, …) on this socket (default: INDEX/" + control.SocketName + ")"}), append(flinkRESTFlags(), flags...)...)
	return &cli.Command{
		Name:      "mount",
		Usage:     "mount the store through the guard: cleanup tools then delete only what no live checkpoint needs",
		ArgsUsage: "MOUNTPOINT",
		Description: "Reads, writes and listings pass through to --store; unlink, rmdir, rename and truncation ask the\n" +
			"index and are refused (with an audit record) while a live checkpoint references the file. Detaches once\n" +
			"mounted unless --foreground; SIGINT/SIGTERM or `ckguard umount MOUNTPOINT` unmount cleanly.\n\n" +
			"EXAMPLES:\n" +
			"   ckguard mount --store /srv/flink/checkpoints --index /var/lib/ckguard/flink --metrics-addr 127.0.0.1:9477 /mnt/flink-checkpoints\n" +
			"   ckguard mount --store s3://bucket/flink --index /var/lib/ckguard/s3 --s3-endpoint https://rgw.example:8443 --s3-path-style /mnt/flink-s3\n" +
			"   ckguard mount --foreground --store /srv/flink/checkpoints --index /var/lib/ckguard/flink /mnt/flink-checkpoints   # systemd Type=notify",
		Flags:  flags,
		Action: runMount,
	}
}

// checkMountConfig rejects flag combinations that would make the mount defeat itself, before anything
// is created: an index that goes stale between two syncs refuses every deletion most of the time.
func checkMountConfig(c *cli.Context, pol refindex.Policy) error {
	si := c.Duration("sync-interval")
	switch {
	case si <= 0:
		return usageError(c, "--sync-interval %s: want a positive interval such as 30s", duration.Format(si))
	case pol.MaxStaleness > 0 && pol.MaxStaleness < 2*si:
		return usageError(c, "--max-staleness %s is shorter than two --sync-interval %s: the index would go stale between syncs (or after one slow or failed sync) and every deletion would be refused; use --max-staleness %s or more, a shorter --sync-interval, or --max-staleness 0s for no limit",
			duration.Format(pol.MaxStaleness), duration.Format(si), duration.Format(4*si))
	case c.Int("serve-procs") < 0:
		return usageError(c, "--serve-procs %d: want 0 (leave GOMAXPROCS alone) or more", c.Int("serve-procs"))
	}
	return nil
}

// refusalHint is what the mount's start message tells the user at the terminal, who will only ever
// see "rm: cannot remove …: Operation not permitted": how to learn why.
func refusalHint(c *cli.Context, mnt string) string {
	return "ckguard: a refused deletion fails with \"Operation not permitted\"; to learn why:\n" +
		"  " + whyCommandLine(c, mnt, mnt+"/PATH") + "\n" +
		"  getfattr -n user.ckguard.state " + mnt + "/PATH"
}

// whyCommandLine is the `ckguard why` line for PATH on this mount.
func whyCommandLine(c *cli.Context, mnt, path string) string {
	s := "ckguard why --store " + c.String("store")
	if c.String("index") != "" {
		s += " --index " + c.String("index")
	}
	return s + " " + path
}

func runMount(c *cli.Context) error {
	f, err := parseMountFlags(c)
	if err != nil {
		return err
	}
	if err := prepareIndexDir(c, f); err != nil {
		return err
	}
	if f.logFile != "" {
		return detachMount(c, f)
	}
	return serveMountForeground(c, f)
}

// mountFlags is what runMount's phases share: the command line, checked, before anything is created.
type mountFlags struct {
	mnt       string // absolute
	indexDir  string
	errno     syscall.Errno
	pol       refindex.Policy // with the --flink-rest URLs
	flinkREST []*flinkrest.Client
	idxOpts   []refindex.Option
	// logFile is where a detached mount logs; "" when it runs in the foreground (--foreground, or the
	// child of a detach).
	logFile string
}

// parseMountFlags checks the command line; nothing is created on disk yet, so a bad flag leaves no
// index folder behind.
func parseMountFlags(c *cli.Context) (mountFlags, error) {
	var f mountFlags
	if c.NArg() != 1 {
		return f, usageError(c, "want exactly one MOUNTPOINT, got %d", c.NArg())
	}
	var err error
	if f.mnt, err = filepath.Abs(c.Args().First()); err != nil {
		return f, err
	}
	if f.indexDir, err = indexDir(c); err != nil {
		return f, err
	}
	if f.errno, err = guard.ParseErrno(c.String("refuse-errno")); err != nil {
		return f, cli.Exit(err.Error(), 2)
	}
	if f.pol, err = policyFrom(c); err != nil {
		return f, cli.Exit(err.Error(), 2)
	}
	if f.flinkREST, err = flinkClients(c); err != nil {
		return f, cli.Exit("ckguard mount: "+err.Error(), 2)
	}
	for _, cl := range f.flinkREST {
		f.pol.FlinkREST = append(f.pol.FlinkREST, cl.URL())
	}
	if err := checkMountConfig(c, f.pol); err != nil {
		return f, err
	}
	if f.idxOpts, err = indexOptions(c); err != nil {
		return f, cli.Exit(err.Error(), 2)
	}
	if !c.Bool("foreground") && !daemon.IsChild() {
		f.logFile = c.String("log-file")
		if f.logFile == "" {
			f.logFile = filepath.Join(f.indexDir, "ckguard.log")
		}
	}
	return f, nil
}

// prepareIndexDir creates the index folder and records the store's identity in it, after checking the
// placement of every path: an index inside the store would otherwise be left there.
func prepareIndexDir(c *cli.Context, f mountFlags) error {
	if err := (guardd.Config{StoreDir: c.String("store"), IndexDir: f.indexDir, Mountpoint: f.mnt, AuditLog: c.String("audit-log"),
		ControlSocket: c.String("control-socket"), LogFile: f.logFile}).CheckPlacement(); err != nil {
		return cli.Exit("ckguard mount: "+err.Error(), 2)
	}
	if err := os.MkdirAll(f.indexDir, 0o700); err != nil {
		return fmt.Errorf("index dir %s: %w", f.indexDir, err)
	}
	// The store under another path (a symlink, a bind mount) finds this index by what is recorded here.
	recordIdentity(c, f.indexDir)
	return nil
}

// detachMount starts the mount as a detached child logging to f.logFile and returns once it is
// mounted (daemon.Detach waits for the child's Ready, Fail or exit).
func detachMount(c *cli.Context, f mountFlags) error {
	if isTerminal(os.Stderr) {
		fmt.Fprintf(os.Stderr, "ckguard: syncing the index with %s, then mounting on %s (progress: %s)\n", c.String("store"), f.mnt, f.logFile)
	}
	if err := daemon.Detach(f.logFile); err != nil {
		return fmt.Errorf("mount %s: %w", f.mnt, err)
	}
	fmt.Fprintf(c.App.Writer, "ckguard: mounted %s on %s (log: %s)\n%s\n", c.String("store"), f.mnt, f.logFile, refusalHint(c, f.mnt))
	return nil
}

// serveMountForeground runs the mount in this process until it is unmounted or signalled.
func serveMountForeground(c *cli.Context, f mountFlags) error {
	level := slog.LevelInfo
	if c.Bool("debug") {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	softMemoryLimit(mountMemoryLimit)
	// Under systemd (Type=notify) the first index sync, a rebuild of a big store, may take longer than the
	// unit's TimeoutStartSec; a restart would begin it again, in a loop. Until the mount is ready the start
	// timeout keeps being extended (3 min past each minute's notice), so it only runs out on a daemon that
	// stopped making its notices.
	started := time.Now()
	stopStarting := daemon.KeepStarting(func() string {
		return fmt.Sprintf("syncing the index with %s before mounting (%s so far; progress in the log)", c.String("store"), time.Since(started).Round(time.Second))
	}, time.Minute, 3*time.Minute)
	defer stopStarting()
	cfg := mountDaemonConfig(c, f, log, stopStarting)
	backend := backends.For(cfg.StoreDir)
	if !c.IsSet("quarantine") && !backend.StagesDeletions() {
		cfg.Quarantine = 0 // staging is opt-in on this store (backends.Backend.StagesDeletions)
	}
	if cfg.Quarantine > 0 {
		b, err := quarantineBound(c)
		if err != nil {
			return err
		}
		cfg.QuarantineBound = b
	}
	if err := backend.Mount(c, cfg); err != nil {
		daemon.Fail(err)
		return err
	}
	daemon.Stopping()
	return nil
}

// mountDaemonConfig is the daemon's configuration from the flags; its Ready ends the start-timeout
// extension (stopStarting) and tells systemd the mount serves.
func mountDaemonConfig(c *cli.Context, f mountFlags, log *slog.Logger, stopStarting func()) guardd.Config {
	return guardd.Config{
		StoreDir:        c.String("store"),
		IndexDir:        f.indexDir,
		Mountpoint:      f.mnt,
		Policy:          f.pol,
		IndexOptions:    f.idxOpts,
		AllowOther:      c.Bool("allow-other"),
		SyncInterval:    c.Duration("sync-interval"),
		RefuseErrno:     f.errno,
		AuditLog:        c.String("audit-log"),
		AuditFsync:      c.Duration("audit-fsync"),
		ControlSocket:   c.String("control-socket"),
		MetricsAddr:     c.String("metrics-addr"),
		Debug:           c.Bool("debug"),
		Logger:          log,
		ServeProcs:      c.Int("serve-procs"),
		LossCheckBudget: c.Int("loss-check-budget"),
		LossCheckRate:   c.Float64("loss-check-rate"),
		FlinkREST:       f.flinkREST,
		Ready: func(m *guardd.Mounted) {
			log.Info("a refused deletion fails with \"Operation not permitted\"; to learn why: `ckguard why --store S --index I PATH` or `getfattr -n user.ckguard.state PATH`",
				"why", whyCommandLine(c, m.Mountpoint, "PATH"))
			stopStarting()
			daemon.Ready(fmt.Sprintf("guarding %s on %s", c.String("store"), m.Mountpoint))
		},
		Hold:           c.String("hold"),
		Shared:         c.Bool("shared"),
		SharedReadOnly: c.Bool("shared-read-only"),
		Version:        version,
		Quarantine:     c.Duration("quarantine"),
	}
}

// quarantineBound reads --quarantine-max-bytes and --quarantine-min-free.
func quarantineBound(c *cli.Context) (quarantine.Bound, error) {
	var b quarantine.Bound
	if v := c.String("quarantine-max-bytes"); v != "" {
		n, err := bytesize.Parse(v)
		if err != nil {
			return b, cli.Exit(fmt.Sprintf("--quarantine-max-bytes %q: %v", v, err), exitUsage)
		}
		b.MaxBytes = n
	}
	if v := c.String("quarantine-min-free"); v != "" && v != "0" {
		mf, err := bytesize.ParseBound(v)
		if err != nil {
			return b, cli.Exit(fmt.Sprintf("--quarantine-min-free %q: %v", v, err), exitUsage)
		}
		b.MinFree = mf
	}
	return b, nil
}
