package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// The README's fenced blocks are commands an on-call engineer will paste, so every one is checked:
//
//   - ```sh blocks: each line is a command. `ckguard …` lines must name an existing (sub)command and
//     only flags that command defines (and its --help must work); `make X` lines an existing Makefile
//     target; any other program must be in knownTools (so a new tool in the README is a deliberate
//     decision, installed by make setup).
//   - ```sh readme-run blocks are checked the same way and then RUN, line by line, in a temporary
//     directory standing in for /tmp/ckdemo; a line ending in "# exit N" must exit N, others 0.
//   - ```ini blocks (systemd units) are excerpts of docs/ckguard@.service, which the mount's integration
//     tests run as written: every line must appear there, in order; ckguard command lines are checked
//     as above. ```fstab lines must appear verbatim in docs/fstab.example (also tested as written).

// readmeBlock is one fenced block.
type readmeBlock struct {
	info  string
	line  int // line number of the opening fence
	lines []string
}

func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []readmeBlock
	var cur *readmeBlock
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if strings.HasPrefix(l, "```") {
			if cur == nil {
				cur = &readmeBlock{info: strings.TrimSpace(strings.TrimPrefix(l, "```")), line: n}
			} else {
				out = append(out, *cur)
				cur = nil
			}
			continue
		}
		if cur != nil {
			cur.lines = append(cur.lines, l)
		}
	}
	if cur != nil {
		t.Fatalf("README.md: fence opened at line %d is never closed", cur.line)
	}
	return out
}

// knownTools are the non-ckguard programs the README may tell people to run.
var knownTools = map[string]bool{"make": true, "rm": true, "find": true, "mkdir": true, "install": true,
	"getfattr": true, "cd": true, "systemctl": true, "curl": true, "mount": true}

var exitComment = regexp.MustCompile(`#\s*exit (\d+)\s*$`)

// command is one README command line: its words (comments and sudo stripped) and the exit status
// it is documented to have.
type command struct {
	raw   string
	words []string
	exit  int
}

func parseCommand(l string) (command, bool) {
	c := command{raw: strings.TrimSpace(l)}
	if m := exitComment.FindStringSubmatch(l); m != nil {
		c.exit, _ = strconv.Atoi(m[1])
	}
	if i := strings.Index(l, " #"); i >= 0 {
		l = l[:i]
	}
	l = strings.TrimSpace(l)
	if l == "" || strings.HasPrefix(l, "#") {
		return c, false
	}
	c.raw = l
	c.words = strings.Fields(l)
	if c.words[0] == "sudo" {
		c.words = c.words[1:]
	}
	return c, true
}

// findCommand resolves "ckguard index rebuild …" to its *cli.Command and the flags used.
func findCommand(app *cli.App, words []string) (*cli.Command, []string, []string) {
	cmds := app.Commands
	var cmd *cli.Command
	path := []string{}
	i := 1
	for ; i < len(words); i++ {
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(words[i]) {
				next = c
			}
		}
		if next == nil {
			break
		}
		cmd, cmds = next, next.Subcommands
		path = append(path, words[i])
	}
	var flags []string
	for _, w := range words[i:] {
		if strings.HasPrefix(w, "-") && w != "-" {
			name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
			flags = append(flags, name)
		}
	}
	return cmd, path, flags
}

func checkCkguardLine(t *testing.T, where string, words []string) {
	t.Helper()
	app := newApp()
	cmd, path, flags := findCommand(app, words)
	if cmd == nil {
		t.Errorf("%s: %q is not a ckguard command", where, strings.Join(words, " "))
		return
	}
	if len(cmd.Subcommands) > 0 {
		t.Errorf("%s: ckguard %s needs a subcommand", where, strings.Join(path, " "))
	}
	defined := map[string]bool{"help": true, "h": true}
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			defined[n] = true
		}
	}
	for _, f := range flags {
		if !defined[f] {
			t.Errorf("%s: ckguard %s has no flag --%s", where, strings.Join(path, " "), f)
		}
	}
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	app.ExitErrHandler = func(*cli.Context, error) {}
	if err := app.Run(append(append([]string{"ckguard"}, path...), "--help")); err != nil {
		t.Errorf("%s: ckguard %s --help: %v", where, strings.Join(path, " "), err)
	}
}

func checkLine(t *testing.T, where string, c command) {
	t.Helper()
	switch prog := filepath.Base(c.words[0]); {
	case prog == "ckguard":
		checkCkguardLine(t, where, c.words)
	case prog == "make":
		mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range c.words[1:] {
			if strings.Contains(target, "=") {
				continue
			}
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).Match(mk) {
				t.Errorf("%s: the Makefile has no target %q", where, target)
			}
		}
	case !knownTools[prog]:
		t.Errorf("%s: %q is not a tool the README may use (add it to knownTools if make setup installs it)", where, prog)
	}
}

