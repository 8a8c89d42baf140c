package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinksResolve: every relative link in the operator and developer docs names a file that exists,
// and a link with #anchor names a heading (or an <a id>) of that file, so text moved between pages
// cannot leave a link pointing at nothing.
func TestDocLinksResolve(t *testing.T) {
	files := []string{"../README.md", "OPERATIONS.md", "SEMANTICS.md", "MOUNT.md", "DEVELOPING.md", "CONFIG.md", "monitoring/README.md"}
	link := regexp.MustCompile(`\]\(([^)\s]*)\)`)
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(stripCode(string(b)), -1) {
			target, frag, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			n++
			path := f
			if target != "" {
				path = filepath.Join(filepath.Dir(f), target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s: %v", f, m[1], err)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if !anchors(t, path)[frag] {
				t.Errorf("%s links to %s: %s has no heading with anchor #%s", f, m[1], path, frag)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d relative links found: did the regexp break?", n)
	}
}

// stripCode drops fenced blocks and code spans, whose brackets are no links.
func stripCode(s string) string {
	var out []string
	fenced := false
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, regexp.MustCompile("`[^`]*`").ReplaceAllString(l, "``"))
		}
	}
	return strings.Join(out, "\n")
}

// anchors are GitHub's anchors of a markdown file's headings (duplicates numbered -1, -2, …) and its
// explicit <a id="…"> targets.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`<a id="([^"]+)">`).FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	seen := map[string]int{}
	fenced := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		a := slug(h)
		if k := seen[a]; k > 0 {
			out[a+"-"+strconv.Itoa(k)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// slug is GitHub's heading anchor: lower case, spaces to -, punctuation but - and _ dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
