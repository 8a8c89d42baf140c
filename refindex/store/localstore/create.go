package localstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
)

// CreateExclusive writes data at key only if nothing is there, with modification time mtime and, when
// uid is set, that owner (the checkpoint's, so it competes with its job's other checkpoints as before).
// The file is written under a temporary name and linked into place, so a crash never leaves a torn file
// at key and an existing one is never replaced (link(2) fails with EEXIST). Every path operation is
// confined to the store (os.Root): a symlink swapped in for a folder cannot make the daemon, which runs
// as root, write elsewhere.
func (s *Store) CreateExclusive(ctx context.Context, key string, data []byte, mtime time.Time, uid *uint32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k, err := store.CleanKey(key)
	if err != nil {
		return err
	}
	if k == "" {
		return fmt.Errorf("create %q: %w", key, store.ErrInvalidPath)
	}
	r, err := os.OpenRoot(s.root)
	if err != nil {
		return err
	}
	defer r.Close()
	dir := path.Dir(k)
	if dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", k, err)
		}
	}
	if _, err := r.Lstat(k); err == nil {
		return fmt.Errorf("create %s: %w", k, fs.ErrExist)
	}
	tmp := path.Join(path.Dir(k), fmt.Sprintf(".ckguard-restore-%d-%d", os.Getpid(), time.Now().UnixNano()))
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", k, err)
	}
	defer r.Remove(tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && uid != nil {
		err = r.Lchown(tmp, int(*uid), -1)
	}
	if err == nil {
		err = r.Chtimes(tmp, mtime, mtime)
	}
	if err == nil {
		err = r.Link(tmp, k)
	}
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w: never overwritten", k, fs.ErrExist)
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", k, err)
	}
	return nil
}
