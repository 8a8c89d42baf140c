package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// updateConfigRef rewrites docs/CONFIG.md from the flags instead of comparing (`make docs`).
var updateConfigRef = flag.Bool("update", false, "rewrite docs/CONFIG.md from the CLI's flags")

// configRefPath is the generated configuration reference, relative to this package.
var configRefPath = filepath.Join("..", "..", "docs", "CONFIG.md")

// TestConfigReference keeps docs/CONFIG.md exactly what the CLI's commands and flags generate, so the
// reference cannot drift from the code: a flag added, renamed, re-defaulted or re-worded anywhere fails
// this test until the file is regenerated.
func TestConfigReference(t *testing.T) {
	want := configReference(newApp())
	if *updateConfigRef {
		if err := os.WriteFile(configRefPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(configRefPath)
	if err != nil {
		t.Fatalf("%v: generate it with `make docs` (go test ./cmd/ckguard -run TestConfigReference -update)", err)
	}
	if string(got) != want {
		t.Fatalf("docs/CONFIG.md differs from what the flags generate (first difference at line %d): "+
			"regenerate it with `make docs` (go test ./cmd/ckguard -run TestConfigReference -update) and commit it",
			firstDiffLine(string(got), want))
	}
}

// TestConfigReferenceShape: the generator sees every command and flag (a walk that lost the
// subcommands or the shared groups would still match its own output).
func TestConfigReferenceShape(t *testing.T) {
	ref := configReference(newApp())
	for _, want := range []string{"## `ckguard mount`", "## `ckguard index rebuild`", "## `ckguard quarantine restore`",
		"`--store`", "`CKGUARD_STORE`", "`--grace`", "`--sync-interval`", "`--quarantine`", "`--s3-endpoint`", "`--hdfs-keytab`"} {
		if !strings.Contains(ref, want) {
			t.Errorf("the generated reference lacks %s", want)
		}
	}
}

func firstDiffLine(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) && i < len(bl); i++ {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

// refCommand is one command of the reference: its path ("index rebuild") and visible flags.
type refCommand struct {
	path  string
	usage string
	flags []cli.DocGenerationFlag
}

func refCommands(cmds []*cli.Command, prefix string) []refCommand {
	var out []refCommand
	for _, c := range cmds {
		if c.Hidden || c.Name == "help" {
			continue
		}
		path := strings.TrimSpace(prefix + " " + c.Name)
		rc := refCommand{path: path, usage: c.Usage}
		for _, f := range c.Flags {
			if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
				continue
			}
			if d, ok := f.(cli.DocGenerationFlag); ok {
				rc.flags = append(rc.flags, d)
			}
		}
		if len(rc.flags) > 0 || c.Action != nil || len(c.Subcommands) == 0 {
			out = append(out, rc)
		}
		out = append(out, refCommands(c.Subcommands, path)...)
	}
	return out
}

// refGroup is the flags taken by exactly the same three or more commands, listed once.
type refGroup struct {
	id    string
	cmds  []string
	flags []cli.DocGenerationFlag
}

// flagKey identifies a flag definition: the same name with the same usage and default on several
// commands is one shared flag.
func flagKey(f cli.DocGenerationFlag) string {
	return strings.Join(append(f.Names(), f.GetUsage(), defaultText(f), strings.Join(f.GetEnvVars(), ",")), "\x00")
}

func defaultText(f cli.DocGenerationFlag) string {
	d := strings.Trim(f.GetDefaultText(), `"`)
	if !f.TakesValue() && d == "false" {
		return ""
	}
	return d
}

// configReference renders the reference: flags that several commands share with one definition are
// grouped once (by the set of commands that take them), the rest listed per command.
func configReference(app *cli.App) string {
	cmds := refCommands(app.Commands, "")
	takers := map[string][]string{}
	for _, c := range cmds {
		for _, f := range c.flags {
			takers[flagKey(f)] = append(takers[flagKey(f)], c.path)
		}
	}
	groups := map[string]*refGroup{} // by the set of commands, joined
	var order []*refGroup
	for _, c := range cmds {
		for _, f := range c.flags {
			ts := takers[flagKey(f)]
			if len(ts) < 3 {
				continue
			}
			set := strings.Join(ts, ",")
			g := groups[set]
			if g == nil {
				g = &refGroup{cmds: ts}
				groups[set] = g
				order = append(order, g)
			}
			if !containsFlag(g.flags, f) {
				g.flags = append(g.flags, f)
			}
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return len(order[i].cmds) > len(order[j].cmds) })
	for i, g := range order {
		g.id = fmt.Sprintf("shared-%c", 'a'+i)
	}

	var b strings.Builder
	b.WriteString("<!-- Generated from the CLI's flags by `make docs` (go test ./cmd/ckguard -run TestConfigReference -update).\n" +
		"     Do not edit: cmd/ckguard TestConfigReference fails when this file differs from the flags. -->\n")
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("Every command of `ckguard` and every flag it takes, generated from the code. Durations take Go's\n" +
		"syntax plus days and weeks (`90s`, `1h30m`, `7d`, `2w`, `0s`). A flag with an environment variable reads\n" +
		"its default from it. In `/etc/fstab` (`mount.ckguard`) the options are `ckguard mount`'s flags without\n" +
		"the dashes. What the flags mean for an operator is in [OPERATIONS.md](OPERATIONS.md); what each mount\n" +
		"does per operation in [SEMANTICS.md](SEMANTICS.md).\n\n")
	b.WriteString("Commands:")
	for _, c := range cmds {
		fmt.Fprintf(&b, " [`%s`](#%s)", c.path, anchor("ckguard "+c.path))
	}
	b.WriteString(".\n\n")
	for _, g := range order {
		fmt.Fprintf(&b, "<a id=\"%s\"></a>\n## Flags shared by %d commands\n\n", g.id, len(g.cmds))
		fmt.Fprintf(&b, "Taken by `%s`.\n\n", strings.Join(g.cmds, "`, `"))
		writeFlagTable(&b, g.flags)
	}
	for _, c := range cmds {
		fmt.Fprintf(&b, "## `ckguard %s`\n\n", c.path)
		if c.usage != "" {
			b.WriteString(strings.TrimSpace(c.usage) + ".\n\n")
		}
		var own []cli.DocGenerationFlag
		var shared []*refGroup
		for _, f := range c.flags {
			ts := takers[flagKey(f)]
			if len(ts) < 3 {
				own = append(own, f)
				continue
			}
			if g := groups[strings.Join(ts, ",")]; !containsGroup(shared, g) {
				shared = append(shared, g)
			}
		}
		if len(shared) > 0 {
			b.WriteString("Also takes")
			for i, g := range shared {
				sep := ","
				if i == 0 {
					sep = ""
				}
				fmt.Fprintf(&b, "%s [the flags shared by %d commands](#%s)", sep, len(g.cmds), g.id)
			}
			b.WriteString(".\n\n")
		}
		if len(own) > 0 {
			writeFlagTable(&b, own)
		} else if len(shared) == 0 {
			b.WriteString("No flags.\n\n")
		}
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

func writeFlagTable(b *strings.Builder, flags []cli.DocGenerationFlag) {
	b.WriteString("| Flag | Default | Environment | Meaning |\n|---|---|---|---|\n")
	for _, f := range flags {
		names := f.Names()
		flagCell := "`--" + names[0] + "`"
		for _, a := range names[1:] {
			if len(a) == 1 {
				flagCell += ", `-" + a + "`"
			} else {
				flagCell += ", `--" + a + "`"
			}
		}
		if s, ok := f.(cli.DocGenerationSliceFlag); ok && s.IsSliceFlag() {
			flagCell += " (repeatable)"
		}
		def := defaultText(f)
		if def != "" {
			def = "`" + def + "`"
		}
		env := ""
		if ev := f.GetEnvVars(); len(ev) > 0 {
			env = "`" + strings.Join(ev, "`, `") + "`"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", flagCell, cell(def), env, cell(f.GetUsage()))
	}
	b.WriteString("\n")
}

// cell makes text safe inside a markdown table cell: outside code spans, `<job id>` must not read as
// HTML nor `_metadata … _entropy_` as emphasis; everywhere a | would end the cell.
func cell(s string) string {
	var b strings.Builder
	code := false
	for _, r := range strings.ReplaceAll(s, "\n", " ") {
		switch {
		case r == '`':
			code = !code
		case r == '|':
			b.WriteString(`\`)
		case !code && (r == '_' || r == '*' || r == '<' || r == '>'):
			b.WriteString(`\`)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// anchor is GitHub's heading anchor for a heading text.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func containsFlag(fs []cli.DocGenerationFlag, f cli.DocGenerationFlag) bool {
	for _, g := range fs {
		if flagKey(g) == flagKey(f) {
			return true
		}
	}
	return false
}

func containsGroup(gs []*refGroup, g *refGroup) bool {
	for _, x := range gs {
		if x == g {
			return true
		}
	}
	return false
}
