// Package hdfsmount is the guard's FUSE tree over HDFS (hdfsclient.FS): listing in cleanup order
// (fs/listorder), stat, reads, sequential writes of new files (create … close), mkdir, and
// unlink/rmdir/rename/truncate decided one name at a time by the same fs/guard Enforcer (audit,
// metrics, refusals) as the other mounts.
//
// Invariants:
//   - A namespace change happens only inside the Enforcer's Mutate for the one name it decided; a
//     directory is removed only empty (hdfsclient.FS.Remove never recurses), so nothing below a
//     directory goes that was not decided file by file.
//   - A rename never replaces an existing target: it fails with EEXIST.
//   - NameNode trouble (safe mode, standby, RPC failure) while deciding or acting is EIO: the stat a
//     decision needs failing is never taken for "already gone".
//   - With a quarantine (Options.Quarantine) an allowed deletion, truncation or rewrite moves the file
//     into the store's quarantine folder (see quarantine.go); otherwise, with fs.trash.interval > 0 on
//     the NameNode, an allowed deletion is moved to the user's .Trash, as `hdfs dfs -rm` does; otherwise
//     it is deleted.
//   - The quarantine folder is never visible or writable through the mount.
package hdfsmount

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
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
)

// Options configure a mount.
type Options struct {
	FS hdfsclient.FS
	// Dir is the absolute HDFS directory mounted (the store root).
	Dir string
	// Name is the file system's name in /proc/mounts (the hdfs:// URI).
	Name       string
	Mountpoint string
	Enforcer   *guard.Enforcer
	Metrics    *metrics.Metrics // nil: no FUSE latency metrics
	AllowOther bool
	Debug      bool
	Logger     *slog.Logger
	// UID, GID own every file (HDFS owners are names). Default: the daemon's.
	UID, GID uint32
	// Quarantine, when set, is the area allowed deletions are staged in (it takes the trash's place).
	Quarantine *hdfsquarantine.Area
	// Now stamps trash suffixes (default time.Now).
	Now func() time.Time
	// ListAhead is how many subdirectories a readdir lists ahead of their opendir (0: 8; negative:
	// none, each directory is listed when opened).
	ListAhead int
	// KernelReadAhead is the kernel's readahead for the mount (its BDI's read_ahead_kb; 0: 4 MiB, < 0:
	// the kernel's 128 KiB): raised, a sequential reader's data comes in 1 MiB READ requests, each one
	// DataNode block read, instead of 128 KiB ones. Needs root (skipped otherwise).
	KernelReadAhead int64
}

// Mounted is a running mount.
type Mounted struct {
	server     *fuse.Server
	mountpoint string
	fsys       *filesystem
}

type filesystem struct {
	fs     hdfsclient.FS
	dir    string
	g      *guard.Enforcer
	log    *slog.Logger
	trash  bool
	q      *hdfsquarantine.Area
	now    func() time.Time
	uid    uint32
	gid    uint32
	attrs  *attrCache
	pre    *prefetcher
	relist *relister
}

// Mount checks the directory is reachable, reads the trash setting, and serves the tree.
func Mount(ctx context.Context, o Options) (*Mounted, error) {
	if o.Enforcer == nil || o.FS == nil {
		return nil, fmt.Errorf("mount %s: no enforcer or HDFS client", o.Mountpoint)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.KernelReadAhead == 0 {
		o.KernelReadAhead = 4 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.UID == 0 && o.GID == 0 {
		o.UID, o.GID = uint32(os.Getuid()), uint32(os.Getgid())
	}
	fi, err := o.FS.Stat(ctx, o.Dir)
	if err != nil {
		return nil, fmt.Errorf("HDFS directory %s: %w", o.Name, err)
	}
	if !fi.IsDir {
		return nil, fmt.Errorf("HDFS %s is not a directory", o.Name)
	}
	d, err := o.FS.Defaults(ctx)
	if err != nil {
		return nil, fmt.Errorf("HDFS %s: reading the NameNode's trash setting: %w", o.Name, err)
	}
	if o.Quarantine != nil {
		o.Logger.Info("allowed deletions through the mount are staged in the quarantine folder (not the HDFS trash)", "folder", o.Quarantine.Dir())
	} else if d.TrashInterval > 0 {
		o.Logger.Info("deletions through the mount go to the HDFS trash (fs.trash.interval)", "trash", hdfsclient.TrashRoot(o.FS.User()), "interval", d.TrashInterval)
	} else {
		o.Logger.Info("the NameNode has no trash (fs.trash.interval = 0): deletions through the mount are final")
	}
	mnt, err := mountutil.PrepareAbs(o.Mountpoint, o.Logger)
	if err != nil {
		return nil, err
	}
	fsys := &filesystem{fs: o.FS, dir: o.Dir, g: o.Enforcer, log: o.Logger, trash: d.TrashInterval > 0 && o.Quarantine == nil, q: o.Quarantine, now: o.Now, uid: o.UID, gid: o.GID, attrs: newAttrCache(maxCached)}
	fsys.pre = newPrefetcher(fsys, o.ListAhead)
	fsys.relist = newRelister(fsys)
	opts := mountutil.RemoteOptions(o.UID, o.GID)
	opts.MountOptions = fuse.MountOptions{
		AllowOther:  o.AllowOther,
		FsName:      o.Name,
		Name:        "ckguard-hdfs",
		Options:     []string{"default_permissions"},
		DirectMount: true,
		// Plain readdir: find and rm -rf read the type from the entry, so no per-entry lookup rides on
		// the listing (READDIRPLUS makes go-fuse look up every entry, halving find's speed); the
		// lookups that do come (rm, ls -l) are answered from the listing's attributes (attrCache).
		DisableReadDirPlus: true,
		Debug:              o.Debug,
		MaxReadAhead:       1 << 20,
		MaxWrite:           1 << 20,
		MaxBackground:      64,
	}
	server, err := mountutil.Serve(&node{fsys: fsys}, mnt, opts, o.Metrics, o.Name)
	if err != nil {
		return nil, err
	}
	if err := mountutil.SetKernelReadAhead(mnt, o.KernelReadAhead); err != nil {
		o.Logger.Debug("could not raise the kernel's readahead of the mount (sequential reads stay in 128 KiB requests)", "err", err)
	}
	return &Mounted{server: server, mountpoint: mnt, fsys: fsys}, nil
}

func (m *Mounted) Mountpoint() string { return m.mountpoint }
func (m *Mounted) Unmount() error {
	err := m.server.Unmount()
	if err == nil {
		m.fsys.pre.forgetTree("") // stop the listings nobody will read
	}
	return err
}

func (m *Mounted) Wait() { m.server.Wait() }
