package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/refindex"
)

// runHistory is `ckguard checkpoints --history`: the metadata history, live and retired.
func runHistory(c *cli.Context) error {
	job := c.String("job")
	_, err := query(c, func(ctx context.Context, q refindex.Querier) (*refindex.HistoryResult, error) {
		res, err := q.History(ctx, "")
		if err != nil {
			return nil, err
		}
		if job != "" {
			res.Entries = filterEntries(res.Entries, func(e refindex.HistoryEntry) bool {
				return e.Job == job || strings.HasSuffix(e.Job, "/"+job)
			})
		}
		return res, nil
	}, printHistory)
	return err
}

func filterEntries(in []refindex.HistoryEntry, keep func(refindex.HistoryEntry) bool) []refindex.HistoryEntry {
	out := []refindex.HistoryEntry{}
	for _, e := range in {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

func printHistory(w io.Writer, res *refindex.HistoryResult) {
	job := "\x00"
	retired := 0
	for _, e := range res.Entries {
		if e.Job != job {
			job = e.Job
			fmt.Fprintf(w, "%s:\n", displayKey(job))
		}
		state := "live"
		if !e.Retired.IsZero() {
			state = "retired " + fmtTime(e.Retired)
			retired++
		}
		cp := "copy kept: restore-metadata can bring it back"
		if e.SHA256 == "" {
			cp = "no copy: " + e.NoCopy
		}
		fmt.Fprintf(w, "  %s  %s id %d, completed %s, %s; %s; %s\n", displayKey(e.Metadata), e.Kind, e.ID, fmtTime(e.ModTime), humanBytes(e.Size), state, cp)
	}
	fmt.Fprintf(w, "%s (%d retired); copies %s of %s budget, at most %s each, retired kept %s\n", plural(len(res.Entries), "checkpoint"), retired,
		humanBytes(res.Bytes), humanBytes(res.Limits.MaxTotalBytes), humanBytes(res.Limits.MaxFileBytes), res.Limits.KeepRetired)
}

func restoreMetadataCommand() *cli.Command {
	return &cli.Command{
		Name:      "restore-metadata",
		Usage:     "put back a checkpoint's _metadata deleted outside the mount, from the index's metadata history",
		ArgsUsage: "CHECKPOINT",
		Description: "CHECKPOINT is the checkpoint's folder or its _metadata. The copy the index kept when it last saw the\n" +
			"checkpoint live is written back byte-identical, with its modification time and owner, only if nothing is at\n" +
			"that path (never overwriting), and indexed at once (by the running mount when one holds the index).\n" +
			"`ckguard checkpoints --history` lists what can be restored.\n\n" +
			"EXAMPLES:\n" +
			"   ckguard restore-metadata --store /srv/flink/checkpoints --index /var/lib/ckguard/flink af8b2e4c6d8f0a1b3c5d7e9f1a2b4c6d/chk-100274",
		Flags: storeFlags(),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError(c, "want exactly one CHECKPOINT (a checkpoint folder or its _metadata), got %d", c.NArg())
			}
			key := storeKey(c, c.Args().First())
			_, err := query(c, func(ctx context.Context, q refindex.Querier) (*refindex.RestoreResult, error) {
				return q.RestoreMetadata(ctx, key)
			}, func(w io.Writer, r *refindex.RestoreResult) {
				fmt.Fprintf(w, "restored %s (%s, sha256 %s, completed %s); indexed: the checkpoint is live again\n", r.Metadata, humanBytes(r.Size), r.SHA256, fmtTime(r.ModTime))
			})
			return err
		},
	}
}
