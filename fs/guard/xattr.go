package guard

import (
	"context"
	"strings"
	"syscall"
)

// Extended attributes a guarded mount answers from the index itself: never stored, and never listed,
// so cp -a, rsync -X and a cross-device mv do not copy the guard's opinion into other filesystems.
const (
	XattrRefs   = "user.ckguard.refs"  // newline-separated _metadata keys of the referencing checkpoints the caller could find, then "N more checkpoints you cannot see"
	XattrState  = "user.ckguard.state" // referenced | protected-by-policy | in-grace | deletable | blocked
	XattrPrefix = "user.ckguard."      // the guard's namespace: setting or removing anything in it is refused
)

// IsXattr reports whether attr is in the guard's namespace (XattrPrefix).
func IsXattr(attr string) bool { return strings.HasPrefix(attr, XattrPrefix) }

// Getxattr answers getxattr(2) of one of the guard's attributes of p (IsXattr(attr) holds) into dest, as
// the kernel asks: the size with an empty dest, ERANGE when dest is too small, ENODATA for a name in the
// namespace that is not one of them, EIO when the index cannot explain p. XattrRefs names only the
// referencing checkpoints visible reports the caller could find themselves and counts the others
// (refsValue); a nil visible shows none of them.
func (e *Enforcer) Getxattr(ctx context.Context, p, attr string, dest []byte, visible VisibleFunc) (uint32, syscall.Errno) {
	if attr != XattrState && attr != XattrRefs {
		return 0, syscall.ENODATA
	}
	state, refs, err := e.checker.Explain(ctx, p)
	if err != nil {
		return 0, syscall.EIO
	}
	val := state
	if attr == XattrRefs {
		val = refsValue(refs, visible)
	}
	if len(dest) == 0 {
		return uint32(len(val)), 0
	}
	if len(dest) < len(val) {
		return uint32(len(val)), syscall.ERANGE
	}
	return uint32(copy(dest, val)), 0
}

// XattrWriteErrno is what setxattr(2) and removexattr(2) of attr answer on a mount that stores no
// extended attributes: EPERM for the guard's namespace (the index's answer is not settable), ENOTSUP for
// any other name ("this filesystem has none", which cp -a and rsync -X accept).
func XattrWriteErrno(attr string) syscall.Errno {
	if IsXattr(attr) {
		return syscall.EPERM
	}
	return syscall.ENOTSUP
}

// NoStoredXattrs gives the node of a mount whose store keeps no extended attributes (S3, HDFS) its
// listxattr, setxattr and removexattr, embedded in the node: nothing is listed (the guard's own
// attributes are the index's answer about the name, not data of the file: cp -a, rsync -X and mv must
// not copy them), and writes answer XattrWriteErrno. Getxattr stays the mount's (Enforcer.Getxattr).
type NoStoredXattrs struct{}

// Listxattr lists nothing.
func (NoStoredXattrs) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	return 0, 0
}

// Setxattr answers XattrWriteErrno.
func (NoStoredXattrs) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return XattrWriteErrno(attr)
}

// Removexattr answers XattrWriteErrno.
func (NoStoredXattrs) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return XattrWriteErrno(attr)
}
