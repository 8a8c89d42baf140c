package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
)

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "decode one Flink _metadata file: version, kind, operators, handles, referenced files",
		ArgsUsage: "PATH|-",
		Description: `Reads a checkpoint or savepoint _metadata file (format versions 2–6, Flink 1.3 – 2.x)
and prints what it contains and which storage objects restoring it needs. Nothing is
written and no referenced file is opened.

Relative state handles (files Flink wrote next to _metadata) are resolved against the
directory of PATH. When reading stdin ("-") that directory is unknown, so they are
resolved against the current directory unless --location names where the file lives.
Inline (ByteStream) handles are never listed as references: their bytes are inside
_metadata and are counted as inline_bytes.

A file that cannot be parsed (truncated, corrupt, unknown or unsupported version) is
reported on one line with the byte offset and what was expected; the exit code is 1.

EXAMPLES:
   ckguard inspect /ckpt/7f3c.../chk-42/_metadata
   ckguard inspect --json savepoint-1a2b3c-0123456789ab/_metadata | jq '.references[].resolved'
   aws s3 cp s3://bucket/ckpt/job/chk-42/_metadata - | ckguard inspect --location s3://bucket/ckpt/job/chk-42/_metadata -`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object (format_version, checkpoint_id, kind, savepoint_format, operators, handle_counts, references, inline_bytes; the camelCase keys of earlier releases are kept for one release)"},
			&cli.StringFlag{Name: "location", Usage: "path or URI the _metadata was read from, for resolving relative references (default: PATH, or ./_metadata for stdin)"},
		},
		Action: runInspect,
	}
}

func runInspect(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("ckguard inspect: expected exactly one argument, a _metadata file or - for stdin (see --help)", 2)
	}
	arg := c.Args().First()
	// The name given to the parser appears in errors and, for format versions 2/3 (no
	// properties trailer), decides checkpoint vs savepoint from the directory name.
	m, name, err := readMetadata(arg, c.String("location"), c.App.Reader)
	if err != nil {
		// One line: the parser's errors already name the file, byte offset and expectation.
		return cli.Exit(strings.ReplaceAll(err.Error(), "\n", " "), 1)
	}
	location := c.String("location")
	if location == "" {
		location = name
		if arg == "-" {
			wd, err := os.Getwd()
			if err != nil {
				return cli.Exit(fmt.Sprintf("ckguard inspect: current directory for resolving relative references: %v (use --location)", err), 1)
			}
			location = filepath.Join(wd, "_metadata")
		}
	}
	out := c.App.Writer
	if c.Bool("json") {
		return printJSON(out, newInspectJSON(m.Summarize(location)))
	}
	return printInspect(out, m, location)
}

// inspectJSON is `inspect --json`: flinkmeta's Summary with the snake_case keys of every other
// command. The camelCase keys it had before (formatVersion, checkpointId, savepointFormat,
// handleCounts, inlineBytes) are written too, for one release, so scripts reading them keep working.
type inspectJSON struct {
	FormatVersion   int                    `json:"format_version"`
	CheckpointID    int64                  `json:"checkpoint_id"`
	Kind            string                 `json:"kind"`
	SavepointFormat string                 `json:"savepoint_format"`
	Operators       []inspectOperator      `json:"operators"`
	HandleCounts    map[string]int         `json:"handle_counts"`
	References      []flinkmeta.RefSummary `json:"references"`
	InlineBytes     int64                  `json:"inline_bytes"`

	// Deprecated: the same values under the keys of earlier releases; removed in the next one.
	OldFormatVersion   int            `json:"formatVersion"`
	OldCheckpointID    int64          `json:"checkpointId"`
	OldSavepointFormat string         `json:"savepointFormat"`
	OldHandleCounts    map[string]int `json:"handleCounts"`
	OldInlineBytes     int64          `json:"inlineBytes"`
}

type inspectOperator struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	UID            string `json:"uid"`
	Parallelism    int32  `json:"parallelism"`
	MaxParallelism int32  `json:"max_parallelism"`
	SubtaskStates  int    `json:"subtask_states"`
}

