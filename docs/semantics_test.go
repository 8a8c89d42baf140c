package docs

import (
	"os"
	"strings"
	"testing"
)

// TestSemanticsOneShape keeps SEMANTICS.md's "Operation by operation" in one shape: every operation's
// section is a table with one row per mount, local, S3 and HDFS, in that order, so a behaviour added for
// one mount lands beside the other two instead of in a section of its own; and "What each mount
// refuses by itself" has a column per mount.
func TestSemanticsOneShape(t *testing.T) {
	b, err := os.ReadFile("SEMANTICS.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Operation by operation\n")
	end := strings.Index(doc, "\n## What each mount refuses by itself\n")
	if start < 0 || end < start {
		t.Fatal(`SEMANTICS.md lacks "## Operation by operation" followed by "## What each mount refuses by itself"`)
	}
	sections := strings.Split(doc[start:end], "\n### ")[1:]
	if len(sections) < 10 {
		t.Fatalf("SEMANTICS.md describes %d operations; the per-operation sections were lost?", len(sections))
	}
	for _, s := range sections {
		title, _, _ := strings.Cut(s, "\n")
		var mounts []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.HasPrefix(l, "| ") || strings.HasPrefix(l, "| Mount ") {
				continue
			}
			m, _, _ := strings.Cut(strings.TrimPrefix(l, "| "), " |")
			mounts = append(mounts, m)
		}
		if strings.Join(mounts, ",") != "local,S3,HDFS" {
			t.Errorf("SEMANTICS.md, %q: rows %v, want one row each for local, S3, HDFS (in that order)", title, mounts)
		}
	}
	head, _, _ := strings.Cut(doc[end+1:], "\n|---")
	if !strings.Contains(head, "| Refused | local | S3 | HDFS |") {
		t.Error(`SEMANTICS.md, "What each mount refuses by itself": want the header "| Refused | local | S3 | HDFS |"`)
	}
}
