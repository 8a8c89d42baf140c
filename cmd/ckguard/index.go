package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/refindex"
)

func indexCommand() *cli.Command {
	return &cli.Command{
		Name:  "index",
		Usage: "build or update the reference index of a store",
		Subcommands: []*cli.Command{
			{
				Name:  "rebuild",
				Usage: "recreate the index from the store alone (a new generation, switched atomically)",
				Description: "Lists every _metadata in --store, parses it and writes a fresh index. The previous index stays\n" +
					"in use until the new one is complete; an index of another schema version is replaced. Needed only\n" +
					"when the index was lost or its --map/--entropy-key changed: the index is derived data.\n\n" +
					"EXAMPLES:\n" +
					"   ckguard index rebuild --store /srv/flink/checkpoints --index /var/lib/ckguard/flink\n" +
					"   ckguard index rebuild --store s3://bucket/flink --index /var/lib/ckguard/s3 --s3-region eu-west-1",
				Flags:  storeFlags(),
				Action: func(c *cli.Context) error { return runIndex(c, true) },
			},
			{
				Name:  "sync",
				Usage: "bring the index up to date with the store (new, changed and removed _metadata)",
				Description: "Applies new, changed and removed _metadata in one step, additions before removals, so nothing\n" +
					"referenced ever looks unreferenced in between. A running mount does this every --sync-interval;\n" +
					"the query commands do it before answering unless --no-sync.\n\n" +
					"EXAMPLES:\n" +
					"   ckguard index sync --store /srv/flink/checkpoints --index /var/lib/ckguard/flink",
				Flags:  storeFlags(),
				Action: func(c *cli.Context) error { return runIndex(c, false) },
			},
		},
	}
}

func runIndex(c *cli.Context, rebuild bool) error {
	var extra []refindex.Option
	if rebuild {
		extra = append(extra, refindex.WithFreshIndex())
	}
	ix, err := openIndex(c, extra...)
	if err != nil {
		return err
	}
	defer ix.Close()
	t0 := time.Now()
	if rebuild {
		err = ix.Rebuild(c.Context)
	} else {
		err = ix.Sync(c.Context)
	}
	if err != nil {
		return err
	}
	s, err := ix.Stats(c.Context)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, s)
	}
	what := "synced"
	if rebuild {
		what = "rebuilt"
	}
	fmt.Fprintf(c.App.Writer, "index %s in %s: %s, %s, %s, %s, %s (%d outside the guarded store), %d unparseable _metadata\nindex: %s (generation %d, %s on disk)\n",
		what, time.Since(t0).Round(time.Millisecond), plural(s.Jobs, "job folder"), plural(s.SavepointFolders, "savepoint folder"), plural(s.Checkpoints, "checkpoint"),
		plural(s.Savepoints, "savepoint"), plural(s.References, "reference"), s.OutsideReferences, s.Unparseable, s.IndexDir, s.Generation, humanBytes(s.IndexBytes))
	if s.Unparseable > 0 {
		fmt.Fprintln(c.App.ErrWriter, "warning: unparseable _metadata block every deletion; see `ckguard checkpoints`")
	}
	return nil
}
