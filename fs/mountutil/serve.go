package mountutil

import (
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckguard/ckguard/fs/metrics"
)

// PrepareLogged is Prepare that logs the replacement of a stale mount, as every ckguard mount does.
func PrepareLogged(mnt string, log *slog.Logger) error {
	stale, err := Prepare(mnt)
	if err != nil {
		return err
	}
	if stale {
		log.Warn("replaced a stale mount left by a crashed ckguard (transport endpoint was not connected)", "mountpoint", mnt)
	}
	return nil
}

// PrepareAbs makes mountpoint absolute and prepares it like PrepareLogged, returning the absolute path.
func PrepareAbs(mountpoint string, log *slog.Logger) (string, error) {
	mnt, err := filepath.Abs(mountpoint)
	if err != nil {
		return "", err
	}
	if err := PrepareLogged(mnt, log); err != nil {
		return "", err
	}
	return mnt, nil
}

// RemoteOptions are the go-fuse options of a mount over a remote store (S3, HDFS): the kernel keeps
// entries, attributes and negative lookups for 1 s, every file is owned by uid/gid, go-fuse logs to
// stderr. The caller fills in MountOptions.
func RemoteOptions(uid, gid uint32) *fs.Options {
	sec := time.Second
	return &fs.Options{
		EntryTimeout:    &sec,
		AttrTimeout:     &sec,
		NegativeTimeout: &sec,
		UID:             uid,
		GID:             gid,
		Logger:          log.New(os.Stderr, "go-fuse: ", 0),
	}
}

// Serve mounts the node tree root at mnt and serves it in the background, counting every FUSE request in
// met when it is not nil; it returns once the kernel has the mount. what names the mounted storage in
// errors.
func Serve(root fs.InodeEmbedder, mnt string, opts *fs.Options, met *metrics.Metrics, what string) (*fuse.Server, error) {
	var raw fuse.RawFileSystem = fs.NewNodeFS(root, opts)
	if met != nil {
		raw = met.InstrumentRawFS(raw)
	}
	server, err := fuse.NewServer(raw, mnt, &opts.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("mount %s on %s: %w", what, mnt, err)
	}
	// NewServer returns once the kernel has the mount and its INIT is answered. The daemon does not
	// call server.WaitMount: it only adds go-fuse's "poll hack", which opens a file on this very mount
	// from the mounting process. The daemon never touches its own mount: a kill -9 while it holds such a
	// file (or waits on any request to its own mount) leaves it unkillable, its exit closing the file
	// with a FLUSH that its dead threads never answer (fixed only by aborting the FUSE connection).
	// Without the hack the kernel learns that POLL is unsupported from the first client that polls
	// (go-fuse answers ENOSYS).
	//
	// A test binary is the one process that does open files on a mount it serves itself (in-process
	// mounts of the package tests): there the Go runtime's epoll registration of such a file sends a
	// POLL the server must answer while epoll is held, which deadlocks unless the kernel already knows
	// POLL is unsupported. So in a test binary the hack still runs, before anything else opens a file.
	go server.Serve()
	if testing.Testing() {
		if err := server.WaitMount(); err != nil {
			_ = server.Unmount()
			return nil, fmt.Errorf("mount %s on %s: %w", what, mnt, err)
		}
	}
	return server, nil
}
