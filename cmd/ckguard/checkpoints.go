package main

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/cmd/ckguard/graph"
	"github.com/ckguard/ckguard/refindex"
)

func checkpointsCommand() *cli.Command {
	return &cli.Command{
		Name:  "checkpoints",
		Usage: "list live checkpoints and savepoints per job folder, with sizes and the other jobs they reference",
		Description: "Per job folder: every live checkpoint and savepoint (a _metadata that exists) with its id, completion\n" +
			"time, the bytes of state its files hold, reference count, flags (pinned; active: the newest checkpoint of a\n" +
			"job active within --active-window) and the other job folders whose files it references (by the first 8\n" +
			"characters of their id; the heading names them in full): a restore lineage. Those folders must not be purged by name or age.\n\n" +
			"EXAMPLES:\n" +
			"   ckguard checkpoints --store /srv/flink/checkpoints --index /var/lib/ckguard/flink\n" +
			"   ckguard checkpoints --store /srv/flink/checkpoints --index /var/lib/ckguard/flink --job af8b2e4c6d8f0a1b3c5d7e9f1a2b4c6d --json\n" +
			"   ckguard checkpoints --store /srv/flink/checkpoints --index /var/lib/ckguard/flink --history",
		Flags: append(append(storeFlags(), policyFlags()...),
			&cli.StringFlag{Name: "job", Usage: "only this job folder (or its last path segments, e.g. the job id)"},
			&cli.BoolFlag{Name: "history", Usage: "list the metadata history instead: live and retired checkpoints, when each went, and whether restore-metadata can bring it back"}),
		Action: runCheckpoints,
	}
}

func runCheckpoints(c *cli.Context) error {
	if c.Bool("history") {
		return runHistory(c)
	}
	_, err := query(c, func(ctx context.Context, q refindex.Querier) (*refindex.CheckpointsResult, error) {
		res, err := q.Checkpoints(ctx, c.String("job"))
		if err != nil {
			return nil, err
		}
		return res, fillReferencedBytes(c, res)
	}, printCheckpoints)
	return err
}

// fillReferencedBytes sizes what each checkpoint references, from its _metadata and the store's
// listings (the index keeps no sizes). A checkpoint whose files cannot be sized gets -1 and a warning:
// the listing itself is still right.
func fillReferencedBytes(c *cli.Context, res *refindex.CheckpointsResult) error {
	refs, err := storeRefs(c, res)
	if err != nil {
		return err
	}
	sizes := graph.NewSizeCache(refs)
	log := cliLogger()
	for ji := range res.Jobs {
		j := &res.Jobs[ji]
		seen := map[string]int64{}
		failed := false
		for ci := range j.Checkpoints {
			ck := &j.Checkpoints[ci]
			rs, err := refs.Refs(c.Context, ck.Metadata)
			var n int64
			if err == nil {
				n, _, err = sizes.Bytes(c.Context, rs, seen)
			}
			if err != nil {
				log.Warn("cannot size the files a checkpoint references", "metadata", ck.Metadata, "err", err)
				ck.ReferencedBytes, failed = -1, true
				continue
			}
			ck.ReferencedBytes = n
		}
		j.ReferencedBytes = -1
		if !failed {
			j.ReferencedBytes = 0
			for _, n := range seen {
				j.ReferencedBytes += n
			}
		}
	}
	return nil
}

// sizeOrUnknown is humanBytes, or "?" for a size that could not be read (-1).
func sizeOrUnknown(n int64) string {
	if n < 0 {
		return "?"
	}
	return humanBytes(n)
}

func printCheckpoints(w io.Writer, res *refindex.CheckpointsResult) {
	for _, j := range res.Jobs {
		fmt.Fprintf(w, "%s %s: %s, %s, %s referenced, %s (%s of _metadata)", folderKind(j.Count == 0 && j.Savepoints > 0), displayKey(j.Job),
			plural(j.Count, "checkpoint"), plural(j.Savepoints, "savepoint"), sizeOrUnknown(j.ReferencedBytes), plural(j.References, "reference"), humanBytes(j.MetadataBytes))
		if len(j.ReferencesJobs) > 0 {
			fmt.Fprintf(w, "; references files of: %s", strings.Join(j.ReferencesJobs, ", "))
		}
		fmt.Fprintln(w)
		// One row per checkpoint, narrow enough for a terminal: the folder's own name (its job is in
		// the heading), bytes its files hold, and the other job folders it uses by their short id.
		tw := newTable(w)
		fmt.Fprintln(tw, "  KIND\tID\tCOMPLETED\tREFERENCED\tREFS\tFLAGS\tFOLDER\tALSO USES")
		for _, ck := range j.Checkpoints {
			refs := fmt.Sprint(ck.Refs)
			if ck.Outside > 0 {
				refs += fmt.Sprintf(" (%d outside)", ck.Outside)
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", ck.Kind, ck.ID, fmtTime(ck.Completed), sizeOrUnknown(ck.ReferencedBytes), refs,
				dash(shortFlags(ck.Pinned, ck.Protected)), path.Base(ck.Dir), dash(shortJobs(ck.ReferencesJobs)))
		}
		tw.Flush()
		for _, ck := range j.Checkpoints {
			if len(ck.InferredMaps) > 0 {
				fmt.Fprintf(w, "  %s: references mapped by %s (inferred: the store holds them at the same relative place)\n", ck.Dir, strings.Join(ck.InferredMaps, ", "))
			}
			if ck.Unmapped > 0 {
				fmt.Fprintf(w, "  UNMAPPED %s: %d references no --map ties to the store, e.g. %s; files that could be them are refused\n", ck.Dir, ck.Unmapped, ck.UnmappedURI)
			}
		}
	}
	if len(res.Jobs) == 0 {
		fmt.Fprintln(w, "no live checkpoints or savepoints")
	}
	for _, u := range res.Unparseable {
		fmt.Fprintf(w, "UNPARSEABLE %s: %s\n", u.Metadata, u.Error)
	}
}

// shortFlags is the FLAGS column: pinned; active (the newest checkpoint of a job active within
// --active-window).
func shortFlags(pinned, protected bool) string {
	var f []string
	if pinned {
		f = append(f, "pinned")
	}
	if protected {
		f = append(f, "active")
	}
	return strings.Join(f, ",")
}

// shortJobs names job folders by the first 8 characters of their last segment (a Flink job id is
// 32), the way git abbreviates commits; the heading line names them in full.
func shortJobs(jobs []string) string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		b := path.Base(j)
		if len(b) > 8 {
			b = b[:8]
		}
		out[i] = b
	}
	return strings.Join(out, ",")
}
