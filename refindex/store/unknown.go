package store

import (
	"context"
	"fmt"
)

// UnknownSubtree is an entry a walk or listing could not read: a folder it may not open or list
// (EACCES, EIO, a name too long for the backend, a listing error on one S3 prefix or HDFS folder), an
// entry it may not stat, a name the backend cannot round-trip. What lies at and below Key is unknown:
// it may hold `_metadata`, so the index must not judge anything there as if it were seen.
type UnknownSubtree struct {
	Key string // store key of the entry ("" = the store root)
	Err error  // why it cannot be read
	// UID owns the entry where the backend has owners and its owner could be read (HasUID).
	UID    uint32
	HasUID bool
}

// Error makes an UnknownSubtree the error that aborts a walk whose caller takes no unknown subtrees.
func (u *UnknownSubtree) Error() string {
	k := u.Key
	if k == "" {
		k = "the store root"
	}
	return fmt.Sprintf("%s cannot be read: %v", k, u.Err)
}

func (u *UnknownSubtree) Unwrap() error { return u.Err }

type unknownKey struct{}

// WithUnknown returns a context under which Walk, ListMetadata, ListAllMetadata and ListNewMetadata
// report an entry they cannot read to fn and go on with the rest of the store, instead of failing.
// fn may be called from several goroutines at once (the S3 store lists in parallel); a non-nil error
// from it stops the walk and is returned.
//
// A context, not a parameter: the contract holds for every listing method of every backend (and the
// shortcuts of FullLister and NewLister) without changing their signatures, and a caller that does
// not opt in keeps today's answer: the walk fails with an error wrapping *UnknownSubtree.
func WithUnknown(ctx context.Context, fn func(UnknownSubtree) error) context.Context {
	return context.WithValue(ctx, unknownKey{}, fn)
}

// ReportUnknown is what a backend calls for an entry it cannot read: the callback of WithUnknown
// answers when ctx has one (nil: skip the entry and go on); otherwise the entry is the walk's error.
func ReportUnknown(ctx context.Context, u UnknownSubtree) error {
	if fn, ok := ctx.Value(unknownKey{}).(func(UnknownSubtree) error); ok && fn != nil {
		return fn(u)
	}
	return &u
}

// TakesUnknown reports whether ctx carries a WithUnknown callback.
func TakesUnknown(ctx context.Context) bool {
	fn, ok := ctx.Value(unknownKey{}).(func(UnknownSubtree) error)
	return ok && fn != nil
}
