// Package hdfsclient is ckguard's narrow view of an HDFS cluster: the few namespace and data calls the
// store and the mount make, behind the FS interface, so that the Go HDFS library under it
// (github.com/colinmarc/hdfs/v2, pinned; unmaintained upstream) can be patched or replaced, and so that
// unit tests can run on the in-process fake (hdfsclient/hdfsfake).
//
// Invariants the interface states for every implementation:
//   - Remove never recurses: a directory is removed only when it is empty, so nothing below a
//     directory is deleted that the guard has not decided file by file.
//   - Rename never replaces an existing target, whoever creates it when (the library's rename always
//     overwrites; the real client has the NameNode refuse it).
//   - Remove never moves to trash: trash is the caller's decision (MoveToTrash), as in `hdfs dfs -rm`.
//   - Every failure is classified once (classify, errno.go): callers test errors.Is against the
//     sentinels and fs.ErrNotExist / fs.ErrPermission / fs.ErrExist, and Errno maps to the FUSE errno.
//
// Paths are absolute HDFS paths ("/flink/checkpoints/job/chk-1/_metadata").
package hdfsclient

import (
	"context"
	"io"
	"io/fs"
	"strconv"
	"time"
)

// FileInfo describes one HDFS inode.
type FileInfo struct {
	Name    string // base name
	Size    int64
	ModTime time.Time
	IsDir   bool
	// Symlink marks an HDFS symlink (never followed, never a checkpoint file).
	Symlink bool
	Mode    fs.FileMode // permission bits
	Owner   string
	Group   string
	// ID is the inode id (0: not reported): InodePath(ID) names the inode wherever it is moved.
	ID uint64
}

// InodePath is the NameNode's reserved path of inode id (/.reserved/.inodes/<id>), which names the
// inode itself: an operation on it or below it never follows its old path to something put there since.
func InodePath(id uint64) string { return "/.reserved/.inodes/" + strconv.FormatUint(id, 10) }

// Reader reads one file; ReadAt is safe for concurrent use.
type Reader interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// Writer writes a new file or appends to one; the data is durable (and visible to readers) once Close returns nil.
type Writer interface {
	io.Writer
	io.Closer
}

// Defaults is what the NameNode reports of its configuration.
type Defaults struct {
	// TrashInterval is fs.trash.interval: > 0 means deletions by the FS shell go to the user's .Trash.
	TrashInterval time.Duration
	// Replication is dfs.replication, the replication of new files (0: not reported).
	Replication int
}

// FS is an HDFS namespace. Implementations are safe for concurrent use.
type FS interface {
	// User is the HDFS user requests are made as (its .Trash is /user/<User>/.Trash).
	User() string
	Stat(ctx context.Context, name string) (FileInfo, error)
	// List calls fn with the entries of the directory name, page by page in name order (the
	// NameNode's dfs.ls.limit per page), so a huge directory is never held in memory at once.
	List(ctx context.Context, name string, fn func(page []FileInfo) error) error
	Open(ctx context.Context, name string) (Reader, error)
	// Create creates a new file; it fails with fs.ErrExist when name exists.
	Create(ctx context.Context, name string, perm fs.FileMode) (Writer, error)
	// Append opens the existing file name for writing at its end (HDFS append, taking the file's
	// lease); it fails with fs.ErrNotExist when name is missing and ErrLease while another writer has
	// it open.
	Append(ctx context.Context, name string) (Writer, error)
	Mkdir(ctx context.Context, name string, perm fs.FileMode) error
	MkdirAll(ctx context.Context, name string, perm fs.FileMode) error
	// Remove removes a file or an empty directory (never recursively; ENOTEMPTY otherwise).
	Remove(ctx context.Context, name string) error
	// Rename moves from to to; it fails with fs.ErrExist when to exists (never replaces it).
	Rename(ctx context.Context, from, to string) error
	Chtimes(ctx context.Context, name string, mtime time.Time) error
	Defaults(ctx context.Context) (Defaults, error)
	Close() error
}
