package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestMountRulesTable keeps the table of the mount's own rules (fs/guard/rules.go) complete: every
// reason the guard package declares is a row of it and a row of OPERATIONS.md's "Refusal reasons", and
// every function the table says applies a rule is declared in the package. A rule added to a mount or
// to the guard without its row (as the reserved-folder rule once was) fails here.
func TestMountRulesTable(t *testing.T) {
	const dir = "../fs/guard"
	fset := token.NewFileSet()
	reasons := map[string]string{} // reason value -> constant name
	funcs := map[string]bool{}
	var table string
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		name := ent.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if name == "rules.go" {
			for _, cg := range f.Comments {
				if txt := cg.Text(); strings.Contains(txt, "where it is applied") {
					table = txt
				}
			}
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				funcs[d.Name.Name] = true
			case *ast.GenDecl:
				if d.Tok != token.CONST {
					continue
				}
				for _, sp := range d.Specs {
					vs := sp.(*ast.ValueSpec)
					sel, ok := vs.Type.(*ast.SelectorExpr)
					if !ok || sel.Sel.Name != "Reason" || len(vs.Values) != 1 {
						continue
					}
					lit, ok := vs.Values[0].(*ast.BasicLit)
					if !ok {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					reasons[v] = vs.Names[0].Name
				}
			}
		}
	}
	if table == "" {
		t.Fatal(`fs/guard/rules.go has no rules table (a comment with the header "rule  reason  where it is applied")`)
	}
	if len(reasons) < 4 {
		t.Fatalf("fs/guard declares %d reasons; the parse lost them?", len(reasons))
	}
	ops, err := os.ReadFile("OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, refusals, ok := strings.Cut(string(ops), "\n## Refusal reasons\n")
	if !ok {
		t.Fatal(`OPERATIONS.md lacks "## Refusal reasons"`)
	}
	refusals, _, _ = strings.Cut(refusals, "\n## ")
	for v, name := range reasons {
		if !regexp.MustCompile(`(?m)^\t\S.*\s` + regexp.QuoteMeta(v) + `(\s|/)`).MatchString(table) {
			t.Errorf("reason %s (%s) is not in the rules table of fs/guard/rules.go", v, name)
		}
		if !strings.Contains(refusals, "\n| `"+v+"` |") {
			t.Errorf("reason %s (%s) has no row in OPERATIONS.md, \"Refusal reasons\"", v, name)
		}
	}
	rows := 0
	cols := regexp.MustCompile(`\s{2,}`)
	for _, l := range strings.Split(table, "\n") {
		if !strings.HasPrefix(l, "\t") {
			continue // the prose around the table
		}
		c := cols.Split(strings.TrimSpace(l), 3)
		if len(c) != 3 || c[0] == "rule" {
			continue
		}
		rows++
		// The column "where it is applied" starts with the function applying the rule.
		fn := strings.TrimRight(strings.Fields(c[2])[0], ",:")
		if _, m, ok := strings.Cut(fn, "."); ok {
			fn = m // Enforcer.record1
		}
		if !funcs[fn] {
			t.Errorf("rules table row %q names %s, which fs/guard does not declare", strings.TrimSpace(l), fn)
		}
	}
	if rows < 8 {
		t.Errorf("the rules table has %d rows; lost some?", rows)
	}
}
