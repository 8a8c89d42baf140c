package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/refindex"
)

func checkpointsCommand() *cli.Command {
	return &cli.Command{
		Name:  "checkpoints",
		Usage: "list live checkpoints and savepoints per job folder, with sizes and the other jobs they reference",
		Description: "Per job folder: every live checkpoint and savepoint (a _metadata that exists) with its id, completion\n" +
			"time, _metadata size, reference count, flags (pinned; newest checkpoint of an active job) and the other\n" +
			"job folders whose files it references: a restore lineage. Those folders must not be purged by name or age.\n\n" +
			"EXAMPLES:\n" +
			"   ckguard checkpoints --store /srv/flink/checkpoints --index /var/lib/ckguard/flink\n" +
			"   ckguard checkpoints --store /srv/flink/checkpoints --index /var/lib/ckguard/flink --job af8b2e4c6d8f0a1b3c5d7e9f1a2b4c6d --json",
		Flags: append(append(storeFlags(), policyFlags()...),
			&cli.StringFlag{Name: "job", Usage: "only this job folder (or its last path segments, e.g. the job id)"}),
		Action: runCheckpoints,
	}
}

func runCheckpoints(c *cli.Context) error {
	_, err := query(c, func(ctx context.Context, q refindex.Querier) (*refindex.CheckpointsResult, error) {
		return q.Checkpoints(ctx, c.String("job"))
	}, printCheckpoints)
	return err
}

func printCheckpoints(w io.Writer, res *refindex.CheckpointsResult) {
	for _, j := range res.Jobs {
		fmt.Fprintf(w, "job %s: %d checkpoints, %d savepoints, %s of _metadata, %d references", displayKey(j.Job), j.Count, j.Savepoints, humanBytes(j.MetadataBytes), j.References)
		if len(j.ReferencesJobs) > 0 {
			fmt.Fprintf(w, "; references files of: %s", strings.Join(j.ReferencesJobs, ", "))
		}
		fmt.Fprintln(w)
		tw := newTable(w)
		fmt.Fprintln(tw, "  KIND\tID\tCOMPLETED\tMETADATA\tREFS\tOUTSIDE\tFLAGS\tREFERENCES JOBS\tPATH")
		for _, ck := range j.Checkpoints {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", ck.Kind, ck.ID, ck.Completed.UTC().Format("2006-01-02 15:04:05Z"),
				humanBytes(ck.Size), ck.Refs, ck.Outside, strings.TrimSpace(strings.Trim(flags(ck.Pinned, ck.Protected), " []")), strings.Join(ck.ReferencesJobs, ","), ck.Dir)
		}
		tw.Flush()
	}
	if len(res.Jobs) == 0 {
		fmt.Fprintln(w, "no live checkpoints or savepoints")
	}
	for _, u := range res.Unparseable {
		fmt.Fprintf(w, "UNPARSEABLE %s: %s\n", u.Metadata, u.Error)
	}
}
