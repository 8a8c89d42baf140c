package localfs

import (
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/metrics"
	"github.com/ckguard/ckguard/fs/mountutil"
	"github.com/ckguard/ckguard/localbackend/localquarantine"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// Options configure a guard mount over a local directory.
type Options struct {
	Store      string // the checkpoint directory (the truth)
	Mountpoint string
	Enforcer   *guard.Enforcer
	Metrics    *metrics.Metrics // nil: no FUSE latency metrics
	AllowOther bool             // let other users use the mount (needs user_allow_other in /etc/fuse.conf for non-root)
	Debug      bool             // log every FUSE request
	Logger     *slog.Logger
	// Quarantine stages every file an allowed unlink removes in the store's quarantine folder (package
	// quarantine) instead of destroying it; Now is its clock (nil: time.Now).
	Quarantine bool
	Now        func() time.Time
}

// Mounted is a running guard mount.
type Mounted struct {
	server      *fuse.Server
	mountpoint  string
	passthrough bool
	quarantine  *localquarantine.Local
}

// StagingArea is the quarantine area the mount stages deletions in, as the daemon serves it (nil, not
// a nil *Local, without Options.Quarantine: the daemon takes a non-nil area for a quarantine to serve).
func (m *Mounted) StagingArea() quarantine.Staging {
	if m.quarantine == nil {
		return nil
	}
	return m.quarantine
}

// Mount mounts the guard filesystem and returns once the kernel has it. A stale mount from a crashed daemon on
// the mountpoint is replaced; a live one is an error. It clears the process's umask (see below): files the
// caller of Mount creates afterwards must name their modes.
func Mount(o Options) (*Mounted, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Enforcer == nil {
		return nil, fmt.Errorf("mount %s: no enforcer", o.Mountpoint)
	}
	store, err := filepath.Abs(o.Store)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(store); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("store %s is not a directory: %v", store, err)
	}
	mnt, err := mountutil.PrepareAbs(o.Mountpoint, o.Logger)
	if err != nil {
		return nil, err
	}
	// The modes the kernel sends with a create, mkdir or mknod already have the caller's umask applied;
	// the daemon's own (022 under systemd) would be applied on top and take group write away from a
	// Flink job running with umask 002. So the process's umask is cleared, for good: every file the
	// daemon creates for itself names its mode (the audit log and log file 0600, the index directory
	// 0700, the control socket chmod'ed 0600).
	unix.Umask(0)
	root, err := newRoot(store, o.Enforcer, o.Logger)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", store, err)
	}
	if o.Quarantine {
		q, err := localquarantine.OpenLocalAt(root.root.fd, o.Now)
		if err != nil {
			root.root.close()
			return nil, fmt.Errorf("store %s: %w", store, err)
		}
		root.root.quarantine = q
	}
	// Attributes and entries are cached for a second, as go-fuse's loopback does; changes made through the
	// mount invalidate them at once, direct changes to the store show up within that second.
	sec := time.Second
	neg := time.Duration(0)
	opts := &fs.Options{
		EntryTimeout:    &sec,
		AttrTimeout:     &sec,
		NegativeTimeout: &neg,
		// The store's own modes, 0 included: go-fuse otherwise shows a mode-0 file as 0644 and a folder as
		// 0755, and default_permissions then checks callers against those (with --allow-other another
		// user could read root's mode-000 files through the mount).
		NullPermissions: true,
		Logger:          log.New(os.Stderr, "go-fuse: ", 0),
		MountOptions: fuse.MountOptions{
			AllowOther: o.AllowOther,
			FsName:     store,
			Name:       "ckguard",
			// The daemon runs with its own (often root's) rights; default_permissions makes the kernel check
			// each caller against the file modes, so the mount never lets anyone do what they could not do on
			// the store directly.
			Options:     []string{"default_permissions"},
			DirectMount: true,
			Debug:       o.Debug,
			// Room for the stack depth of a store that is itself on an overlay or FUSE filesystem.
			MaxStackDepth: 2,
		},
	}
	server, err := mountutil.Serve(root, mnt, opts, o.Metrics, store)
	if err != nil {
		root.root.close()
		return nil, err
	}
	// The store root descriptor lives as long as the mount: it is closed once the server has stopped
	// serving (unmounted by us, by `ckguard umount` or fusermount -u), when no request can use it any more.
	go func() {
		server.Wait()
		root.root.close()
	}()
	m := &Mounted{server: server, mountpoint: mnt, quarantine: root.root.quarantine,
		// The kernel offers passthrough, and registering backing files needs CAP_SYS_ADMIN (go-fuse
		// silently falls back to serving reads itself without it).
		passthrough: server.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH != 0 && os.Geteuid() == 0}
	return m, nil
}

// Passthrough reports whether the kernel offered FUSE passthrough, so reads and writes of open files go
// straight to the store's files without crossing the daemon.
func (m *Mounted) Passthrough() bool { return m.passthrough }

// Mountpoint is the absolute mountpoint.
func (m *Mounted) Mountpoint() string { return m.mountpoint }

// Unmount unmounts; it fails while files are open on the mount (EBUSY), like umount(8).
func (m *Mounted) Unmount() error { return m.server.Unmount() }

// Wait blocks until the mount is gone (unmounted by us, by `ckguard umount`, or by fusermount -u).
func (m *Mounted) Wait() { m.server.Wait() }
