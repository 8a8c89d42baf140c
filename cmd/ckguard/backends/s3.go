package backends

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/lostfound"
	"github.com/ckguard/ckguard/internal/storeid"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/s3backend/s3cli"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3guardd"
	"github.com/ckguard/ckguard/s3backend/s3lost"
	"github.com/ckguard/ckguard/s3backend/s3quarantine"
	"github.com/ckguard/ckguard/s3backend/s3shared"
	"github.com/ckguard/ckguard/s3backend/s3store"
)

// s3Backend is a bucket prefix (s3backend/).
type s3Backend struct{}

func (s3Backend) Name() string      { return "s3" }
func (s3Backend) Remote() bool      { return true }
func (s3Backend) Flags() []cli.Flag { return s3cli.Flags() }

// Identity: the bucket and prefix (s3a:// and s3p:// are s3://, no trailing slash).
func (s3Backend) Identity(arg string) storeid.Identity {
	if loc, err := s3client.ParseURL(arg); err == nil {
		return storeid.OfRemote("s3://"+loc.Bucket+strings.TrimSuffix("/"+loc.Prefix, "/"), arg)
	}
	return storeid.OfRemote(arg, arg)
}

// KeyOfURI maps an s3://, s3a:// or s3p:// URI under the store to its key.
func (s3Backend) KeyOfURI(arg, uri string) (string, bool) {
	for _, pre := range []string{"s3://", "s3a://", "s3p://"} {
		if strings.HasPrefix(uri, pre) {
			root := strings.TrimSuffix(arg, "/") + "/"
			u := "s3://" + strings.TrimPrefix(uri, pre)
			r := "s3://" + strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(root, "s3://"), "s3a://"), "s3p://")
			if strings.HasPrefix(u, r) {
				return strings.TrimPrefix(u, r), true
			}
		}
	}
	return "", false
}

func (s3Backend) OpenStore(c *cli.Context, arg string) (store.Store, error) {
	return s3cli.OpenStore(c.Context, arg, s3cli.Config(c))
}

func (s3Backend) OpenQuarantine(c *cli.Context, arg string) (quarantine.FullArea, func() error, error) {
	st, err := s3cli.OpenStore(c.Context, arg, s3cli.Config(c))
	if err != nil {
		return nil, nil, err
	}
	area, _, err := s3quarantine.Open(c.Context, st.Client(), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("store %s: %w", arg, err)
	}
	return area, func() error { return nil }, nil
}

func (s3Backend) SharedArea(ctx context.Context, arg string, st store.Store) (shared.CAS, error) {
	s, ok := st.(*s3store.Store)
	if !ok {
		return nil, nil
	}
	cas := s3shared.New(s.Client())
	ok, err := cas.Exists(ctx)
	if err != nil || !ok {
		return nil, err
	}
	return cas, nil
}

// LostSource: the versions of a versioned bucket, but those ckguard's quarantine holds (restored by
// `quarantine restore`).
func (s3Backend) LostSource(c *cli.Context, arg string) (lostfound.Source, func(), error) {
	st, err := s3cli.OpenStore(c.Context, arg, s3cli.Config(c))
	if err != nil {
		return nil, nil, err
	}
	cl := st.Client()
	v, err := cl.BucketVersioning(c.Context)
	if err != nil {
		return nil, nil, fmt.Errorf("store %s: cannot read the bucket's versioning: %w", arg, err)
	}
	if v == "" {
		return nil, nil, fmt.Errorf("store %s: the bucket is not versioned, so a deleted object has no version left to restore (enable versioning, and --quarantine on the mount): %w", arg, ErrKeepsNothing)
	}
	staged, err := stagedKeys(c.Context, cl)
	if err != nil {
		return nil, nil, err
	}
	return s3lost.New(cl, staged), func() {}, nil
}

// stagedKeys are the keys ckguard's quarantine holds on a versioned bucket.
func stagedKeys(ctx context.Context, cl *s3client.Client) (map[string]bool, error) {
	area := s3quarantine.NewVersioned(cl, nil)
	es, err := area.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list ckguard's quarantine (its entries are restored by `quarantine restore`, not here): %w", err)
	}
	staged := map[string]bool{}
	for _, e := range es {
		staged[e.Key()] = true
	}
	return staged, nil
}

// StagesDeletions: on S3 staging is opt-in (a server-side copy per deletion, billed and taking time
// with the object's size).
func (s3Backend) StagesDeletions() bool { return false }

func (s3Backend) Mount(c *cli.Context, cfg guardd.Config) error {
	if !c.IsSet("serve-procs") {
		// Not measured over S3, where a request waits milliseconds on the network and reads stream
		// through readahead goroutines in parallel: keep the runtime's choice.
		cfg.ServeProcs = 0
	}
	return s3guardd.Run(c.Context, cfg, s3cli.Config(c), nil)
}
