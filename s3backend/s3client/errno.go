package s3client

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/ckguard/ckguard/internal/errno"
)

// Sentinel errors every S3 failure is classified into (besides fs.ErrNotExist and fs.ErrPermission, which
// are used as-is so callers can test with errors.Is(err, fs.ErrNotExist) like on a local directory).
var (
	// ErrPrecondition: a conditional request (If-Match/If-None-Match) failed because the object changed
	// since ckguard looked at it (HTTP 412). The operation was not applied.
	ErrPrecondition = errors.New("the object changed since ckguard looked at it (precondition failed)")
	// ErrNotImplemented: the server does not support the request (HTTP 501), e.g. a conditional delete.
	ErrNotImplemented = errors.New("the S3 server does not implement this request")
	// ErrUnavailable: throttling, 5xx, timeouts, connection failures after the bounded retries.
	ErrUnavailable = errors.New("the S3 server is unavailable")
)

// Error is an S3 failure with the operation and the full key, classified (Unwrap) into one sentinel above
// or fs.ErrNotExist / fs.ErrPermission, and carrying the SDK error for the message.
type Error struct {
	Op    string // "HeadObject", ...
	Key   string // s3://bucket/key
	Class error  // the sentinel
	Err   error  // the SDK error
}

func (e *Error) Error() string { return fmt.Sprintf("S3 %s %s: %v", e.Op, e.Key, e.Err) }

// Unwrap exposes both the class and the cause, so errors.Is works for either (context.Canceled too).
func (e *Error) Unwrap() []error { return []error{e.Class, e.Err} }

// classify maps an SDK error to its class. It is the only place that knows S3 error codes.
func classify(err error) error {
	if errors.Is(err, context.Canceled) {
		return context.Canceled
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "NoSuchKey", "NotFound", "NoSuchBucket", "NoSuchUpload":
			return fs.ErrNotExist
		case "AccessDenied", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled":
			return fs.ErrPermission
		case "PreconditionFailed", "ConditionalRequestConflict":
			return ErrPrecondition
		case "NotImplemented":
			return ErrNotImplemented
		}
	}
	var respErr *awshttp.ResponseError
	if errors.As(err, &respErr) {
		switch code := respErr.HTTPStatusCode(); {
		case code == http.StatusNotFound:
			return fs.ErrNotExist
		case code == http.StatusForbidden:
			return fs.ErrPermission
		case code == http.StatusPreconditionFailed || code == http.StatusConflict:
			return ErrPrecondition
		case code == http.StatusNotImplemented:
			return ErrNotImplemented
		}
	}
	return ErrUnavailable
}

func wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var maxErr *retry.MaxAttemptsError
	if errors.As(err, &maxErr) {
		err = fmt.Errorf("%w (gave up after the bounded retries)", err)
	}
	return &Error{Op: op, Key: key, Class: classify(err), Err: err}
}

// Errno maps any error of this package (or of code built on it) to the errno a FUSE operation returns.
// This is the single errno mapping of the S3 backend; docs/SEMANTICS.md documents it.
//
//	not found (NoSuchKey, 404)                 → ENOENT
//	access denied, bad signature (403)         → EACCES
//	precondition failed (412, 409 conflict)    → ESTALE: the object changed between ckguard's look and
//	                                             its conditional request; nothing was done, retry sees the
//	                                             new object
//	not implemented (501)                      → ENOTSUP
//	canceled by the caller (interrupted op)    → EINTR
//	throttling, 5xx, timeouts, network, other  → EIO
func Errno(err error) syscall.Errno {
	var s3err *Error
	if errors.As(err, &s3err) {
		// Classified S3 failures: the class decides, not an errno buried in the cause (a refused
		// connection must be EIO, not ECONNREFUSED).
		err = s3err.Class
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrUnavailable):
		return syscall.EIO
	case errors.Is(err, ErrPrecondition):
		return syscall.ESTALE
	case errors.Is(err, ErrNotImplemented):
		return syscall.ENOTSUP
	}
	return errno.Common(err)
}
