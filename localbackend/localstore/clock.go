package localstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/store"
)

var _ store.Clock = (*Store)(nil)

// StoreTime reads the clock that stamps the store's files: it creates a file in the store root and
// returns its modification time. On a local file system that is this host's kernel clock; on an NFS
// export it is the server's. An unnamed file (O_TMPFILE) leaves nothing behind; file systems without
// it (NFS) get a named probe file that is removed at once.
func (s *Store) StoreTime(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	fd, err := unix.Open(s.root, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err == nil {
		defer unix.Close(fd)
		return fdModTime(fd, s.root)
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
		return time.Time{}, fmt.Errorf("read the store's clock: create a temporary file in %s: %w", s.root, err)
	}
	return s.probeNamed()
}

// ProbeName is the file StoreTime creates (and removes at once) where the store's file system has no
// unnamed temporary files. Host name and pid make it unique among the mounts sharing an NFS export, and
// a probe file left by a killed process is replaced by the next one with its pid on that host.
func ProbeName() string {
	host, _ := os.Hostname()
	return ".ckguard-clock-probe." + host + "." + strconv.Itoa(os.Getpid())
}

func (s *Store) probeNamed() (time.Time, error) {
	name := s.root + "/" + ProbeName()
	fd, err := unix.Open(name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EEXIST) {
		// Left by a killed process with the same pid on this host: it is ours to replace.
		unix.Unlink(name)
		fd, err = unix.Open(name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("read the store's clock: create %s: %w", name, err)
	}
	defer func() {
		unix.Close(fd)
		unix.Unlink(name)
	}()
	return fdModTime(fd, name)
}

func fdModTime(fd int, name string) (time.Time, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return time.Time{}, fmt.Errorf("read the store's clock: stat %s: %w", name, err)
	}
	return time.Unix(st.Mtim.Unix()), nil
}
