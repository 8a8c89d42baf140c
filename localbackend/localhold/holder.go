// Package localhold is the local store's primitive of the holds (fs/hold): FS_IMMUTABLE_FL on a
// file, so that no process beside the mount (root included, unless it clears the flag first) can
// unlink, rename, truncate or write it. It is `--hold` on a local store (ext4, XFS, btrfs, tmpfs since
// Linux 6.0; not NFS, not ramfs). The engine (ledger, passes, release rule) is fs/hold's.
//
// The flag stops the mount's own changes too, so the engine runs Lifted: the enforcer calls
// BeforeChange under its lock for every path of an allowed change (an unlink or its staging into the
// quarantine, a rename, a truncation, a write) and a flagged file's flag is cleared there (one open,
// two ioctls): the guard's own changes, and Flink's through the mount, work as without holds.
//
// After a kill -9 the next mount's first pass finds every file the ledger may have flagged: it flags
// again what is protected and releases (by the same rule) what is not, so after restart and one sync
// no flag is left on a file that is no longer referenced.
package localhold

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckguard/ckguard/fs/hold"
)

// Files is how the holder reaches a file of the store (*localstore.Store is one): opened beneath the
// root through no symlink, read-only, non-blocking, a regular file only.
type Files interface {
	OpenInode(key string) (*os.File, error)
}

// immutableFlag is the hold.Primitive of a local store: FS_IMMUTABLE_FL on the file at the key (no
// versions: the version is always "").
type immutableFlag struct{ files Files }

func (p immutableFlag) Stat(_ context.Context, key string) (string, int64, error) {
	f, err := p.files.OpenInode(key)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", key, err)
	}
	return "", fi.Size(), nil
}

func (p immutableFlag) Hold(_ context.Context, key, _ string) error { return p.set(key, true) }

func (p immutableFlag) Release(_ context.Context, key, _ string) error { return p.set(key, false) }

func (p immutableFlag) set(key string, on bool) error {
	f, err := p.files.OpenInode(key)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := setImmutable(int(f.Fd()), on); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// Options configure the holder.
type Options struct {
	Files  Files
	Index  hold.Index
	Dir    string // the index folder: the ledger and the status file
	Logger *slog.Logger
	Mode   string // best-effort or required (shown in the status)
	Note   string // why the holder is inactive
	// Inactive: the filesystem cannot hold (best-effort on NFS, ramfs): nothing is flagged.
	Inactive bool
	Now      func() time.Time
}

// batch is how many intents are synced at once before their ioctls.
const batch = 256

// New opens (or creates) the ledger in o.Dir and returns the engine over the immutable flag.
func New(o Options) (*hold.Engine, error) {
	l, err := hold.OpenLedger(o.Dir)
	if err != nil {
		return nil, err
	}
	return hold.New(hold.Options{Primitive: immutableFlag{o.Files}, Index: o.Index, Ledger: l, Batch: batch, Lifted: true,
		Name: "immutable flag", Logger: o.Logger, Now: o.Now, Mode: o.Mode, Note: o.Note, Inactive: o.Inactive, StatusDir: o.Dir}), nil
}

// Register adds the holds' gauges to reg.
func Register(reg prometheus.Registerer, e *hold.Engine) error {
	return hold.Register(reg, e, "files with FS_IMMUTABLE_FL")
}
