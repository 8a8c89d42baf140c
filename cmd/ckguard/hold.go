package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/fs/hold"
)

func holdCommand() *cli.Command {
	return &cli.Command{
		Name:  "hold",
		Usage: "holds outside the mount of a mount with --hold (S3 legal holds, a local store's immutable flag)",
		Subcommands: []*cli.Command{{
			Name:  "status",
			Usage: "show the mount's legal holds: held objects and bytes, pending, failed, healed",
			Description: "Reads the status the mount with --hold writes beside the index after every reconciliation pass,\n" +
				"and the hold ledger (what the mount asked the server to hold, or flagged immutable on a local store).\n\n" +
				"EXAMPLES:\n" +
				"   ckguard hold status --store s3://bucket/flink --index /var/lib/ckguard/flink",
			Flags:  append(storeFlags(), &cli.BoolFlag{Name: "list", Usage: "list every held key with its version"}),
			Action: runHoldStatus,
		}},
	}
}

type holdStatusResult struct {
	hold.Status
	Entries []*hold.Entry `json:"entries,omitempty"`
}

func runHoldStatus(c *cli.Context) error {
	if err := requireStore(c); err != nil {
		return err
	}
	dir, err := indexDir(c)
	if err != nil {
		return err
	}
	st, err := hold.ReadStatus(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no hold status in %s: no mount of this store ran with --hold (mount with --hold best-effort or required)", dir)
	}
	if err != nil {
		return err
	}
	res := holdStatusResult{Status: st}
	if c.Bool("list") {
		l, err := hold.ReadLedger(dir)
		if err != nil {
			return err
		}
		res.Entries = l
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, res)
	}
	printHoldStatus(c.App.Writer, res)
	return nil
}

func printHoldStatus(w io.Writer, r holdStatusResult) {
	tw := newTable(w)
	row := holdRow(&r.Status)
	fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	if r.LastErr != "" {
		fmt.Fprintf(tw, "LAST PASS FAILED\t%s\n", r.LastErr)
	}
	fmt.Fprintf(tw, "last pass\t%s (took %s)\n", fmtTime(r.LastPass), r.LastTook)
	tw.Flush()
	for _, e := range r.Entries {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\n", e.State, e.Key, e.Version, e.Size)
	}
}

// holdRow is the stats line of the legal holds.
func holdRow(s *hold.Status) [2]string {
	if !s.Active {
		return [2]string{"LEGAL HOLDS OFF", fmt.Sprintf("--hold %s runs without holds: %s", s.Mode, s.Note)}
	}
	v := fmt.Sprintf("--hold %s: %d objects held (%s), %d pending, %d releasing, %d failed, %d unreferenced kept by the guard's rules, %d healed",
		s.Mode, s.Held, humanBytes(s.HeldBytes), s.Pending, s.Releasing, s.Failed, s.Kept, s.Healed)
	if s.Directories > 0 {
		v += fmt.Sprintf("; %d file-merging directory handles are not held (no hold covers a prefix)", s.Directories)
	}
	return [2]string{"legal holds", v}
}
