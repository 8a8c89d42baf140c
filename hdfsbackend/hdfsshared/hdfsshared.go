// Package hdfsshared is the shared state area (package shared) of an HDFS store, laid out as on a
// local store: a record is the directory <store>/.ckguard/v1/<name>.rec whose files are its
// generations (20-digit numbers), the highest current. A write of generation g+1 creates a temporary
// file in .ckguard/v1/.tmp, closes it (HDFS makes it visible and durable at close), then renames it to
// its generation's name with rename2 without OVERWRITE: the NameNode refuses an existing name in the
// same namespace operation, so of two writers conditional on g exactly one creates g+1
// (shared.ErrConflict for the other). A rename whose reply was lost and whose retry answered EEXIST
// is told from a conflict by the temporary file: gone means the rename moved it. Old generations are
// removed by the writer of a newer one as on a local store (keeping 8, in order, a successor an hour
// old by the NameNode's clock).
package hdfsshared

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/refindex/store/shared"
)

const (
	recSuffix = ".rec"
	keepGens  = 8
	gcAge     = time.Hour
)

// CAS is the HDFS shared.CAS.
type CAS struct {
	fs   hdfsclient.FS
	base string // <store dir>/.ckguard/v1
}

// Open opens (creating) the shared area of the HDFS store whose directory is dir. As on a local store
// (shared.NewLocal), the area's folders must be ckguard's alone: real folders owned by the HDFS user
// ckguard runs as and writable by no one else; otherwise Open refuses, naming the folder (another
// user who made one in a store folder everyone may write could forge or drop pins and leases).
func Open(ctx context.Context, f hdfsclient.FS, dir string) (*CAS, error) {
	base := hdfsclient.Join(dir, shared.Dir+"/"+shared.Version)
	if err := f.MkdirAll(ctx, base+"/.tmp", 0o700); err != nil {
		return nil, fmt.Errorf("create the shared state folder %s: %w", base, err)
	}
	for _, d := range []string{hdfsclient.Join(dir, shared.Dir), base, base + "/.tmp"} {
		fi, err := f.Stat(ctx, d)
		if err != nil {
			return nil, fmt.Errorf("shared state folder %s: %w", d, err)
		}
		if !fi.IsDir || fi.Symlink || fi.Owner != f.User() || fi.Mode.Perm()&0o022 != 0 {
			return nil, fmt.Errorf("the shared state folder %s is owned by %q with mode %04o, but must be a folder owned by %q (the HDFS user ckguard runs as) and writable by nobody else: someone else made or replaced it, so its pins and leases cannot be trusted. If ckguard runs as another HDFS user on other hosts, run it as that user here; else inspect the folder, move it out of the store, and start again (a new one is made)",
				d, fi.Owner, fi.Mode.Perm(), f.User())
		}
	}
	return &CAS{fs: f, base: base}, nil
}

// Where implements shared.CAS.
func (c *CAS) Where() string { return c.base }

func (c *CAS) dir(name string) string { return c.base + "/" + name + recSuffix }

func genName(g uint64) string { return fmt.Sprintf("%020d", g) }

