package backends

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/lostfound"
	"github.com/ckguard/ckguard/hdfsbackend/hdfscli"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsguardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsshared"
	"github.com/ckguard/ckguard/hdfsbackend/hdfssnap"
	"github.com/ckguard/ckguard/internal/storeid"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/shared"
)

// hdfsBackend is an HDFS directory (hdfsbackend/), named by hdfs: or by ViewFS.
type hdfsBackend struct{}

func (hdfsBackend) Name() string      { return "hdfs" }
func (hdfsBackend) Remote() bool      { return true }
func (hdfsBackend) Flags() []cli.Flag { return hdfscli.Flags() }

// Identity: the authority (lower case) and clean path; a ViewFS URL as written.
func (hdfsBackend) Identity(arg string) storeid.Identity {
	if hdfsclient.IsViewFS(arg) {
		return storeid.OfRemote(strings.TrimSuffix(arg, "/"), arg)
	}
	if loc, err := hdfsclient.ParseLocation(arg); err == nil {
		return storeid.OfRemote(loc.String(), arg)
	}
	return storeid.OfRemote(arg, arg)
}

func (hdfsBackend) KeyOfURI(arg, uri string) (string, bool) { return "", false }

func (hdfsBackend) OpenStore(c *cli.Context, arg string) (store.Store, error) {
	return hdfscli.OpenStore(c.Context, arg, hdfscli.FromFlags(c))
}

func (hdfsBackend) OpenQuarantine(c *cli.Context, arg string) (quarantine.FullArea, func() error, error) {
	st, err := hdfscli.OpenStore(c.Context, arg, hdfscli.FromFlags(c))
	if err != nil {
		return nil, nil, err
	}
	area, err := hdfsquarantine.Open(c.Context, st.FS(), st.Dir(), nil)
	if err != nil {
		_ = st.FS().Close()
		return nil, nil, fmt.Errorf("store %s: %w", arg, err)
	}
	return area, st.FS().Close, nil
}

func (hdfsBackend) SharedArea(ctx context.Context, arg string, st store.Store) (shared.CAS, error) {
	s, ok := st.(interface {
		FS() hdfsclient.FS
		Dir() string
	})
	if !ok {
		return nil, nil
	}
	if _, err := s.FS().Stat(ctx, hdfsclient.Join(s.Dir(), shared.Dir+"/"+shared.Version)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("look for the shared state of %s: %w", arg, err)
	}
	return hdfsshared.Open(ctx, s.FS(), s.Dir())
}

// LostSource: the snapshots of the store root.
func (hdfsBackend) LostSource(c *cli.Context, arg string) (lostfound.Source, func(), error) {
	st, err := hdfscli.OpenStore(c.Context, arg, hdfscli.FromFlags(c))
	if err != nil {
		return nil, nil, err
	}
	src, err := hdfssnap.NewSource(c.Context, st.FS(), st.Dir())
	if err != nil {
		_ = st.FS().Close()
		return nil, nil, err
	}
	return src, func() { _ = st.FS().Close() }, nil
}

// StagesDeletions: on HDFS staging is opt-in (the NameNode's trash, when it has one, keeps deletions
// without it, and staging writes a record file per deletion through a DataNode).
func (hdfsBackend) StagesDeletions() bool { return false }

func (hdfsBackend) Mount(c *cli.Context, cfg guardd.Config) error {
	if !c.IsSet("serve-procs") {
		cfg.ServeProcs = 0 // as over S3: requests wait on the network, not on the CPU
	}
	return hdfsguardd.Run(c.Context, cfg, hdfscli.FromFlags(c))
}
