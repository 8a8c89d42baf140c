package hdfsclient

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/ckguard/ckguard/internal/errno"
)

// Sentinel classes of HDFS failures (besides fs.ErrNotExist, fs.ErrPermission, fs.ErrExist and the
// syscall errnos ENOTEMPTY / ENOTDIR / EDQUOT, used as-is so callers test them like local errors).
var (
	// ErrSafeMode: the NameNode is in safe mode (read-only); no namespace change was made.
	ErrSafeMode = errors.New("the HDFS NameNode is in safe mode (read-only)")
	// ErrStandby: every NameNode tried is a standby (HA failover in progress or misconfigured addresses).
	ErrStandby = errors.New("no active HDFS NameNode (all tried are standby)")
	// ErrLease: another client holds the file's lease (being written), or this client's lease was lost.
	ErrLease = errors.New("the HDFS file lease is held by another writer or was lost")
	// ErrUnavailable: RPC failures, timeouts, refused connections, unknown remote exceptions.
	ErrUnavailable = errors.New("the HDFS cluster is unavailable")
)

// Error is an HDFS failure with the operation and path, classified (Unwrap) into one class above or a
// standard error, and carrying the cause for the message.
type Error struct {
	Op    string // "stat", "remove", …
	Path  string // the HDFS path
	Class error
	Err   error
}

func (e *Error) Error() string { return fmt.Sprintf("HDFS %s %s: %v", e.Op, e.Path, e.Err) }

// Unwrap exposes the class and the cause, so errors.Is works for either.
func (e *Error) Unwrap() []error { return []error{e.Class, e.Err} }

// remoteError is the library's view of a Java exception from a NameNode or DataNode.
type remoteError interface{ Exception() string }

// withRemoteMessage adds the first line of a NameNode exception's message to the library's error,
// which names only the class ("rename2 call failed with ERROR_APPLICATION (java.io.IOException)").
func withRemoteMessage(err error) error {
	var m interface{ Message() string }
	if !errors.As(err, &m) {
		return err
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(m.Message()), "\n")
	if msg == "" {
		return err
	}
	return fmt.Errorf("%w: %s", err, msg)
}

// classify maps a library error to its class. It is the only place that knows HDFS exception names;
// anything it does not know is ErrUnavailable, so an unexpected answer never reads as success or as
// "not found" (which a caller might take for "already deleted").
func classify(err error) error {
	if errors.Is(err, context.Canceled) {
		return context.Canceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrUnavailable
	}
	var re remoteError
	if errors.As(err, &re) {
		ex := re.Exception()
		switch ex[strings.LastIndexByte(ex, '.')+1:] {
		case "FileNotFoundException":
			return fs.ErrNotExist
		case "AccessControlException", "AuthorizationException":
			return fs.ErrPermission
		case "FileAlreadyExistsException":
			return fs.ErrExist
		case "PathIsNotEmptyDirectoryException":
			return syscall.ENOTEMPTY
		case "ParentNotDirectoryException":
			return syscall.ENOTDIR
		case "NSQuotaExceededException", "DSQuotaExceededException", "QuotaExceededException":
			return syscall.EDQUOT
		case "SafeModeException":
			return ErrSafeMode
		case "StandbyException":
			return ErrStandby
		case "LeaseExpiredException", "AlreadyBeingCreatedException", "RecoveryInProgressException":
			return ErrLease
		}
		return ErrUnavailable
	}
	// The library has already turned some exceptions into os errors.
	// ENOTEMPTY first: errors.Is(ENOTEMPTY, fs.ErrExist) holds.
	for _, known := range []error{syscall.ENOTEMPTY, fs.ErrNotExist, fs.ErrPermission, fs.ErrExist} {
		if errors.Is(err, known) {
			return known
		}
	}
	if errors.Is(err, os.ErrInvalid) {
		return fs.ErrInvalid
	}
	return ErrUnavailable
}

// wrap classifies err (nil stays nil); an already classified error is kept.
func wrap(op, path string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Op: op, Path: path, Class: classify(err), Err: err}
}

// Errno maps any error of this package (or of code built on it) to the errno a FUSE operation returns.
// This is the single errno mapping of the HDFS backend; docs/SEMANTICS.md documents it.
//
//	not found (FileNotFoundException)              → ENOENT
//	access denied (AccessControlException)          → EACCES
//	exists (FileAlreadyExists, rename onto a name)  → EEXIST
//	directory not empty                             → ENOTEMPTY
//	parent is a file                                → ENOTDIR
//	quota exceeded                                  → EDQUOT
//	safe mode, standby, lease, RPC failure, timeout,
//	unknown remote exception                        → EIO (nothing was changed, or not known to be)
//	canceled by the caller (interrupted op)         → EINTR
func Errno(err error) syscall.Errno {
	var herr *Error
	if errors.As(err, &herr) {
		err = herr.Class // the class decides, not an errno buried in the cause (ECONNREFUSED → EIO)
		if e, ok := err.(syscall.Errno); ok {
			return e // ENOTEMPTY, ENOTDIR, EDQUOT (ENOTEMPTY also "is" fs.ErrExist)
		}
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrSafeMode), errors.Is(err, ErrStandby), errors.Is(err, ErrLease), errors.Is(err, ErrUnavailable):
		return syscall.EIO
	case errors.Is(err, fs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, fs.ErrInvalid):
		return syscall.EINVAL
	}
	return errno.Common(err)
}

// Unavailable reports whether err says the cluster could not answer (safe mode, standby, RPC trouble):
// a decision that needed the answer must refuse.
func Unavailable(err error) bool {
	return errors.Is(err, ErrSafeMode) || errors.Is(err, ErrStandby) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrLease)
}
