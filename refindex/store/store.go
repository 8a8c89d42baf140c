// Package store is the index's narrow view of checkpoint storage: list the `_metadata` objects, stat,
// read and walk. It is implemented for a local (or NFS / fuse-dfs) directory by localstore and for S3
// by s3backend; storetest is the conformance suite every implementation runs.
//
// Paths are store-relative keys: '/'-separated, no leading or trailing slash, "" is the store root.
// Missing objects are reported with errors that wrap io/fs.ErrNotExist.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/ckguard/ckguard/refindex/flinklayout"
)

// ObjectInfo describes one object (or directory) of a store.
type ObjectInfo struct {
	Path    string // store-relative key
	Size    int64
	ModTime time.Time
	IsDir   bool
	// Special marks a file that is neither regular nor a directory (a symlink, FIFO, socket or device,
	// only in local stores): never a checkpoint, and never opened (a FIFO would block the reader).
	Special bool
	// ETag identifies the object's content version where the backend has one (S3); "" otherwise.
	ETag string
	// UID is the owning user where the backend has POSIX owners (HasUID; local stores). The index
	// compares owners to tell a job's own `_metadata` from one another user wrote beside it: only root
	// can give a file away, so no other user can make a file look like the job's.
	UID    uint32
	HasUID bool
	// Perm is the permission bits with setuid, setgid and sticky (mode & 07777), where HasUID: the
	// index asks whether a folder above a job folder lets other users create in it.
	Perm uint32
}

// IsCheckpointFile reports whether oi can be a checkpoint's `_metadata`: a regular file of that name.
func IsCheckpointFile(oi ObjectInfo) bool {
	return !oi.IsDir && !oi.Special && flinklayout.IsMetadata(oi.Path)
}

// Reader reads one object.
type Reader interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// ErrChanged is wrapped by a Reader's error when the object it reads was replaced or changed since it
// was opened (an S3 ranged GET whose If-Match failed), and by the index's own check (ChangeReporter):
// what was read is a mix of two contents and must not be used.
var ErrChanged = errors.New("the object changed while it was read")

// ChangeReporter is implemented by Readers that can tell whether the object changed since it was
// opened (the local store: the open file's size, mtime and ctime, to the nanosecond). Without it an
// index reading a `_metadata` has only the reader's own errors (ErrChanged) to go by.
type ChangeReporter interface {
	Changed() (bool, error)
}

