package localfs

import (
	"context"
	"syscall"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// file is a loopback file opened for writing. Its data path is the loopback's (and the kernel's, with
// passthrough); it only adds the index notification when a _metadata is closed.
type file struct {
	*fs.LoopbackFile
	n *node
}

var (
	_ fs.FileFlusher         = (*file)(nil)
	_ fs.FilePassthroughFder = (*file)(nil)
	_ fs.FileReleaser        = (*file)(nil)
	_ fs.FileReader          = (*file)(nil)
	_ fs.FileWriter          = (*file)(nil)
	_ fs.FileGetattrer       = (*file)(nil)
	_ fs.FileSetattrer       = (*file)(nil)
	_ fs.FileFsyncer         = (*file)(nil)
	_ fs.FileAllocater       = (*file)(nil)
	_ fs.FileLseeker         = (*file)(nil)
)

func wrapFile(fh fs.FileHandle, n *node) fs.FileHandle {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok || n == nil {
		return fh
	}
	return &file{LoopbackFile: lf, n: n}
}

// Flush runs on every close(2) of a descriptor, synchronously: the caller's close does not return before
// the index has parsed and recorded a _metadata written through the mount, so the checkpoint is protected
// from that moment. (RELEASE would be too late: the kernel does not wait for it.)
func (f *file) Flush(ctx context.Context) syscall.Errno {
	if errno := f.LoopbackFile.Flush(ctx); errno != 0 {
		return errno
	}
	key := f.n.key()
	if !flinklayout.IsMetadata(key) {
		return 0
	}
	var st syscall.Stat_t
	switch err := f.n.root.lstat(key, &st); err.(type) {
	case *storeChangedError:
		// The file is in the directory the mount started on, the index reads the store path: indexing
		// would look at another directory. The writer learns that its checkpoint is not protected.
		return syscall.EIO
	case nil:
	default:
		if err == unix.ENOENT {
			// Unlinked while open: there is nothing to index (the deletion was decided and recorded).
			return 0
		}
	}
	// Any other answer (even a folder on the way swapped for a symlink: ELOOP) is the index's to judge;
	// skipping it would leave a checkpoint written through the mount unprotected until the next sync.
	return f.n.enf.Written(ctx, key)
}