// gens lists a record directory's generations, ascending, with their mtimes.
func (c *CAS) gens(ctx context.Context, dir string) ([]uint64, map[uint64]time.Time, error) {
	var out []uint64
	mt := map[uint64]time.Time{}
	err := c.fs.List(ctx, dir, func(page []hdfsclient.FileInfo) error {
		for _, fi := range page {
			if g, err := strconv.ParseUint(fi.Name, 10, 64); err == nil && len(fi.Name) == 20 && !fi.IsDir {
				out = append(out, g)
				mt[g] = fi.ModTime
			}
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, mt, err
}

// Get implements shared.CAS.
func (c *CAS) Get(ctx context.Context, name string) ([]byte, string, error) {
	if err := shared.ValidName(name); err != nil {
		return nil, "", err
	}
	for try := 0; ; try++ {
		gs, _, err := c.gens(ctx, c.dir(name))
		if errors.Is(err, fs.ErrNotExist) || err == nil && len(gs) == 0 {
			return nil, "", fmt.Errorf("shared record %s: %w", name, fs.ErrNotExist)
		}
		if err != nil {
			return nil, "", fmt.Errorf("shared record %s/%s: %w", c.base, name, err)
		}
		g := gs[len(gs)-1]
		b, err := c.read(ctx, c.dir(name)+"/"+genName(g))
		if errors.Is(err, fs.ErrNotExist) && try < 3 {
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("shared record %s/%s: %w", c.base, name, err)
		}
		return b, strconv.FormatUint(g, 10), nil
	}
}

func (c *CAS) read(ctx context.Context, p string) ([]byte, error) {
	r, err := c.fs.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	n := r.Size()
	if n > shared.MaxRecordBytes {
		return nil, &shared.DamagedError{Record: p, Err: fmt.Errorf("%d bytes, more than a shared record holds", n)}
	}
	b := make([]byte, n)
	if _, err := r.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

// Put implements shared.CAS.
func (c *CAS) Put(ctx context.Context, name string, data []byte, prev string) (string, error) {
	if err := shared.ValidName(name); err != nil {
		return "", err
	}
	dir := c.dir(name)
	next := uint64(1)
	if prev != "" {
		g, err := strconv.ParseUint(prev, 10, 64)
		if err != nil || g == 0 {
			return "", fmt.Errorf("bad shared record version %q", prev)
		}
		next = g + 1
	} else if gs, _, err := c.gens(ctx, dir); err == nil && len(gs) > 0 {
		return "", shared.ErrConflict // generation 1 may be gone under a record that exists
	}
	if err := c.fs.MkdirAll(ctx, dir, 0o700); err != nil {
		return "", fmt.Errorf("shared record %s/%s: %w", c.base, name, err)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := c.base + "/.tmp/w-" + hex.EncodeToString(rnd[:])
	w, err := c.fs.Create(ctx, tmp, 0o600)
	if err != nil {
		return "", fmt.Errorf("shared record %s/%s: %w", c.base, name, err)
	}
	_, err = w.Write(data)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = c.fs.Remove(context.WithoutCancel(ctx), tmp)
		return "", fmt.Errorf("shared record %s/%s: write %s: %w", c.base, name, tmp, err)
	}
	target := dir + "/" + genName(next)
	if err := c.fs.Rename(ctx, tmp, target); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			_ = c.fs.Remove(context.WithoutCancel(ctx), tmp)
			return "", fmt.Errorf("shared record %s/%s: %w", c.base, name, err)
		}
		if _, serr := c.fs.Stat(ctx, tmp); serr == nil || !errors.Is(serr, fs.ErrNotExist) {
			_ = c.fs.Remove(context.WithoutCancel(ctx), tmp)
			return "", shared.ErrConflict
		}
		// The temporary file is gone: a retried rename that had moved it answered EEXIST.
	}
	c.collect(ctx, dir, next)
	return strconv.FormatUint(next, 10), nil
}

// collect removes old generations after generation n was written (see the package doc).
func (c *CAS) collect(ctx context.Context, dir string, n uint64) {
	if n <= keepGens {
		return
	}
	gs, mt, err := c.gens(ctx, dir)
	if err != nil {
		return
	}
	now, ok := mt[n]
	if !ok {
		return
	}
	for _, g := range gs {
		if g+keepGens > n {
			break
		}
		succ, ok := mt[g+1]
		if !ok || now.Sub(succ) < gcAge {
			break
		}
		_ = c.fs.Remove(ctx, dir+"/"+genName(g))
	}
}

// List implements shared.CAS.
func (c *CAS) List(ctx context.Context, prefix string) ([]shared.Entry, error) {
	var out []shared.Entry
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		var subs []string
		err := c.fs.List(ctx, dir, func(page []hdfsclient.FileInfo) error {
			for _, fi := range page {
				if fi.IsDir && !strings.HasPrefix(fi.Name, ".") {
					subs = append(subs, fi.Name)
				}
			}
			return nil
		})
		if err != nil {
			if rel != "" && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, s := range subs {
			r := path.Join(rel, s)
			if strings.HasSuffix(s, recSuffix) {
				name := strings.TrimSuffix(r, recSuffix)
				if !strings.HasPrefix(name, prefix) {
					continue
				}
				gs, _, err := c.gens(ctx, dir+"/"+s)
				if err == nil && len(gs) > 0 {
					out = append(out, shared.Entry{Name: name, Version: strconv.FormatUint(gs[len(gs)-1], 10)})
				}
				continue
			}
			if strings.HasPrefix(r+"/", prefix) || strings.HasPrefix(prefix, r+"/") {
				if err := walk(dir+"/"+s, r); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(c.base, ""); err != nil {
		return nil, fmt.Errorf("list the shared state %s: %w", c.base, err)
	}
	return out, nil
}
