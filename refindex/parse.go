package refindex

import (
	"fmt"
	"io"
	"strings"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
)

// rawRef is a reference as the parser reports it, before normalisation.
type rawRef struct {
	Kind   RefKind
	URI    string
	Length int64
}

// parsedMeta is what the index needs from one `_metadata`.
type parsedMeta struct {
	ID     int64
	Kind   string
	Format int
	Refs   []rawRef
}

// parseFunc parses one `_metadata` read from the store key name. Tests may substitute it.
type parseFunc func(r io.ReaderAt, size int64, name string) (*parsedMeta, error)

func parseFlinkMetadata(r io.ReaderAt, size int64, name string) (*parsedMeta, error) {
	m, err := flinkmeta.Parse(r, size, name, flinkmeta.Options{})
	if err != nil {
		return nil, err
	}
	p := &parsedMeta{ID: m.CheckpointID, Kind: m.Kind, Format: m.FormatVersion}
	for _, rf := range m.References(name) {
		// No file system and no S3 key can hold a NUL byte, and the index's keys use NUL as the separator
		// of (object, checkpoint) pairs: such a reference can only come from a corrupt or hostile file.
		// Treating it as unparseable fails closed (every deletion refused until it is dealt with).
		if strings.IndexByte(rf.URI, 0) >= 0 {
			return nil, fmt.Errorf("%s: reference %q (operator %s, subtask %d) contains a NUL byte, which no file system or S3 key can hold: the file is corrupt or was tampered with; inspect it with `ckguard inspect %s` and delete or replace it", name, rf.URI, rf.OperatorID, rf.Subtask, name)
		}
		var k RefKind
		switch rf.Kind {
		case flinkmeta.RefFile:
			k = RefFile
		case flinkmeta.RefRelative:
			k = RefRelative
		case flinkmeta.RefSegment:
			k = RefSegment
		case flinkmeta.RefDirectory:
			k = RefDirectory
		default:
			// A kind this index does not know: keep it as a whole-file reference (protect more).
			k = RefFile
		}
		p.Refs = append(p.Refs, rawRef{Kind: k, URI: rf.URI, Length: rf.Length})
	}
	return p, nil
}
