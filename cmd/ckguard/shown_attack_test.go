package main

import "testing"

// TestTextOutputQuotesInvisibleNames: a name with a character that prints as nothing or moves the text
// around (a bidirectional override, a zero-width space, a byte-order mark, a no-break space) would show
// as another path: `quarantine list` could show "job/chk-1/_metadata" for a file a user named
// "job/chk-1/_metadata\u200b", or an override could reverse the rest of the line. Such names print
// quoted, with the character escaped.
func TestTextOutputQuotesInvisibleNames(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"job/chk-1/_metadata\u200b", `"job/chk-1/_metadata\u200b"`},
		{"job/chk-1/\u202eatadatem_", `"job/chk-1/\u202eatadatem_"`},
		{"job/\u2066x\u2069", `"job/\u2066x\u2069"`},
		{"\ufeffjob/a", `"\ufeffjob/a"`},
		{"job/a\u00a0b", `"job/a\u00a0b"`},
		{"job/a\u2028b", `"job/a\u2028b"`},
		{"job/日本/ü", "job/日本/ü"},
	} {
		if got := shown(tc.in); got != tc.want {
			t.Errorf("shown(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
