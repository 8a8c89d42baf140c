package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/internal/duration"
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
			"   ckguard quarantine purge --store /srv/flink/checkpoints --index /var/lib/ckguard/flink --ttl 7d   # no mount running\n" +
			"   ckguard quarantine purge --store /srv/flink/checkpoints --older-than 2h   # the disk is full: free space now\n\n" +
			"--older-than and --all purge before the TTL. Every purge is audited with its cause (quarantine-purge-ttl or\n" +
			"quarantine-purge-operator) and the requesting process: by the running mount in its audit log, or, when no\n" +
			"mount holds the index, by this command in --audit-log (the mount's default, INDEX/audit.jsonl); a purge\n" +
			"that cannot be audited is not done.",
		Flags: quarantineFlags(
			durationFlag("ttl", defaultQuarantine, "when no mount holds the index: purge entries older than this (a running mount uses its --quarantine)"),
			durationFlag("older-than", 0, "purge the entries deleted at least this long ago, before the TTL (to free space now; a running mount does it without a remount)"),
			&cli.BoolFlag{Name: "all", Usage: "purge every entry whatever its age (asks for confirmation on a terminal unless --yes)"},
			&cli.BoolFlag{Name: "yes", Usage: "with --all: do not ask"},
			&cli.StringFlag{Name: "audit-log", Usage: "when no mount holds the index: the audit log each purge is recorded in, as the mount's --audit-log (default INDEX/audit.jsonl)"},
		),
		Before: requireStore,
		Action: runQuarantinePurge,
	}
}

func runQuarantinePurge(c *cli.Context) error {
	all, olderThan := c.Bool("all"), c.Duration("older-than")
	if err := confirmPurge(c, all, olderThan); err != nil {
		return err
	}
	svc, viaMount, closeFn, err := openQuarantine(c, c.Duration("ttl"))
	if err != nil {
		return err
	}
	defer closeFn()
	if d, ok := svc.(*quarantine.Direct); ok && !viaMount {
		closeDirect, err := guardDirectPurge(c, d)
		if err != nil {
			return err
		}
		defer closeDirect()
	}
	ids, err := purgeIDsOfArgs(c, svc)
	if err != nil {
		return err
	}
	// Always PurgeWith, so that the audit record names who asked also for a purge past the TTL.
	r, err := svc.PurgeWith(c.Context, quarantine.PurgeRequest{IDs: ids, OlderThan: duration.D(olderThan), All: all, By: selfAsRequester()})
	if err != nil {
		return err
	}
	if err := printPurgeResult(c, r); err != nil {
		return err
	}
	if len(r.Kept) > 0 {
		return cli.Exit("", exitFound)
	}
	return nil
}

// confirmPurge checks the purge's flags; a purge of everything (--all) is done only with --yes or
// after the terminal's user confirmed it.
func confirmPurge(c *cli.Context, all bool, olderThan time.Duration) error {
	if all && olderThan > 0 {
		return cli.Exit("ckguard quarantine purge: give --all or --older-than, not both", exitUsage)
	}
	if !all || c.Bool("yes") {
		return nil
	}
	if !stdinIsTTY() {
		return cli.Exit("ckguard quarantine purge --all destroys every staged deletion for good and stdin is no terminal to ask: add --yes", exitUsage)
	}
	fmt.Fprint(c.App.ErrWriter, "purge EVERY quarantine entry for good (entries a live checkpoint references again stay)? [y/N] ")
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if a := strings.TrimSpace(strings.ToLower(line)); a != "y" && a != "yes" {
		return cli.Exit("ckguard quarantine purge: not confirmed, nothing purged", exitUsage)
	}
	return nil
}

// guardDirectPurge gives a purge without a mount what the mount would: the index, opened here (and
// synced) to tell which entries a live checkpoint references again, and the mount's audit log, with
// the same records the mount writes. A purge destroys data for good: one that cannot ask the index
// or be audited is not done. The returned close closes both.
func guardDirectPurge(c *cli.Context, d *quarantine.Direct) (closeAll func(), err error) {
	q, qclose, err := openQuerier(c)
	if err != nil {
		return nil, fmt.Errorf("cannot ask the index whether a live checkpoint references a staged object again, so nothing is purged: %w", err)
	}
	al, err := openPurgeAudit(c)
	if err != nil {
		qclose()
		return nil, err
	}
	d.Purged = guardd.PurgeRecorder(cliLogger(), al)
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
	return func() {
		if err := al.Close(); err != nil {
			fmt.Fprintf(c.App.ErrWriter, "ckguard: %v: the last purge records may be lost\n", err)
		}
		qclose()
	}, nil
}

// purgeIDsOfArgs is the entries below the PATH arguments (none: the purge is by age or --all); a PATH
// with nothing in quarantine fails the command before anything is purged.
func purgeIDsOfArgs(c *cli.Context, svc quarantine.Service) ([]string, error) {
	if c.NArg() == 0 {
		return nil, nil
	}
	l, err := svc.List(c.Context)
	if err != nil {
		return nil, err
	}
	var ids []string
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
			return nil, cli.Exit(fmt.Sprintf("ckguard quarantine purge: nothing from %s is in quarantine", k), exitFound)
		}
	}
	return ids, nil
}

// printPurgeResult prints what was purged and, on stderr, why each kept entry was kept (or all of it
// as JSON with --json).
func printPurgeResult(c *cli.Context, r *quarantine.PurgeResult) error {
	if c.Bool("json") {
		return printJSON(c.App.Writer, r)
	}
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
	return nil
}

// openPurgeAudit opens the audit log a purge without a mount records into: --audit-log, else the
// mount's default INDEX/audit.jsonl. Every record is fsynced before the next purge (few records, and
// each stands for data destroyed for good).
func openPurgeAudit(c *cli.Context) (*audit.Log, error) {
	p := c.String("audit-log")
	if p == "" {
		dir, err := indexDir(c)
		if err != nil {
			return nil, err
		}
		p = filepath.Join(dir, "audit.jsonl")
	}
	al, err := audit.Open(p, audit.Options{FsyncInterval: -1})
	if err != nil {
		return nil, fmt.Errorf("every purge is audited and %v, so nothing is purged: give --audit-log a file this user may append to (the mount's --audit-log)", err)
	}
	return al, nil
}

// selfAsRequester names this process for the audit record of an operator's purge.
func selfAsRequester() quarantine.Decision {
	comm := "ckguard"
	if b, err := os.ReadFile("/proc/self/comm"); err == nil {
		comm = strings.TrimSpace(string(b))
	}
	return quarantine.Decision{Op: "purge", Reason: "operator", PID: uint32(os.Getpid()), UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Comm: comm}
}

// stdinIsTTY reports whether standard input is a terminal someone can answer at (a character
// device such as /dev/null is not).
func stdinIsTTY() bool {
	_, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), unix.TCGETS)
	return err == nil
}
