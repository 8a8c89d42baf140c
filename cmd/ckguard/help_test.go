package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// jsonCommands must offer --json (issue 7: consistent --json on every query).
var jsonCommands = map[string]bool{
	"inspect": true, "index rebuild": true, "index sync": true, "why": true, "checkpoints": true,
	"orphans": true, "verify": true, "stats": true, "pin": true, "unpin": true, "graph": true, "version": true,
	"latest": true,
}

// helpPending lists commands whose help text is known to lack a description or EXAMPLES (owned by
// another engineer, being fixed); the test reports them without failing. Keep it empty.
var helpPending = map[string]string{}

// TestHelpReadsLikeAManPage: every command's --help has a one-line summary, a description and an
// EXAMPLES section with runnable ckguard lines; query commands have --json.
func TestHelpReadsLikeAManPage(t *testing.T) {
	n := 0
	walkCommands(newApp().Commands, "", func(path string, c *cli.Command) {
		n++
		t.Run(strings.ReplaceAll(path, " ", "_"), func(t *testing.T) {
			var out bytes.Buffer
			app := newApp()
			app.Writer, app.ErrWriter = &out, &out
			app.ExitErrHandler = func(*cli.Context, error) {}
			if err := app.Run(append(append([]string{"ckguard"}, strings.Fields(path)...), "--help")); err != nil {
				t.Fatalf("ckguard %s --help: %v", path, err)
			}
			help := out.String()
			var problems []string
			if strings.TrimSpace(c.Usage) == "" {
				problems = append(problems, "no one-line Usage")
			}
			if len(c.Subcommands) == 0 {
				if strings.TrimSpace(c.Description) == "" {
					problems = append(problems, "no Description")
				}
				_, ex, ok := strings.Cut(help, "EXAMPLES:\n")
				if !ok {
					problems = append(problems, "no EXAMPLES: section")
				} else if !strings.Contains(firstParagraph(ex), "ckguard "+path) {
					problems = append(problems, "EXAMPLES do not show `ckguard "+path+" …`")
				}
			}
			hasJSON := false
			for _, f := range c.Flags {
				if f.Names()[0] == "json" {
					hasJSON = true
				}
			}
			if jsonCommands[path] && !hasJSON {
				problems = append(problems, "no --json flag")
			}
			if len(problems) == 0 {
				if why, ok := helpPending[path]; ok {
					t.Logf("ckguard %s now passes: remove it from helpPending (%s)", path, why)
				}
				return
			}
			if why, ok := helpPending[path]; ok {
				t.Logf("pending (%s): %s", why, strings.Join(problems, "; "))
				return
			}
			t.Errorf("ckguard %s --help: %s\n%s", path, strings.Join(problems, "; "), help)
		})
	})
	for p := range jsonCommands {
		found := false
		walkCommands(newApp().Commands, "", func(path string, _ *cli.Command) { found = found || path == p })
		if !found {
			t.Errorf("jsonCommands names %q, which is not a command", p)
		}
	}
	if n < 14 {
		t.Fatalf("only %d commands", n)
	}
}

// firstParagraph returns s up to the first blank line.
func firstParagraph(s string) string {
	if i := strings.Index(s, "\n\n"); i >= 0 {
		return s[:i]
	}
	return s
}
