package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/cmd/ckguard/demo"
)

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "reproduce the cleanup incident, then show the guard preventing it (about a minute, needs /dev/fuse)",
		Description: `Generates a small checkpoint store like the one of the incident: an old job whose folder is
about to be purged, a current job restored from it whose live checkpoints still reference the old
job's SSTs, a savepoint, and true garbage with backdated modification times.

Then it runs the classic cleanup twice with the real tools, rm -rf of the old job's folder and
find -mtime +7 -delete:
  1. on the store directly: ckguard verify turns red (the incident);
  2. through "ckguard mount": the guard deletes the garbage and refuses exactly the files live
     checkpoints reference; it shows "ckguard why" for one refused file, the audit log, and
     "ckguard verify" green, then unmounts.

Every number is checked against the generator's ground truth. Works in a temporary directory that
is removed afterwards unless --dir is given. Nothing stays mounted, also on failure or Ctrl-C.

Exit status: 0 when the guard behaved (refused set == referenced set, verify green), 1 when it did
not (the reason is printed), 2 when the demo could not run (no /dev/fuse, fuse3 missing, ...).

EXAMPLES:
   make demo                       # builds ckguard, then runs: ./bin/ckguard demo
   ckguard demo
   ckguard demo --dir /tmp/ckdemo  # keep the stores, index and audit log to look at afterwards
   ckguard demo --s3               # the same through ckguard mount --store s3://… on a local S3 server`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Usage: "work directory to keep (default: a temporary directory, removed at the end)"},
			&cli.BoolFlag{Name: "skip-control", Usage: "skip the unguarded run that reproduces the incident"},
			&cli.BoolFlag{Name: "s3", Usage: "guard an S3 bucket instead of a directory: the store is served by versitygw on 127.0.0.1 (installed by make setup)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usageError(c, "takes no arguments, got %d", c.NArg())
			}
			exe, err := os.Executable()
			if err != nil {
				return cli.Exit(fmt.Sprintf("ckguard demo: cannot find its own binary: %v", err), 2)
			}
			_, err = demo.Run(c.Context, demo.Config{Dir: c.String("dir"), Exe: exe, Out: c.App.Writer,
				Color: writerIsTerminal(c.App.Writer), SkipControl: c.Bool("skip-control"), S3: c.Bool("s3")})
			var de *demo.Error
			switch {
			case err == nil:
				return nil
			case errors.As(err, &de):
				return cli.Exit("ckguard demo: "+err.Error(), 1)
			default:
				return cli.Exit("ckguard demo could not run: "+err.Error(), 2)
			}
		},
	}
}

// writerIsTerminal: colour only when the output is a terminal.
func writerIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}