func newInspectJSON(s flinkmeta.Summary) inspectJSON {
	j := inspectJSON{FormatVersion: s.FormatVersion, CheckpointID: s.CheckpointID, Kind: s.Kind, SavepointFormat: s.SavepointFormat,
		Operators: []inspectOperator{}, HandleCounts: s.HandleCounts, References: s.References, InlineBytes: s.InlineBytes,
		OldFormatVersion: s.FormatVersion, OldCheckpointID: s.CheckpointID, OldSavepointFormat: s.SavepointFormat,
		OldHandleCounts: s.HandleCounts, OldInlineBytes: s.InlineBytes}
	for _, op := range s.Operators {
		j.Operators = append(j.Operators, inspectOperator(op))
	}
	return j
}

// readMetadata parses a file (through a ReaderAt, so large files are not loaded whole) or stdin.
func readMetadata(arg, location string, stdin io.Reader) (*flinkmeta.Metadata, string, error) {
	if arg == "-" {
		if stdin == nil {
			stdin = os.Stdin
		}
		name := "<stdin>"
		if location != "" {
			name = location + " (stdin)"
		}
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, name, fmt.Errorf("%s: read: %w", name, err)
		}
		m, err := flinkmeta.ParseBytes(b, name, flinkmeta.Options{})
		return m, name, err
	}
	abs, err := filepath.Abs(arg)
	if err != nil {
		return nil, arg, err
	}
	f, err := os.Open(arg)
	if err != nil {
		return nil, abs, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, abs, err
	}
	if st.IsDir() {
		return nil, abs, fmt.Errorf("%s is a directory; pass its _metadata file", arg)
	}
	m, err := flinkmeta.Parse(f, st.Size(), arg, flinkmeta.Options{})
	return m, abs, err
}

func printInspect(w io.Writer, m *flinkmeta.Metadata, location string) error {
	var b bytes.Buffer
	kind := m.Kind
	if m.SavepointFormat != "" {
		kind += " (" + m.SavepointFormat + ")"
	}
	fmt.Fprintf(&b, "file:            %s\n", location)
	fmt.Fprintf(&b, "format version:  %d%s\n", m.FormatVersion, layoutNote(m))
	fmt.Fprintf(&b, "checkpoint id:   %d\n", m.CheckpointID)
	fmt.Fprintf(&b, "kind:            %s\n", kind)
	fmt.Fprintf(&b, "master states:   %d\n", len(m.MasterStates))
	fmt.Fprintf(&b, "inline bytes:    %d\n", m.InlineBytes())
	fmt.Fprintf(&b, "\noperators (%d):\n", len(m.Operators))
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tNAME\tUID\tPAR/MAX\tSUBTASKS\tFILE BYTES\tINLINE BYTES\tHANDLES")
	for i := range m.Operators {
		op := &m.Operators[i]
		st := m.Stats(i)
		subtasks := fmt.Sprint(len(op.Subtasks) - st.FinishedSubtasks)
		if op.FullyFinished {
			subtasks = "finished"
		} else if st.FinishedSubtasks > 0 {
			subtasks += fmt.Sprintf(" (+%d finished)", st.FinishedSubtasks)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d/%d\t%s\t%d\t%d\t%s\n", op.ID, dash(op.Name), dash(op.UID), op.Parallelism, op.MaxParallelism,
			subtasks, st.FileBytes, st.InlineBytes, countsString(st.HandleCounts))
	}
	tw.Flush()
	refs := m.References(location)
	fmt.Fprintf(&b, "\nhandles: %s\n", countsString(m.HandleCounts()))
	fmt.Fprintf(&b, "\nreferenced storage objects (%d):\n", len(refs))
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  KIND\tSTATE\tOPERATOR/SUBTASK\tRESOLVED\tRANGE")
	for _, r := range refs {
		rng := ""
		if r.Kind == flinkmeta.RefSegment {
			rng = fmt.Sprintf("[%d, +%d)", r.Offset, r.Length)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s/%d\t%s\t%s\n", r.Kind, r.StateKind, r.OperatorID[:8], r.Subtask, r.Resolved, rng)
	}
	tw.Flush()
	_, err := w.Write(b.Bytes())
	return err
}

func layoutNote(m *flinkmeta.Metadata) string {
	if m.Layout == (flinkmeta.Layout{}) {
		return ""
	}
	return " (" + m.Layout.String() + " layout)"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func countsString(c map[string]int) string {
	if len(c) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s×%d", k, c[k])
	}
	return strings.Join(parts, " ")
}
