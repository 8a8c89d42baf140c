package main

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// shown is s as the text output prints it: as it is, or Go-quoted ("a\nb", "\x1b[2J") when it holds a
// control character or another that does not print as itself (strconv.IsPrint), or is not UTF-8.
// Paths and process names come from the store's users: a file named with a newline would otherwise
// print as two lines (a second, forged path in `orphans`, a forged entry in `quarantine list`), one with
// a zero-width or bidirectional character as another path, and one with escape sequences would drive
// the operator's terminal. The --json output carries the exact bytes.
func shown(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		// Also what prints as nothing or moves the text (zero-width and bidirectional characters,
		// no-break and other spaces than ' '): the name would look like another path.
		if unicode.IsControl(r) || !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
