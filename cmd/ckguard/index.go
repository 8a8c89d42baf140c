package main

import (
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/internal/duration"
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
				Flags:  append(locationFlags(), jsonFlag()),
				Action: func(c *cli.Context) error { return runIndex(c, true) },
			},
			{
				Name:  "sync",
				Usage: "bring the index up to date with the store (new, changed and removed _metadata)",
				Description: "Applies new, changed and removed _metadata in one step, additions before removals, so nothing\n" +
					"referenced ever looks unreferenced in between. A running mount does this every --sync-interval;\n" +
					"the query commands do it before answering unless --no-sync. While a mount holds the index, this\n" +
					"reports the mount's last sync instead (exit 2 when it failed or the index is stale).\n\n" +
					"EXAMPLES:\n" +
					"   ckguard index sync --store /srv/flink/checkpoints --index /var/lib/ckguard/flink",
				Flags:  append(locationFlags(), jsonFlag()),
				Action: func(c *cli.Context) error { return runIndex(c, false) },
			},
		},
	}
}

func runIndex(c *cli.Context, rebuild bool) error {
	if q, closeFn, ok := mountQuerier(c); ok {
		defer closeFn()
		return indexHeldByMount(c, q, rebuild)
	}
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
	stop := progressFor(c, ix)
	if rebuild {
		err = ix.Rebuild(c.Context)
	} else {
		err = ix.Sync(c.Context)
	}
	stop()
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
		fmt.Fprintf(c.App.ErrWriter, "warning: %d unparseable _metadata (%d damaged, protecting nothing but themselves; %d refusing deletions in their folder; %d refusing every deletion); see `ckguard stats`\n", s.Unparseable, s.DamagedMetadata, s.ConfinedMetadata, s.BlockingMetadata)
	}
	return nil
}

// mountQuerier dials the control socket of a mount running on this index, if one answers.
func mountQuerier(c *cli.Context) (refindex.Querier, func() error, bool) {
	dir, err := indexDir(c)
	if err != nil {
		return nil, nil, false
	}
	sock := control.DefaultSocket(dir)
	if _, err := os.Stat(sock); err != nil {
		return nil, nil, false
	}
	q, err := control.DialQuerier(sock)
	if err != nil {
		return nil, nil, false
	}
	return q, q.Close, true
}

// indexHeldByMount answers `index sync|rebuild` while a mount holds the index (its lock keeps anyone
// else from opening it): the mount syncs by itself every --sync-interval, so sync reports how that is
// going and exits 0 only when the index is in sync; a rebuild needs the mount stopped.
func indexHeldByMount(c *cli.Context, q refindex.Querier, rebuild bool) error {
	s, err := q.Stats(c.Context)
	if err != nil {
		return err
	}
	if rebuild {
		return exitf(exitUsage, "ckguard index rebuild: a running mount holds the index %s; unmount it first (`ckguard umount MOUNTPOINT`; a mount rebuilds an index it cannot open by itself when it starts)", s.IndexDir)
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, s); err != nil {
			return err
		}
	} else {
		last := "never"
		if !s.LastSync.IsZero() {
			last = fmtTime(s.LastSync) + " (" + duration.Format(time.Since(s.LastSync).Round(time.Second)) + " ago)"
		}
		fmt.Fprintf(c.App.Writer, "index %s is held by a running mount, which syncs it every --sync-interval; last complete sync: %s\n", s.IndexDir, last)
	}
	switch {
	case s.SyncError != "":
		return exitf(exitUsage, "ckguard index sync: the mount's last sync failed: %s; fix that (the mount retries every --sync-interval and logs each failure), then check with `ckguard stats`", s.SyncError)
	case s.Stale:
		return exitf(exitUsage, "ckguard index sync: the mount's index is stale (last complete sync longer ago than --max-staleness %s); see the mount's log for why its syncs do not complete", s.Policy.MaxStaleness)
	}
	return nil
}
