// Package hdfsstore implements the index's store.Store on HDFS (hdfsclient.FS): stat and reads through
// the NameNode and DataNodes, walks and the `_metadata` discovery by paged directory listings fanned
// out over a bounded number of concurrent listings (walk.go).
//
// HDFS has real directories and a single namespace, so a walk is complete by construction: every
// listing either succeeds page by page or the whole walk fails (no partial listing is ever reported as
// the store).
package hdfsstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"strings"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/refindex/store"
)

// Options tune the store. The zero value is usable.
type Options struct {
	// Parallel bounds concurrent directory listings of one walk or discovery. Default 8.
	Parallel int
}

// Store is a store.Store over one HDFS directory.
type Store struct {
	fs   hdfsclient.FS
	loc  hdfsclient.Resolved
	dir  string // absolute HDFS directory of the store root
	opts Options
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.RootAliaser = (*Store)(nil)
)

// New returns the store rooted at loc.Path on f.
func New(f hdfsclient.FS, loc hdfsclient.Resolved, opts Options) *Store {
	if opts.Parallel <= 0 {
		opts.Parallel = 8
	}
	return &Store{fs: f, loc: loc, dir: loc.Path, opts: opts}
}

// FS returns the client the store reads through.
func (s *Store) FS() hdfsclient.FS { return s.fs }

// Dir is the absolute HDFS directory of the store root.
func (s *Store) Dir() string { return s.dir }

func uri(authority, dir string) string {
	if dir == "/" {
		return "hdfs://" + authority + "/"
	}
	return "hdfs://" + authority + dir
}

// Root is hdfs://<nameservice or host:port>/<dir>, the name Flink's fully qualified paths use.
func (s *Store) Root() string { return uri(s.loc.Canonical, s.dir) }

// RootAliases are the other names of the same directory: hdfs:///dir (and hdfs:/dir) when the store is
// the default file system, and each NameNode's host:port of an HA nameservice. Port-less spellings
// (hdfs://nn/…) are folded to port 8020 by pathnorm. The viewfs:// URIs whose mount tables map exactly
// to the store directory are aliases too (hdfsclient.ResolveStore checked each one forward).
func (s *Store) RootAliases() []string {
	var out []string
	for _, a := range s.loc.Aliases {
		out = append(out, uri(a, s.dir))
	}
	return append(out, s.loc.ViewURIs...)
}

// abs is the HDFS path of a clean store key.
func (s *Store) abs(key string) string { return hdfsclient.Join(s.dir, key) }

func (s *Store) info(key string, fi hdfsclient.FileInfo) store.ObjectInfo {
	oi := store.ObjectInfo{Path: key, Size: fi.Size, ModTime: fi.ModTime, IsDir: fi.IsDir, Special: fi.Symlink}
	if fi.Owner != "" {
		oi.UID, oi.HasUID, oi.Perm = OwnerID(fi.Owner), true, uint32(fi.Mode.Perm())
	}
	return oi
}

// OwnerID is the number the index compares HDFS owners by (ObjectInfo.UID): HDFS names its owners
// (user names, Kerberos short names), the index compares numbers, and only equality matters (is this
// entry's owner one that wrote the job's checkpoints?). A 32-bit FNV-1a hash of the name: a collision
// needs a user name an administrator gave out, and could only make two users look alike.
func OwnerID(owner string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(owner))
	return h.Sum32()
}

// Stat describes one key. (A decision about a key the mount has just looked at judges that look instead:
// store.StatObserved answers it without a NameNode call.)
func (s *Store) Stat(ctx context.Context, p string) (store.ObjectInfo, error) {
	key, err := store.CleanKey(p)
	if err != nil {
		return store.ObjectInfo{}, err
	}
	fi, err := s.fs.Stat(ctx, s.abs(key))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return store.ObjectInfo{}, &fs.PathError{Op: "stat", Path: key, Err: err}
		}
		return store.ObjectInfo{}, err
	}
	return s.info(key, fi), nil
}

// Open opens a file; the reader keeps the size seen at open (a file still being written is read up
// to its length then; checkpoint files are complete before their `_metadata` names them).
func (s *Store) Open(ctx context.Context, p string) (store.Reader, error) {
	key, err := store.CleanKey(p)
	if err != nil {
		return nil, err
	}
	r, err := s.fs.Open(ctx, s.abs(key))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &fs.PathError{Op: "open", Path: key, Err: err}
		}
		return nil, err
	}
	return &reader{r: r, key: key}, nil
}

type reader struct {
	r   hdfsclient.Reader
	key string
}

func (r *reader) Size() int64  { return r.r.Size() }
func (r *reader) Close() error { return r.r.Close() }
func (r *reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s: negative offset", r.key)
	}
	if off >= r.r.Size() {
		return 0, io.EOF
	}
	return r.r.ReadAt(p, off)
}

// Walk reports every file (and directory) below prefix, never below store.QuarantineDir.
func (s *Store) Walk(ctx context.Context, prefix string, fn func(store.ObjectInfo) error) error {
	key, err := store.CleanKey(prefix)
	if err != nil {
		return err
	}
	if store.InQuarantine(key) {
		return nil
	}
	return s.walk(ctx, key, func(oi store.ObjectInfo) error { return fn(oi) })
}

// ListMetadata reports every regular file named `_metadata`, by a full walk (complete for any
// layout: HDFS listings are cheap next to S3's, and a `_metadata` in an unexpected place is found).
func (s *Store) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	return s.walk(ctx, "", func(oi store.ObjectInfo) error {
		if !store.IsCheckpointFile(oi) {
			return nil
		}
		return fn(oi)
	})
}

// rel is the store key of name inside the directory key dir.
func rel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// validName rejects names the NameNode should never return; a hostile or broken answer must not make
// a walk report keys outside the directory listed.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}
