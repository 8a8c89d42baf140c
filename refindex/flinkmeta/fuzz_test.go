package flinkmeta

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

// onlyReaderAt hides *bytes.Reader so Parse takes the buffered ReaderAt path.
type onlyReaderAt struct{ r io.ReaderAt }

func (o onlyReaderAt) ReadAt(p []byte, off int64) (int, error) { return o.r.ReadAt(p, off) }

// FuzzParse: no input panics; the byte-slice and the (tiny-buffer) ReaderAt paths agree; a parsed
// input survives Encode and re-parses identically.
func FuzzParse(f *testing.F) {
	if dir := fixturesDirOrEmpty(); dir != "" {
		for _, fx := range loadFixtures(f) {
			f.Add(fx.data)
		}
	}
	for v := 2; v <= 6; v++ {
		f.Add(mustEncode(f, richMetadata(v)))
	}
	f.Add(mustEncode(f, NewSavepoint(6, 1, true)))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseBytes(b, "fuzz", Options{KeepInline: true})
		m2, err2 := parseReaderAt(onlyReaderAt{bytes.NewReader(b)}, int64(len(b)), "fuzz", Options{KeepInline: true}, 13)
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("byte-slice and ReaderAt paths disagree: %v vs %v", err, err2)
		}
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			return
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatal("byte-slice and ReaderAt paths parse differently")
		}
		_ = m.References("dir/_metadata")
		_ = m.HandleCounts()
		_ = m.InlineBytes()
		enc, err := Encode(m)
		if err != nil {
			t.Fatalf("parsed but does not encode: %v", err)
		}
		m3, err := ParseBytes(enc, "fuzz", Options{KeepInline: true})
		if err != nil || !reflect.DeepEqual(m, m3) {
			t.Fatalf("parse(encode(m)) != m: %v", err)
		}
	})
}
