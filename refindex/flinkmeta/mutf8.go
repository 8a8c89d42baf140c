package flinkmeta

import (
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// Java's modified UTF-8 (DataOutput.writeUTF, §1): U+0000 as C0 80, characters above U+FFFF as
// two 3-byte surrogates, no 4-byte sequences.

var errMUTF8 = errors.New("malformed modified UTF-8")

// decodeMUTF8 converts modified UTF-8 to a Go (UTF-8) string. The all-ASCII case, which is every
// string Flink writes in practice, is a single conversion.
func decodeMUTF8(b []byte) (string, error) {
	return decodeMUTF8In(nil, b)
}

// decodeMUTF8In is decodeMUTF8 with ASCII strings stored in arena (if not nil).
func decodeMUTF8In(arena *stringArena, b []byte) (string, error) {
	for i := 0; i < len(b); i++ {
		if b[i] == 0 || b[i] >= 0x80 {
			return decodeMUTF8Slow(b)
		}
	}
	if arena != nil {
		return arena.str(b), nil
	}
	return string(b), nil
}

func decodeMUTF8Slow(b []byte) (string, error) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		c := b[i]
		var r rune
		switch {
		case c == 0:
			return "", errMUTF8
		case c < 0x80:
			r, i = rune(c), i+1
		case c&0xE0 == 0xC0:
			if i+1 >= len(b) || b[i+1]&0xC0 != 0x80 {
				return "", errMUTF8
			}
			r, i = rune(c&0x1F)<<6|rune(b[i+1]&0x3F), i+2
			// Overlong forms are accepted only for U+0000 (C0 80), as Java writes it.
			if r < 0x80 && r != 0 {
				return "", errMUTF8
			}
		case c&0xF0 == 0xE0:
			if i+2 >= len(b) || b[i+1]&0xC0 != 0x80 || b[i+2]&0xC0 != 0x80 {
				return "", errMUTF8
			}
			r, i = rune(c&0x0F)<<12|rune(b[i+1]&0x3F)<<6|rune(b[i+2]&0x3F), i+3
			if r < 0x800 {
				return "", errMUTF8
			}
			if utf16.IsSurrogate(r) {
				// Must be a high surrogate followed by a 3-byte low surrogate.
				if r >= 0xDC00 || i+2 >= len(b) || b[i] != 0xED || b[i+1]&0xF0 != 0xB0 || b[i+2]&0xC0 != 0x80 {
					return "", errMUTF8
				}
				lo := rune(b[i]&0x0F)<<12 | rune(b[i+1]&0x3F)<<6 | rune(b[i+2]&0x3F)
				r, i = utf16.DecodeRune(r, lo), i+3
			}
		default:
			return "", errMUTF8
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out), nil
}

// mutf8Len is the encoded length of s, or -1 if s is not valid UTF-8.
func mutf8Len(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c != 0 && c < 0x80 {
			n, i = n+1, i+1
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return -1
		}
		i += size
		switch {
		case r == 0:
			n += 2
		case r < 0x800:
			n += 2
		case r <= 0xFFFF:
			n += 3
		default:
			n += 6
		}
	}
	return n
}

// appendMUTF8 appends the encoded bytes of s (without the length prefix); s must be valid UTF-8.
func appendMUTF8(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c != 0 && c < 0x80 {
			dst, i = append(dst, c), i+1
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r < 0x800:
			dst = append(dst, 0xC0|byte(r>>6), 0x80|byte(r&0x3F))
		case r <= 0xFFFF:
			dst = append3(dst, r)
		default:
			hi, lo := utf16.EncodeRune(r)
			dst = append3(append3(dst, hi), lo)
		}
	}
	return dst
}

func append3(dst []byte, r rune) []byte {
	return append(dst, 0xE0|byte(r>>12), 0x80|byte(r>>6&0x3F), 0x80|byte(r&0x3F))
}
