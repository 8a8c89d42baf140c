package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/verdict"
)

func quarantinePurgeCommand() *cli.Command {
	return &cli.Command{
		Name:      "purge",
		Usage:     "destroy staged deletions older than the TTL (the mount's --quarantine) that no live checkpoint references again",
		ArgsUsage: "[PATH ...]",
		Description: "Without PATH every entry is considered; with PATHs, the entries staged from those files or from below\n" +
			"those folders. An entry younger than the TTL is refused with the time it has left, and an entry a live\n" +
			"checkpoint references again is never purged (restore it instead); either makes the exit status 1. The\n" +
			"running mount purges the same way in the background after every sync.\n\n" +
			"EXAMPLES:\n" +
			"   ckguard quarantine purge --store /srv/flink/checkpoints --index /var/lib/ckguard/flink\n" +
			"   ckguard quarantine purge --store /srv/flink/checkpoints --index /var/lib/ckguard/flink --ttl 7d   # no mount running",
		Flags: quarantineFlags(
			durationFlag("ttl", defaultQuarantine, "when no mount holds the index: purge entries older than this (a running mount uses its --quarantine)"),
		),
		Before: requireStore,
		Action: runQuarantinePurge,
	}
}

func runQuarantinePurge(c *cli.Context) error {
	svc, viaMount, closeFn, err := openQuarantine(c, c.Duration("ttl"))
	if err != nil {
		return err
	}
	defer closeFn()
	if d, ok := svc.(*quarantine.Direct); ok && !viaMount {
		// No mount: the index is opened here (and synced) to tell which entries a live checkpoint
		// references again.
		q, qclose, err := openQuerier(c)
		if err != nil {
			return fmt.Errorf("cannot ask the index whether a live checkpoint references a staged object again, so nothing is purged: %w", err)
		}
		defer qclose()
		d.Referenced = func(ctx context.Context, key string) (bool, error) {
			w, err := q.Why(ctx, key)
			if err != nil {
				return false, err
			}
			if len(w.Referencing) > 0 || w.RefCount > 0 {
				return true, nil
			}
			if w.State != verdict.StateDeletable {
				return false, fmt.Errorf("the index says %s is %s: %s", key, w.State, w.Message)
			}
			return false, nil
		}
	}
	var ids []string
	if c.NArg() > 0 {
		l, err := svc.List(c.Context)
		if err != nil {
			return err
		}
		for _, a := range c.Args().Slice() {
			k := storeKey(c, a)
			n := 0
			for _, e := range l.Entries {
				if below(e.Key(), k) {
					ids = append(ids, e.ID)
					n++
				}
			}
			if n == 0 {
				return cli.Exit(fmt.Sprintf("ckguard quarantine purge: nothing from %s is in quarantine", k), exitFound)
			}
		}
	}
	r, err := svc.Purge(c.Context, ids)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, r); err != nil {
			return err
		}
	} else {
		var bytes int64
		for _, e := range r.Purged {
			bytes += e.Size
		}
		for _, k := range r.Kept {
			switch k.Reason {
			case "young":
				fmt.Fprintf(c.App.ErrWriter, "ckguard: refusing to purge %s: deleted %s, younger than the TTL; %s left\n", shown(k.Entry.Key()), fmtTime(k.Entry.DeletedAt), k.Left)
			default:
				fmt.Fprintf(c.App.ErrWriter, "ckguard: refusing to purge %s (%s): %s\n", shown(k.Entry.Key()), k.Reason, shown(k.Detail))
			}
		}
		fmt.Fprintf(c.App.Writer, "purged %s (%s), kept %d\n", plural(len(r.Purged), "entry", "entries"), humanBytes(bytes), len(r.Kept))
	}
	if len(r.Kept) > 0 {
		return cli.Exit("", exitFound)
	}
	return nil
}
