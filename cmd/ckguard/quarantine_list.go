package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func quarantineListCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list the staged deletions: original path, size, when and by whom it was deleted",
		Description: "EXAMPLES:\n" +
			"   ckguard quarantine list --store /srv/flink/checkpoints --index /var/lib/ckguard/flink\n" +
			"   ckguard quarantine list --store /srv/flink/checkpoints --index /var/lib/ckguard/flink --json",
		Flags:  quarantineFlags(),
		Before: requireStore,
		Action: runQuarantineList,
	}
}

func runQuarantineList(c *cli.Context) error {
	if c.NArg() != 0 {
		return usageError(c, "takes no arguments, got %d", c.NArg())
	}
	svc, _, closeFn, err := openQuarantine(c, 0)
	if err != nil {
		return err
	}
	defer closeFn()
	r, err := svc.List(c.Context)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, r)
	}
	w := newTable(c.App.Writer)
	fmt.Fprintln(w, "DELETED\tCHANGE\tSIZE\tPATH\tBY\tENTRY")
	var total int64
	for _, e := range r.Entries {
		total += e.Size
		p := shown(e.Key())
		if e.VersionID != "" {
			p += " (version " + e.VersionID + ", under a delete marker)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\tuid %d (%s)\t%s\n", fmtTime(e.DeletedAt), e.Change(), humanBytes(e.Size), p, e.Decision.UID, shown(e.Decision.Comm), e.ID)
	}
	w.Flush()
	ttl := ""
	if r.TTL > 0 {
		ttl = "; the mount purges entries older than " + r.TTL.String()
	}
	fmt.Fprintf(c.App.Writer, "%s, %s in quarantine%s\n", plural(len(r.Entries), "entry", "entries"), humanBytes(total), ttl)
	for _, p := range r.Problems {
		fmt.Fprintf(c.App.ErrWriter, "ckguard: quarantine object %s (%s) is no complete entry: %s\n", p.ID, humanBytes(p.Size), p.Detail)
	}
	if len(r.Problems) > 0 {
		return cli.Exit("", exitFound)
	}
	return nil
}
