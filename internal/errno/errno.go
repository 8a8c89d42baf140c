// Package errno holds the part of the errno mapping every storage backend shares (s3client.Errno,
// hdfsclient.Errno): the standard error classes a FUSE operation reports the same way on any store.
// It imports nothing of ckguard.
package errno

import (
	"context"
	"errors"
	"io/fs"
	"syscall"
)

// Common maps the classes every backend shares, after the backend has mapped its own (its classified
// errors are disjoint from these, so the order between the two steps does not matter):
//
//	not found                               → ENOENT
//	access denied                           → EACCES
//	canceled by the caller (interrupted op) → EINTR
//	a syscall.Errno                         → itself
//	anything else                           → EIO (fail closed: never success, never "not found")
func Common(err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrPermission):
		return syscall.EACCES
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return syscall.EIO
}
