package flinkmeta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// checkHostile parses b (which must not panic; TestMain turns recovered panics back into panics)
// and, when it parses, requires the result to survive Encode and to re-parse identically: a
// corrupt file either fails or is read as some other consistent file. (Re-encoding need not give
// b back: Java accepts non-canonical forms such as a "has state" flag of 2.)
func checkHostile(t *testing.T, what string, b []byte) (ok bool) {
	t.Helper()
	m, err := ParseBytes(b, "hostile", Options{KeepInline: true})
	if err != nil {
		var pe *ParseError
		var uv *UnsupportedVersionError
		if !errors.As(err, &pe) && !errors.As(err, &uv) {
			t.Errorf("%s: error is neither ParseError nor UnsupportedVersionError: %v", what, err)
		}
		return false
	}
	enc, err := Encode(m)
	if err != nil {
		t.Errorf("%s: parsed but does not re-encode: %v", what, err)
		return true
	}
	m2, err := ParseBytes(enc, "hostile", Options{KeepInline: true})
	if err != nil || !reflect.DeepEqual(m, m2) {
		t.Errorf("%s: parse(encode(parse(b))) != parse(b): %v", what, err)
	}
	return true
}

// TestTruncation: every proper prefix of a valid file is an error (§9.4: a truncated file must
// never read as "references nothing"). Small files are cut at every length; large ones at every
// length near both ends plus random cuts (fewer with -short).
func TestTruncation(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	random := 300
	if testing.Short() {
		random = 20
	}
	for i, f := range loadFixtures(t) {
		if testing.Short() && i%5 != 0 {
			continue
		}
		if _, err := ParseBytes(f.data, f.path, Options{}); err != nil {
			continue // V1
		}
		n := len(f.data)
		cut := func(k int) {
			if checkHostile(t, f.rel, f.data[:k]) {
				t.Errorf("%s: prefix of %d/%d bytes parsed as a complete file", f.rel, k, n)
			}
		}
		if n <= 4096 && !testing.Short() {
			for k := 0; k < n; k++ {
				cut(k)
			}
			continue
		}
		for k := 0; k < min(n, 512); k++ {
			cut(k)
			cut(n - 1 - k)
		}
		for j := 0; j < random; j++ {
			cut(rng.Intn(n))
		}
	}
}

// TestBitFlips flips single bits of every fixture: the result is an error or a consistent file.
func TestBitFlips(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	flips := 200
	if testing.Short() {
		flips = 10
	}
	for _, f := range loadFixtures(t) {
		b := bytes.Clone(f.data)
		for j := 0; j < flips; j++ {
			var pos int
			if j < 64 && j < len(b) {
				pos = j // the header and first counts are the most sensitive
			} else {
				pos = rng.Intn(len(b))
			}
			bit := byte(1) << rng.Intn(8)
			b[pos] ^= bit
			checkHostile(t, f.rel, b)
			b[pos] ^= bit
		}
	}
}

func header(v int32, rest ...[]byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, Magic)
	b = binary.BigEndian.AppendUint32(b, uint32(v))
	for _, r := range rest {
		b = append(b, r...)
	}
	return b
}

func be32(x uint32) []byte { return binary.BigEndian.AppendUint32(nil, x) }
func be64(x uint64) []byte { return binary.BigEndian.AppendUint64(nil, x) }

