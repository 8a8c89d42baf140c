package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func pinCommand() *cli.Command {
	return &cli.Command{
		Name:      "pin",
		Usage:     "protect a checkpoint or savepoint (its folder or _metadata) from retirement until unpinned",
		ArgsUsage: "PATH",
		Description: "A pinned _metadata cannot be deleted through the mount, so the checkpoint stays live and every file\n" +
			"it references stays protected, whatever its age: use it for savepoints someone may restore from.\n\n" +
			"EXAMPLES:\n" +
			"   ckguard pin --store /srv/flink/checkpoints --index /var/lib/ckguard/flink savepoints/savepoint-af8b2e-5e8c1f0a9b3d\n" +
			"   ckguard pin --store /srv/flink/checkpoints --index /var/lib/ckguard/flink af8b2e4c6d8f0a1b3c5d7e9f1a2b4c6d/chk-100274/_metadata",
		Flags:  storeFlags(),
		Action: func(c *cli.Context) error { return runPin(c, true) },
	}
}

func runPin(c *cli.Context, pin bool) error {
	if c.NArg() != 1 {
		return usageError(c, "want exactly one PATH (a checkpoint or savepoint folder, or its _metadata), got %d", c.NArg())
	}
	q, closeFn, err := openQuerier(c)
	if err != nil {
		return err
	}
	defer closeFn()
	key := storeKey(c, c.Args().First())
	var res any
	if pin {
		r, err := q.Pin(c.Context, key)
		if err != nil {
			return err
		}
		res = r
		if !c.Bool("json") {
			fmt.Fprintf(c.App.Writer, "pinned %s (since %s)\n", r.Checkpoint, fmtTime(r.Since))
		}
	} else {
		r, err := q.Unpin(c.Context, key)
		if err != nil {
			return err
		}
		res = r
		if !c.Bool("json") {
			fmt.Fprintf(c.App.Writer, "unpinned %s (not pinned now)\n", r.Checkpoint)
		}
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, res)
	}
	return nil
}
