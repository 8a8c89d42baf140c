// Package backends is the CLI's one registry of store kinds: For maps a --store value (a local or NFS
// directory, an s3://, s3a://, s3p:// or s3n:// URL, an hdfs: or viewfs:// URL) to the Backend that
// serves it, and every command asks that Backend for what it needs of the store (open it, its
// quarantine, its shared state, its memory of deleted objects, its identity, its mount daemon) instead
// of testing the scheme itself. A new store kind is one more Backend here, and nothing else in the CLI
// changes.
package backends

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/lostfound"
	"github.com/ckguard/ckguard/hdfsbackend/hdfscli"
	"github.com/ckguard/ckguard/internal/storeid"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/s3backend/s3cli"
)

// Backend is one store kind as the CLI uses it. arg is the --store value as given.
type Backend interface {
	// Name is the store kind: "local", "s3" or "hdfs".
	Name() string
	// Remote reports whether the store is named by a URL: no local directory lies under it, so local
	// paths never resolve into it.
	Remote() bool
	// Flags are the backend's client flags, which every command taking --store accepts.
	Flags() []cli.Flag
	// Identity is the store's identity whatever spelling names it (see storeid).
	Identity(arg string) storeid.Identity
	// KeyOfURI maps uri, a URL naming an object of the store, to its key; ok is false for a URI the
	// backend does not map (it is then taken as a key as written).
	KeyOfURI(arg, uri string) (key string, ok bool)
	// OpenStore opens the store for a one-shot command (checked reachable).
	OpenStore(c *cli.Context, arg string) (store.Store, error)
	// OpenQuarantine opens the store's quarantine area directly (no mount holds it) and what closes it.
	OpenQuarantine(c *cli.Context, arg string) (quarantine.FullArea, func() error, error)
	// SharedArea is the shared state area of st (opened from arg) when a --shared mount created it;
	// nil, nil when the store has none (its pins are then the index's own).
	SharedArea(ctx context.Context, arg string, st store.Store) (shared.CAS, error)
	// LostSource opens the store's memory of deleted objects (S3 versions, HDFS snapshots) and what
	// closes it; an error wrapping ErrKeepsNothing when the store keeps none.
	LostSource(c *cli.Context, arg string) (lostfound.Source, func(), error)
	// StagesDeletions reports whether a mount stages its deletions in quarantine when --quarantine is
	// not given.
	StagesDeletions() bool
	// Mount runs the mount daemon of cfg (cfg.StoreDir is arg) until c's context ends.
	Mount(c *cli.Context, cfg guardd.Config) error
}

// ErrKeepsNothing: the store keeps no copy of a deleted object (a local store, an unversioned bucket).
var ErrKeepsNothing = errors.New("the store keeps no deleted objects")

// registry lists the backends named by URL, each with the test of the --store values it serves (its
// schemes); anything else is a local directory.
func registry() []struct {
	claims  func(arg string) bool
	backend Backend
} {
	return []struct {
		claims  func(arg string) bool
		backend Backend
	}{
		{s3cli.IsURL, s3Backend{}},     // s3://, s3a://, s3p://, s3n://
		{hdfscli.IsURL, hdfsBackend{}}, // hdfs:, viewfs://
	}
}

// For is the backend serving the --store value arg.
func For(arg string) Backend {
	for _, r := range registry() {
		if r.claims(arg) {
			return r.backend
		}
	}
	return localBackend{}
}

// Flags are the client flags of every backend.
func Flags() []cli.Flag {
	f := localBackend{}.Flags()
	for _, r := range registry() {
		f = append(f, r.backend.Flags()...)
	}
	return f
}
