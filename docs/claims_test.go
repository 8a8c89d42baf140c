// Package docs holds tests that keep the documentation true to the code.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// testRef is a test named in a doc: "`s3mount TestContract`" (package directory name, test function).
var testRef = regexp.MustCompile("`([a-z0-9]+) (Test[A-Za-z0-9_]+)")

// TestClaimsNameExistingTests keeps DEVELOPING.md's claim-to-test table honest: every test it names
// exists as a test function in a package directory of that name, so a renamed or removed test cannot
// leave a claim that nothing checks any more.
func TestClaimsNameExistingTests(t *testing.T) {
	doc, err := os.ReadFile("DEVELOPING.md")
	if err != nil {
		t.Fatal(err)
	}
	refs := testRef.FindAllStringSubmatch(string(doc), -1)
	if len(refs) < 30 {
		t.Fatalf("DEVELOPING.md names %d tests; the claims table lost its rows?", len(refs))
	}
	funcs := testFuncsByDir(t, "..")
	for _, r := range refs {
		pkg, name := r[1], r[2]
		if !funcs[pkg][name] {
			t.Errorf("DEVELOPING.md names `%s %s`, but no package directory %q has a func %s: update the claims table", r[1], name, pkg, name)
		}
	}
}

// testFuncsByDir maps a directory's base name to the test functions declared in its _test.go files.
func testFuncsByDir(t *testing.T, root string) map[string]map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	out := map[string]map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".tools", "testdata", "target", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		dir := filepath.Base(filepath.Dir(p))
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			if out[dir] == nil {
				out[dir] = map[string]bool{}
			}
			out[dir][m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
