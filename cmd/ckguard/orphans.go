package main

import (
	"context"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/refindex"
)

func orphansCommand() *cli.Command {
	return &cli.Command{
		Name:  "orphans",
		Usage: "list objects no live checkpoint needs (unreferenced, unprotected, past --grace), with bytes reclaimable",
		Flags: append(append(storeFlags(), policyFlags()...),
			durationFlag("older-than", 0, "only objects last modified longer ago than this, e.g. 7d, 2w, 36h")),
		Description: "Lists what the guard would let a cleanup delete and no checkpoint needs: unreferenced, not a live\n" +
			"_metadata, not pinned or --protect'ed, older than --grace (and --older-than). Exit status 3 when the list\n" +
			"cannot be trusted (stale index, failed sync, unparseable _metadata).\n\n" +
			"EXAMPLES:\n" +
			"   ckguard orphans --store /srv/flink/checkpoints --index /var/lib/ckguard/flink --older-than 168h\n" +
			"   ckguard orphans --store /srv/flink/checkpoints --index /var/lib/ckguard/flink --json | jq -j '.files[].path + \"\\u0000\"' | xargs -0 …   (NUL-separated: any file name)",
		Action: runOrphans,
	}
}

func runOrphans(c *cli.Context) error {
	res, err := query(c, func(ctx context.Context, q refindex.Querier) (*refindex.OrphansResult, error) {
		res, err := q.Orphans(ctx, c.Duration("older-than"))
		if err != nil || res.Blocked != "" {
			return res, err
		}
		// Objects an S3 mount has deleted (acknowledged, queued) are gone from its view: not listed.
		dir, err := indexDir(c)
		if err != nil {
			return nil, err
		}
		_, keys, err := pendingDeletes(dir)
		if err != nil {
			return nil, err
		}
		dropPending(res, keys)
		return res, nil
	}, printOrphans)
	if err != nil {
		return err
	}
	if res.Blocked != "" {
		return exitf(exitUntrusted, "no object can be called an orphan: %s", res.Blocked)
	}
	if res.Unknown != "" {
		return exitf(exitUntrusted, "the list is not complete: %s", res.Unknown)
	}
	return nil
}

func printOrphans(w io.Writer, res *refindex.OrphansResult) {
	tw := newTable(w)
	fmt.Fprintln(tw, "SIZE\tMODIFIED\tPATH")
	for _, f := range res.Files {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", humanBytes(f.Size), fmtTime(f.ModTime), shown(f.Path))
	}
	tw.Flush()
	fmt.Fprintf(w, "%s, %s reclaimable\n", plural(len(res.Files), "orphaned object"), humanBytes(res.Bytes))
	if res.PendingDeletion > 0 {
		fmt.Fprintf(w, "%d more whose deletion through the S3 mount is queued, not applied yet (see ckguard stats)\n", res.PendingDeletion)
	}
}
