package hdfssnap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"

	"github.com/ckguard/ckguard/fs/lostfound"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
)

// Source is the lostfound.Source of an HDFS store root's snapshots: a missing file is copied back
// from the newest snapshot (ckguard's or another's) that holds it.
//
// Invariants: Find only reads; Restore writes the copy under a temporary name in the file's folder
// and renames it onto the key with a rename that never replaces (hdfsclient.FS.Rename), so a file
// written at the key meanwhile stays and the copy is removed; the copy keeps the snapshot's mtime.
type Source struct {
	fs    hdfsclient.FS
	dir   string
	snaps []Snapshot // newest first, listed once
}

var _ lostfound.Source = (*Source)(nil)

// NewSource lists the snapshots of the store root dir.
func NewSource(ctx context.Context, f hdfsclient.FS, dir string) (*Source, error) {
	snaps, err := List(ctx, f, dir)
	if err != nil {
		return nil, fmt.Errorf("list the snapshots of %s: %w", dir, err)
	}
	return &Source{fs: f, dir: dir, snaps: snaps}, nil
}

// Snapshots are the snapshots the source looks in, newest first.
func (s *Source) Snapshots() []Snapshot { return s.snaps }

// Name says where restores come from.
func (s *Source) Name() string {
	return fmt.Sprintf("the snapshots of %s (%d)", s.dir, len(s.snaps))
}

func (s *Source) snapPath(snap, key string) string {
	return hdfsclient.Join(hdfsclient.Join(hdfsclient.SnapshotDir(s.dir), snap), key)
}

// Find looks key up in the live tree, then in each snapshot, newest first.
func (s *Source) Find(ctx context.Context, key string) (lostfound.Candidate, error) {
	c := lostfound.Candidate{Key: key}
	if _, err := s.fs.Stat(ctx, hdfsclient.Join(s.dir, key)); err == nil {
		c.Present = true
		return c, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return c, fmt.Errorf("stat %s: %w", key, err)
	}
	for _, sn := range s.snaps {
		fi, err := s.fs.Stat(ctx, s.snapPath(sn.Name, key))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return c, fmt.Errorf("stat %s in snapshot %s: %w", key, sn.Name, err)
		}
		if fi.IsDir {
			continue
		}
		c.Restorable = true
		c.Version, c.From = sn.Name, "snapshot "+sn.Name
		c.Size, c.ModTime = fi.Size, fi.ModTime
		c.Method = lostfound.MethodCopySnapshot
		return c, nil
	}
	if len(s.snaps) == 0 {
		c.Reason = "the store root has no snapshot (mount with --hold to take them)"
	} else {
		c.Reason = fmt.Sprintf("in none of the %d snapshots of the store root (deleted before the oldest was taken, or created after the newest)", len(s.snaps))
	}
	return c, nil
}

// Restore copies c's file back from its snapshot.
func (s *Source) Restore(ctx context.Context, c lostfound.Candidate) (string, error) {
	dst := hdfsclient.Join(s.dir, c.Key)
	if _, err := s.fs.Stat(ctx, dst); err == nil {
		return "", fmt.Errorf("%s exists again (written meanwhile): nothing restored", c.Key)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("stat %s: %w", c.Key, err)
	}
	src := s.snapPath(c.Version, c.Key)
	r, err := s.fs.Open(ctx, src)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", src, err)
	}
	defer r.Close()
	if err := s.fs.MkdirAll(ctx, path.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("make the folder of %s: %w", c.Key, err)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(path.Dir(dst), ".ckguard-restore-"+hex.EncodeToString(rnd[:])+"-"+path.Base(dst))
	w, err := s.fs.Create(ctx, tmp, 0o644)
	if err != nil {
		return "", fmt.Errorf("create %s: %w", tmp, err)
	}
	n, err := io.Copy(w, io.NewSectionReader(r, 0, r.Size()))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != c.Size {
		err = fmt.Errorf("copied %d bytes, the snapshot's file has %d", n, c.Size)
	}
	if err == nil {
		err = s.fs.Chtimes(ctx, tmp, c.ModTime)
	}
	if err == nil {
		err = s.fs.Rename(ctx, tmp, dst)
	}
	if err != nil {
		_ = s.fs.Remove(context.WithoutCancel(ctx), tmp)
		return "", fmt.Errorf("copy %s back from snapshot %s: %w", c.Key, c.Version, err)
	}
	return lostfound.MethodCopySnapshot, nil
}
