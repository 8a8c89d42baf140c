package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/cmd/ckguard/backends"
	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/shared"
)

// quarantineCommand groups list, restore and purge of the deletions a mount with --quarantine staged.
func quarantineCommand() *cli.Command {
	return &cli.Command{
		Name:  "quarantine",
		Usage: "list, restore or purge the deletions a mount with --quarantine staged in the store",
		Description: "A mount with --quarantine moves every file it lets go into the store's quarantine folder (invisible\n" +
			"through the mount) instead of destroying it. These commands go through the running mount when one holds\n" +
			"the index (a restored _metadata is indexed at once), else they work on the store directly.",
		Subcommands: []*cli.Command{quarantineListCommand(), quarantineRestoreCommand(), quarantinePurgeCommand()},
	}
}

// quarantineFlags are the flags every quarantine subcommand takes.
func quarantineFlags(extra ...cli.Flag) []cli.Flag {
	return append(append(locationFlags(), jsonFlag(),
		&cli.StringFlag{Name: "control-socket", Usage: "the running mount's query socket; its quarantine socket is beside it (default: INDEX/" + control.SocketName + ")"},
	), extra...)
}

// openQuarantine returns the quarantine service for a command: the running mount's when its socket
// answers, else the store's quarantine folder opened directly (ttl is then the purge age).
func openQuarantine(c *cli.Context, ttl time.Duration) (quarantine.Service, bool, func() error, error) {
	dir, err := indexDir(c)
	if err != nil {
		return nil, false, nil, err
	}
	sock := c.String("control-socket")
	explicit := sock != ""
	if !explicit {
		sock = control.DefaultSocket(dir)
	}
	qsock := guardd.QuarantineSocket(sock)
	if _, err := os.Stat(qsock); err == nil || explicit {
		q, err := control.DialQuarantine(qsock)
		if err == nil {
			return q, true, q.Close, nil
		}
		if explicit {
			return nil, false, nil, fmt.Errorf("quarantine socket %s: %w", qsock, err)
		}
	}
	if _, err := os.Stat(sock); err == nil {
		if q, err := control.DialQuerier(sock); err == nil {
			q.Close()
			return nil, false, nil, fmt.Errorf("the mount holding index %s runs without --quarantine: it has no quarantine to list, restore or purge", dir)
		}
	}
	s := c.String("store")
	area, closeFn, err := backends.For(s).OpenQuarantine(c, s)
	if err != nil {
		return nil, false, nil, err
	}
	return claimed(c, &quarantine.Direct{Area: area, TTL: ttl}), false, closeFn, nil
}

// claimed makes d's restores claim each entry in the store's shared area when it has one (--shared
// mounts made it), as a --shared mount does, so that the CLI on a store no mount holds neither
// restores what a mount restores at the same time nor leaves the mounts unable to say who restored it.
func claimed(c *cli.Context, d *quarantine.Direct) *quarantine.Direct {
	area, err := openSharedArea(c)
	if err != nil || area == nil {
		return d
	}
	host, _ := os.Hostname()
	rc := &shared.RestoreClaims{C: area, Mount: shared.CLIClaimer + whoAmI(), Host: host,
		Warn: func(msg string, args ...any) { fmt.Fprintln(c.App.ErrWriter, "ckguard: "+msg, args) }}
	d.RestoreOne = func(ctx context.Context, id string) (quarantine.Entry, error) {
		es, err := d.Area.List(ctx)
		if err != nil {
			return quarantine.Entry{}, err
		}
		for _, e := range es {
			if e.ID != id {
				continue
			}
			finish, err := rc.Claim(ctx, id, e.Key())
			if err != nil {
				return quarantine.Entry{}, err
			}
			got, err := d.Area.Restore(ctx, id)
			finish(err)
			return got, err
		}
		return quarantine.Entry{}, rc.Explain(ctx, id, fmt.Errorf("quarantine entry %s: %w", id, quarantine.ErrNoEntry))
	}
	return d
}