// TestHostileLengthPrefixes: counts and lengths of 0x7fffffff must fail without allocating from
// the prefix.
func TestHostileLengthPrefixes(t *testing.T) {
	op := append(make([]byte, 16), be32(1)...) // id, parallelism
	op = append(op, be32(128)...)              // max parallelism
	subtask := append(op, 0)                   // coordinator null
	subtask = append(subtask, be32(1)...)      // one subtask
	subtask = append(subtask, be32(0)...)      // index 0
	cases := map[string][]byte{
		"operator count":  header(4, be64(1), be32(0), be32(0x7fffffff)),
		"master count":    header(4, be64(1), be32(0x7fffffff)),
		"master length":   header(4, be64(1), be32(1), be32(0xC96B1696), be32(0x7fffffff)),
		"subtask count":   header(4, be64(1), be32(0), be32(1), op, []byte{0}, be32(0x7fffffff)),
		"bytestream len":  header(4, be64(1), be32(0), be32(1), op, []byte{1, 0, 1, 'x'}, be32(0x7fffffff)),
		"operator states": header(4, be64(1), be32(0), be32(1), subtask, be32(1), []byte{4}, be32(0x7fffffff)),
		"key groups":      header(4, be64(1), be32(0), be32(1), subtask, be32(0), be32(0), []byte{12}, be32(0), be32(0x7fffffff)),
		"shared files":    header(4, be64(1), be32(0), be32(1), subtask, be32(0), be32(0), []byte{11}, be64(1), []byte{0, 0}, be32(0), be32(1), be64(0), []byte{0}, be32(0x7fffffff)),
		"channel handles": header(4, be64(1), be32(0), be32(1), subtask, be32(0), be32(0), []byte{0, 0}, be32(0x7fffffff)),
		"string length":   header(5, be64(1), be32(0), be32(1), []byte{0xff, 0xff}),
		"negative count":  header(4, be64(1), be32(0), be32(0x80000000)),
	}
	for name, b := range cases {
		for _, keep := range []bool{false, true} {
			var err error
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i := 0; i < 10; i++ {
				_, err = ParseBytes(b, name, Options{KeepInline: keep})
			}
			runtime.ReadMemStats(&after)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Errorf("%s: want ParseError, got %v", name, err)
			}
			if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
				t.Errorf("%s: allocated %d bytes for a %d-byte file", name, d, len(b))
			}
		}
	}
	allocs := testing.AllocsPerRun(20, func() {
		_, _ = ParseBytes(cases["operator count"], "x", Options{})
	})
	if allocs > 20 {
		t.Errorf("%v allocations to reject a hostile count", allocs)
	}
}

func TestHostileStructure(t *testing.T) {
	nested := header(4, be64(1), be32(0), be32(1), make([]byte, 16), be32(1), be32(1), []byte{0}, be32(1), be32(0), be32(1), []byte{4}, be32(0))
	for i := 0; i < 100; i++ {
		nested = append(nested, 3)
		nested = append(nested, be32(0)...)
		nested = append(nested, be32(0)...)
	}
	relHostile := func(name string) []byte {
		return header(4, be64(1), be32(0), be32(1), make([]byte, 16), be32(1), be32(1), []byte{0}, be32(1), be32(0), be32(1), []byte{4}, be32(0), []byte{6, 0, byte(len(name))}, []byte(name), be64(1))
	}
	cases := map[string]struct {
		b    []byte
		want string
	}{
		"bad magic":        {append([]byte{1, 2, 3, 4}, be32(4)...), "magic"},
		"empty":            {nil, "bytes"},
		"negative id":      {header(4, be64(1<<63)), "checkpoint id"},
		"deep nesting":     {nested, "nested"},
		"relative ..":      {relHostile("../../etc/passwd"), "relative"},
		"relative slash":   {relHostile("a/b"), "relative"},
		"empty file path":  {header(4, be64(1), be32(0), be32(1), make([]byte, 16), be32(1), be32(1), []byte{0}, be32(1), be32(0), be32(1), []byte{4}, be32(0), []byte{2}, be64(1), []byte{0, 0}, make([]byte, 40)), "non-empty file path"},
		"relative empty":   {relHostile(""), "relative"},
		"trailing bytes":   {append(mustEncode(t, NewCheckpoint(3, 1, true)), 0), "end of file"},
		"bad trailer":      {append(mustEncode(t, NewCheckpoint(4, 1, true))[:len(mustEncode(t, NewCheckpoint(4, 1, true)))-8], bytes.Repeat([]byte{0}, 8)...), "UTF-8"},
		"bad mutf8":        {header(5, be64(1), be32(0), be32(1), []byte{0, 2, 0xC3, 0x28}, make([]byte, 64)), "UTF-8"},
		"lone surrogate":   {header(5, be64(1), be32(0), be32(1), []byte{0, 3, 0xED, 0xA0, 0x80}, make([]byte, 64)), "UTF-8"},
		"coordinator 2":    {header(4, be64(1), be32(0), be32(1), make([]byte, 16), be32(1), be32(1), []byte{2}, be64(1), []byte{0, 1, 'x'}), "coordinator"},
		"finished + coord": {header(4, be64(1), be32(0), be32(1), make([]byte, 16), be32(1), be32(1), []byte{1, 0, 0}, be32(0), be32(0xffffffff)), "null coordinator"},
	}
	for name, c := range cases {
		_, err := ParseBytes(c.b, name, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v should mention %q and the file name", name, err, c.want)
		}
	}
	for v, want := range map[int32]string{0: "no longer supported", 1: "no longer supported", 7: "regional-checkpoint", 8: "unknown format version 8", -1: "unknown format version -1"} {
		_, err := ParseBytes(header(v, be64(1)), "some/_metadata", Options{})
		if !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "some/_metadata") {
			t.Errorf("version %d: %v", v, err)
		}
	}
}

