package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/hold"
	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/refindex"
)

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:  "stats",
		Usage: "summarise the index: job and savepoint folders, checkpoints, references, last sync, policy",
		Description: "Shows the store, the index directory and size, when the index last synced (a stale index makes the\n" +
			"guard refuse everything), counts of job folders, savepoint folders, checkpoints, savepoints, unparseable _metadata, references\n" +
			"and pins, and the policy in force.\n\n" +
			"EXAMPLES:\n" +
			"   ckguard stats --store /srv/flink/checkpoints --index /var/lib/ckguard/flink\n" +
			"   ckguard stats --store /srv/flink/checkpoints --index /var/lib/ckguard/flink --json",
		Flags:  append(storeFlags(), policyFlags()...),
		Action: runStats,
	}
}

func runStats(c *cli.Context) error {
	_, err := query(c, func(ctx context.Context, q refindex.Querier) (*refindex.StatsResult, error) {
		s, err := q.Stats(ctx)
		if err == nil {
			if s.PendingDeletes, _, err = pendingDeletes(s.IndexDir); err != nil {
				return nil, err
			}
			if hs, herr := hold.ReadStatus(s.IndexDir); herr == nil {
				s.Holds = &hs
			}
			if fs, ferr := guardd.ReadFleetStatus(s.IndexDir); ferr == nil {
				s.Fleet = &fs
			}
		}
		return s, err
	}, printStats)
	return err
}

func printStats(w io.Writer, s *refindex.StatsResult) {
	tw := newTable(w)
	last := "never"
	if !s.LastSync.IsZero() {
		last = fmt.Sprintf("%s (%s ago)", fmtTime(s.LastSync), duration.Format(time.Since(s.LastSync).Round(time.Second)))
	}
	rows := [][2]string{
		{"store", s.Store}, {"index", fmt.Sprintf("%s (schema %d, generation %d, %s on disk)", s.IndexDir, s.Schema, s.Generation, humanBytes(s.IndexBytes))},
		{"last sync", last}, {"job folders", fmt.Sprint(s.Jobs)}, {"savepoint folders", fmt.Sprint(s.SavepointFolders)},
		{"checkpoints", fmt.Sprint(s.Checkpoints)}, {"savepoints", fmt.Sprint(s.Savepoints)},
		{"unparseable _metadata", fmt.Sprintf("%d (%d damaged: protect only themselves; %d refusing in their folder; %d refusing every deletion)", s.Unparseable, s.DamagedMetadata, s.ConfinedMetadata, s.BlockingMetadata)},
		{"references", fmt.Sprint(s.References)},
		{"outside the guarded store", fmt.Sprint(s.OutsideReferences)}, {"directory handles", fmt.Sprint(s.DirectoryHandles)},
		{"pins", fmt.Sprint(s.Pins)},
		{"policy", fmt.Sprintf("--grace %s, --active-window %s, --max-staleness %s, --protect %v", s.Policy.Grace, s.Policy.ActiveWindow, s.Policy.MaxStaleness, s.Policy.Protect)},
	}
	if s.SyncError != "" {
		rows = append(rows, [2]string{"SYNC FAILED", s.SyncError})
	}
	for i, u := range s.UnknownSubtrees {
		if i == 10 {
			rows = append(rows, [2]string{"UNREADABLE", fmt.Sprintf("and %d more (`ckguard stats --json` lists them all)", len(s.UnknownSubtrees)-10)})
			break
		}
		scope := "refused: it, its ancestors' rmdir/rename, and what it may reference"
		if u.Confined {
			scope = "refused: it and its ancestors' rmdir/rename (owned by a user who wrote no indexed _metadata there)"
		}
		rows = append(rows, [2]string{"UNREADABLE", fmt.Sprintf("%s since %s: %s; %s", shown(u.Key), fmtTime(u.Since), u.Cause, scope)})
	}
	rows = append(rows, flinkStatsRows(s.Flink)...)
	if s.StoreClockBehind > 0 {
		rows = append(rows, [2]string{"STORE CLOCK BEHIND", fmt.Sprintf("by %s: file ages are measured by the store's clock; fix the clocks (NTP)", duration.Format(time.Duration(s.StoreClockBehind).Round(time.Second)))})
	}
	if s.PendingDeletes != nil {
		rows = append(rows, pendingRow(s.PendingDeletes))
	}
	for _, b := range s.BadMetadata {
		held := ""
		if b.HeldRefs {
			held = "; keeps its previous version's references while younger than --grace"
		}
		rows = append(rows, [2]string{"UNPARSEABLE", fmt.Sprintf("%s (%s, refuses %s%s): %s; remove it", shown(b.Metadata), orUnknown(b.Class), b.Scope, held, shown(b.Error))})
	}
	if hs, ok := s.Holds.(*hold.Status); ok {
		rows = append(rows, holdRow(hs))
	}
	if fs, ok := s.Fleet.(*guardd.FleetStatus); ok {
		for _, o := range fs.Old {
			rows = append(rows, [2]string{"OUTDATED MOUNT", fmt.Sprintf("%s (%s) runs ckguard %s on this store: %s (registry read %s)", o.Host, o.ID, o.Version, o.Why, fmtTime(fs.Checked))})
		}
	}
	if s.Stale {
		rows = append(rows, [2]string{"STALE", "every deletion is refused until the index is synced"})
	}
	if len(s.InferredMaps) > 0 {
		rows = append(rows, [2]string{"inferred maps", strings.Join(s.InferredMaps, ", ") + " (proved by the store; add them as --map to make them explicit)"})
	}
	if s.Unmapped != "" {
		rows = append(rows, [2]string{"UNMAPPED REFERENCES", fmt.Sprintf("%d: %s", s.UnmappedReferences, s.Unmapped)})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	tw.Flush()
}

func orUnknown(s string) string {
	if s == "" {
		return "unclassified"
	}
	return s
}
