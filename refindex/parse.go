package refindex

import (
	"io"

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
