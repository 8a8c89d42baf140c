package backends

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/lostfound"
	"github.com/ckguard/ckguard/internal/storeid"
	"github.com/ckguard/ckguard/localbackend/localguardd"
	"github.com/ckguard/ckguard/localbackend/localquarantine"
	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/shared"
)

// localBackend is a local or NFS directory.
type localBackend struct{}

func (localBackend) Name() string      { return "local" }
func (localBackend) Remote() bool      { return false }
func (localBackend) Flags() []cli.Flag { return nil }

// Identity: the directory by its real path and root inode.
func (localBackend) Identity(arg string) storeid.Identity { return storeid.OfLocal(arg) }

func (localBackend) KeyOfURI(arg, uri string) (string, bool) { return "", false }

func (localBackend) OpenStore(c *cli.Context, arg string) (store.Store, error) {
	return localstore.New(arg)
}

func (localBackend) OpenQuarantine(c *cli.Context, arg string) (quarantine.FullArea, func() error, error) {
	abs, err := filepath.Abs(arg)
	if err != nil {
		return nil, nil, err
	}
	area, err := localquarantine.OpenLocal(abs, nil)
	if err != nil {
		return nil, nil, err
	}
	return area, area.Close, nil
}

func (localBackend) SharedArea(ctx context.Context, arg string, st store.Store) (shared.CAS, error) {
	if _, err := os.Stat(filepath.Join(arg, shared.Dir, shared.Version)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		// Pins made on other hosts live there: answering without them could call a pinned checkpoint
		// deletable, so the command stops and says how to get a full answer.
		return nil, fmt.Errorf("cannot read the store's shared state folder %s, which holds the pins of every --shared mount (%w): run the command as the mount's user (root), or while the mount runs (it answers through its socket)", filepath.Join(arg, shared.Dir), err)
	}
	return shared.NewLocal(arg)
}

func (localBackend) LostSource(c *cli.Context, arg string) (lostfound.Source, func(), error) {
	return nil, nil, fmt.Errorf("store %s: restore-lost restores from S3 versions or HDFS snapshots; a local store keeps neither (what the mount deleted is in its quarantine: `ckguard quarantine restore`): %w", arg, ErrKeepsNothing)
}

// StagesDeletions: on a local store a staging is a rename, which costs nothing.
func (localBackend) StagesDeletions() bool { return true }

func (localBackend) Mount(c *cli.Context, cfg guardd.Config) error {
	return localguardd.Run(c.Context, cfg)
}