// TestReadmeLinks: every relative link in the README names a file in the repository.
func TestReadmeLinks(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	links := regexp.MustCompile(`\]\(([^)#]+)(#[^)]*)?\)`).FindAllStringSubmatch(string(b), -1)
	for _, m := range links {
		if strings.Contains(m[1], "://") {
			continue
		}
		if _, err := os.Stat(filepath.Join("..", "..", m[1])); err != nil {
			t.Errorf("README links to %s: %v", m[1], err)
		}
	}
	if len(links) == 0 {
		t.Fatal("no links found: did the regexp break?")
	}
}

func docFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadmeCommands checks every command line of the README against the CLI and the Makefile.
func TestReadmeCommands(t *testing.T) {
	blocks := readmeBlocks(t)
	checked := 0
	unitPos := map[int]int{} // per ini block: how far into the unit file its lines matched
	for _, b := range blocks {
		lang := strings.Fields(b.info + " x")[0]
		for i, l := range b.lines {
			where := "README.md:" + strconv.Itoa(b.line+1+i)
			switch lang {
			case "sh":
				if c, ok := parseCommand(l); ok {
					checkLine(t, where, c)
					checked++
				}
			case "fstab":
				if strings.TrimSpace(l) != "" && !strings.Contains(docFile(t, "fstab.example"), l+"\n") {
					t.Errorf("%s: fstab line is not the tested one in docs/fstab.example: %q", where, l)
				}
			case "ini":
				if l = strings.TrimSpace(l); l == "" {
					continue
				}
				unit := docFile(t, "ckguard@.service")
				if i := strings.Index(unit[unitPos[b.line]:], l+"\n"); i < 0 {
					t.Errorf("%s: %q is not in docs/ckguard@.service (after the previous README line)", where, l)
				} else {
					unitPos[b.line] += i + len(l)
				}
				if k, v, ok := strings.Cut(l, "="); ok && (k == "ExecStart" || k == "ExecStop") {
					if c, ok := parseCommand(v); ok && filepath.Base(c.words[0]) == "ckguard" {
						checkLine(t, where, c)
						checked++
					}
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d README command lines found: did the fence convention change?", checked)
	}
}

// TestReadmeRun runs the README's `sh readme-run` blocks for real: the demo, the queries against the
// store it leaves behind, and a mount with getfattr/rm/verify/umount.
func TestReadmeRun(t *testing.T) {
	requireFUSEForDemo(t)
	exe := builtBinary(t)
	binDir := filepath.Dir(exe)
	demoDir := filepath.Join(t.TempDir(), "ckdemo")
	t.Cleanup(func() {
		for _, m := range mountsUnder(t, demoDir) {
			_ = exec.Command("fusermount3", "-u", "-z", m).Run()
			t.Errorf("README commands left %s mounted", m)
		}
	})
	cwd := t.TempDir()
	ran := 0
	for _, b := range readmeBlocks(t) {
		if b.info != "sh readme-run" {
			continue
		}
		for i, l := range b.lines {
			c, ok := parseCommand(l)
			if !ok {
				continue
			}
			where := "README.md:" + strconv.Itoa(b.line+1+i)
			line := strings.ReplaceAll(c.raw, "/tmp/ckdemo", demoDir)
			if c.words[0] == "cd" {
				cwd = strings.ReplaceAll(c.words[1], "/tmp/ckdemo", demoDir)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			cmd := exec.CommandContext(ctx, "bash", "-c", line)
			cmd.Dir = cwd
			cmd.Env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			cancel()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatalf("%s: %s: %v", where, c.raw, err)
			}
			if code != c.exit {
				t.Errorf("%s: %s: exit %d, the README says %d\n%s", where, c.raw, code, c.exit, out)
			}
			ran++
		}
	}
	t.Logf("%d README commands ran", ran)
	if ran < 10 {
		t.Fatalf("only %d README commands ran", ran)
	}
}

// TestReadmeFitsAFirstRead keeps the README a newcomer's first read: what ckguard is, the incident, the
// two commands, one mount per store, the first three questions, links. Reference material belongs in
// docs/OPERATIONS.md, docs/SEMANTICS.md, docs/CONFIG.md and docs/monitoring/ (DEVELOPING.md, "Docs: who
// reads what"); a section that grows the README past the bound goes there.
func TestReadmeFitsAFirstRead(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const maxLines = 200
	if n := strings.Count(string(b), "\n"); n > maxLines {
		t.Errorf("README.md has %d lines, more than %d: move reference text to docs/OPERATIONS.md or docs/SEMANTICS.md and link it", n, maxLines)
	}
	for _, want := range []string{"## The incident, in five lines", "make demo", "make test", "--store s3://", "--store hdfs://",
		"ckguard why", "ckguard orphans", "ckguard verify", "docs/ckguard@.service",
		"docs/OPERATIONS.md", "docs/SEMANTICS.md", "docs/CONFIG.md", "docs/DEVELOPING.md"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("README.md lost %q, which a newcomer's first read needs", want)
		}
	}
}