func mustEncode(t testing.TB, m *Metadata) []byte {
	t.Helper()
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMUTF8(t *testing.T) {
	for _, s := range []string{"", "plain", "nul\x00inside", "é", "€ euro", "😀 emoji 𝄞", "mixed ascii 日本語 \U0010FFFF"} {
		n := mutf8Len(s)
		enc := appendMUTF8(nil, s)
		if n != len(enc) || bytes.IndexByte(enc, 0) >= 0 {
			t.Errorf("%q: len %d, encoded %x", s, n, enc)
		}
		got, err := decodeMUTF8(enc)
		if err != nil || got != s {
			t.Errorf("%q: decoded %q, %v", s, got, err)
		}
	}
	// Java writes U+1F600 as the surrogates D83D DE00, each as 3 bytes.
	if got := appendMUTF8(nil, "😀"); !bytes.Equal(got, []byte{0xED, 0xA0, 0xBD, 0xED, 0xB8, 0x80}) {
		t.Errorf("surrogate encoding %x", got)
	}
	if mutf8Len("\xff") != -1 {
		t.Error("invalid UTF-8 accepted")
	}
	for _, bad := range [][]byte{{0}, {0xC1, 0x81}, {0xE0, 0x80, 0x80}, {0xF0, 0x9F, 0x98, 0x80}, {0xED, 0xB8, 0x80}, {0xED, 0xA0, 0xBD}, {0x80}} {
		if _, err := decodeMUTF8(bad); err == nil {
			t.Errorf("%x decoded", bad)
		}
	}
}

// TestTrailerStrict: the properties trailer is walked strictly.
func TestTrailerStrict(t *testing.T) {
	base := mustEncode(t, NewCheckpoint(4, 1, true))
	body := base[:len(base)-len(appendProperties(nil, CheckpointProps(true)))]
	for name, trailer := range map[string][]byte{
		"no header":         {0x70},
		"bad header":        {0xAC, 0xED, 0x00, 0x06, 0x70},
		"string not object": append([]byte{0xAC, 0xED, 0x00, 0x05, tcString, 0, 1}, 'x'),
		"dangling ref":      append([]byte{0xAC, 0xED, 0x00, 0x05, tcReference}, be32(baseHandle+5)...),
		"self ref enum":     append([]byte{0xAC, 0xED, 0x00, 0x05, tcEnum, tcClassDesc, 0, 1, 'E', 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0, 0, tcEndBlock, tcNull, tcReference}, be32(baseHandle+1)...),
		"two nulls":         {0xAC, 0xED, 0x00, 0x05, 0x70, 0x70},
		"wrong class":       appendProperties(nil, &Properties{TypeName: "x", SharingStrategy: "FORWARD"})[:40],
	} {
		_, err := ParseBytes(append(bytes.Clone(body), trailer...), name, Options{})
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%s: want ParseError, got %v", name, err)
		}
	}
}