// Store is the storage the index is derived from.
type Store interface {
	// Root names the store as Flink would see it: an absolute directory ("/srv/flink") for a local
	// store, "s3://bucket/prefix" for S3. References under Root need no prefix mapping.
	Root() string
	// Stat describes path ("" = the root, a directory).
	Stat(ctx context.Context, path string) (ObjectInfo, error)
	// Open opens a file for reading.
	Open(ctx context.Context, path string) (Reader, error)
	// Walk calls fn for every file below the directory prefix ("" = everything), in no particular
	// order, never below QuarantineDir. Backends may also report directories (IsDir); callers must not rely on that. A non-nil
	// error from fn stops the walk and is returned.
	Walk(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
	// ListMetadata calls fn for every file named exactly `_metadata` at any depth (chk-N/_metadata,
	// savepoint-…/_metadata, …) outside QuarantineDir. Flink's temporary and in-progress names (`._metadata_temp`,
	// `._metadata.inprogress.…`) are not `_metadata` and are never reported.
	ListMetadata(ctx context.Context, fn func(ObjectInfo) error) error
}

// FullLister is implemented by stores whose ListMetadata may take shortcuts and report only part of
// the `_metadata` objects (the S3 store's targeted discovery lists only the folders it learned at its
// last full walk). ListAllMetadata must report every `_metadata` of the store, like a full walk.
//
// The index relies on it in two places: a rebuild (which replaces the whole index with what it
// lists) uses ListAllMetadata when the store has it; and an incremental sync never retires an indexed
// `_metadata` just because the listing did not report it — it stats the key and retires it only when
// the store says it does not exist (fs.ErrNotExist). A store without FullLister promises that
// ListMetadata is complete.
type FullLister interface {
	ListAllMetadata(ctx context.Context, fn func(ObjectInfo) error) error
}

// NewLister is implemented by stores that list `_metadata` more cheaply for a caller that holds some of
// them already. ListNewMetadata reports what ListMetadata would, except that it may leave out any key
// for which known returns true; every other `_metadata` ListMetadata would report, it reports. The
// index's second listing before it retires checkpoints (it looks only for `_metadata` the first
// listing did not report) uses it. known is called from several goroutines.
type NewLister interface {
	ListNewMetadata(ctx context.Context, known func(path string) bool, fn func(ObjectInfo) error) error
}

// FreshStater is implemented by stores whose Stat may answer from a cache of what was seen recently
// (the S3 store shares the mount's attribute cache). StatFresh asks the storage itself: an object
// deleted beside the mount is reported gone at once.
type FreshStater interface {
	StatFresh(ctx context.Context, path string) (ObjectInfo, error)
}

// Clock is implemented by stores whose modification times come from a clock of their own (an S3
// service, an NFS server), which need not agree with this host's. StoreTime reads that clock now,
// rounded down to its precision, so that it never runs ahead of the store: the index judges the
// grace period of young files by it (store-side time, not the bastion host's).
type Clock interface {
	StoreTime(ctx context.Context) (time.Time, error)
}

// RootAliaser is implemented by stores known under more than one name: a local store opened through
// a symlinked path resolves it for Root, but Flink wrote its paths through the link. The index maps
// every alias to the store root like Root itself.
type RootAliaser interface {
	RootAliases() []string
}

// ErrInvalidPath is wrapped by errors for keys that are not clean store-relative keys.
var ErrInvalidPath = errors.New("invalid store path")

// CleanKey returns the canonical form of a store-relative key: duplicate and trailing slashes removed,
// "." segments dropped, ".." resolved. A leading slash is tolerated. Keys that climb above the store
// root are rejected: they would name an object outside the guarded store.
func CleanKey(key string) (string, error) {
	if isClean(key) {
		return key, nil // the common case on the decision path: no allocation
	}
	if strings.ContainsRune(key, 0) {
		return "", fmt.Errorf("%w %q: contains NUL", ErrInvalidPath, key)
	}
	segs := strings.Split(key, "/")
	out := make([]string, 0, len(segs))
	for _, s := range segs {
		switch s {
		case "", ".":
		case "..":
			if len(out) == 0 {
				return "", fmt.Errorf("%w %q: climbs above the store root", ErrInvalidPath, key)
			}
			out = out[:len(out)-1]
		default:
			out = append(out, s)
		}
	}
	return strings.Join(out, "/"), nil
}

// isClean reports whether key is already canonical: no empty, "." or ".." segment, no NUL.
func isClean(key string) bool {
	if key == "" {
		return true
	}
	start := 0
	for i := 0; i <= len(key); i++ {
		if i < len(key) && key[i] != '/' {
			if key[i] == 0 {
				return false
			}
			continue
		}
		seg := key[start:i]
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		start = i + 1
	}
	return true
}

// NotExist returns an error for a missing key that wraps fs.ErrNotExist.
func NotExist(op, key string) error {
	return &fs.PathError{Op: op, Path: key, Err: fs.ErrNotExist}
}

// ObservedStatter is a Store that judges an observation itself (see StatObserved).
type ObservedStatter interface {
	// StatObserved describes seen.Path for a decision, given that the caller has just observed seen.
	StatObserved(ctx context.Context, seen ObjectInfo) (ObjectInfo, error)
}

// StatObserved describes seen.Path for a decision about a change the caller is about to make, when the
// caller has just observed seen through what the change then acts through (the local mount's stat through
// its folder descriptor; the S3 version its conditional request names). The decision then judges exactly
// that object, not another look by path, which could find another file. A store that knows better
// (ObservedStatter: S3 where the server ignores If-Match, so the request is not pinned to seen) answers
// itself; any other store answers seen.
func StatObserved(ctx context.Context, st Store, seen ObjectInfo) (ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return ObjectInfo{}, err
	}
	if o, ok := st.(ObservedStatter); ok {
		return o.StatObserved(ctx, seen)
	}
	return seen, nil
}

// QuarantineDir is the folder at the store root that holds the objects deleted through a mount with
// --quarantine (package quarantine). It is not part of the store's checkpoint data: walks and
// `_metadata` discovery skip it, so a `_metadata` staged there is no live checkpoint and an object
// staged there is missing from its original key.
const QuarantineDir = ".ckguard-quarantine"

// SharedDir is the folder at the store root that holds the state several mounts of the store share
// (package shared: pins, the registry of mounts, leases). Like QuarantineDir it is ckguard's, not
// checkpoint data: hidden by every mount, skipped by walks, never staged or restored into.
const SharedDir = ".ckguard"

// InQuarantine reports whether key is one of ckguard's own folders at the store root, the
// quarantine folder or the shared state folder (SharedDir), or lies below one.
func InQuarantine(key string) bool {
	return under(key, QuarantineDir) || under(key, SharedDir)
}

// ReservedName reports whether name, at the store root, is one of ckguard's own folders.
func ReservedName(name string) bool { return name == QuarantineDir || name == SharedDir }

func under(key, dir string) bool {
	return strings.HasPrefix(key, dir) && (len(key) == len(dir) || key[len(dir)] == '/')
}
