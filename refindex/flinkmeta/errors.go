package flinkmeta

import (
	"errors"
	"fmt"
)

// ParseError reports where and why a `_metadata` file could not be parsed.
type ParseError struct {
	File     string // the name passed to Parse
	Offset   int64  // byte offset of the item that failed
	Expected string // what the grammar expected there
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s: byte offset %d: expected %s", e.File, e.Offset, e.Expected)
}

// ErrUnsupportedVersion is matched (errors.Is) by every UnsupportedVersionError.
var ErrUnsupportedVersion = errors.New("unsupported _metadata format version")

// UnsupportedVersionError is returned for format versions other than 2–6. Failing closed on them
// is deliberate: guessing a layout could miss references.
type UnsupportedVersionError struct {
	File    string
	Version int32
}

func (e *UnsupportedVersionError) Error() string {
	var why string
	switch {
	case e.Version == 0 || e.Version == 1:
		why = fmt.Sprintf("format version %d (Flink 1.1/1.2) is no longer supported; restore it with Flink ≤ 1.10 and take a new savepoint", e.Version)
	case e.Version == 7:
		why = "format version 7 is the unreleased regional-checkpoint format (apache/flink#28963); refusing rather than guessing its layout"
	default:
		why = fmt.Sprintf("unknown format version %d (supported: 2–6); refusing rather than guessing its layout", e.Version)
	}
	return fmt.Sprintf("%s: byte offset 4: %s", e.File, why)
}

func (e *UnsupportedVersionError) Unwrap() error { return ErrUnsupportedVersion }
