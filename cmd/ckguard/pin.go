package main

import (
	"fmt"
	"os"
	"time"

	"github.com/ckguard/ckguard/cmd/ckguard/backends"
	"github.com/ckguard/ckguard/refindex/store/shared"

	"github.com/urfave/cli/v2"
)

func pinCommand() *cli.Command {
	return &cli.Command{
		Name:      "pin",
		Usage:     "protect a checkpoint or savepoint (its folder or _metadata) from retirement until unpinned",
		ArgsUsage: "PATH",
		Description: "A pinned _metadata cannot be deleted through the mount, so the checkpoint stays live and every file\n" +
			"it references stays protected, whatever its age: use it for savepoints someone may restore from.\n\n" +
			"EXAMPLES:\n" +
			"   ckguard pin --store /srv/flink/checkpoints --index /var/lib/ckguard/flink savepoints/savepoint-af8b2e-5e8c1f0a9b3d\n" +
			"   ckguard pin --store /srv/flink/checkpoints --index /var/lib/ckguard/flink af8b2e4c6d8f0a1b3c5d7e9f1a2b4c6d/chk-100274/_metadata",
		Flags: append(storeFlags(),
			&cli.StringFlag{Name: "why", Usage: "on a store with a shared state folder (--shared mounts): the reason, shown by `ckguard fleet` on every host"},
			durationFlag("expires", 0, "on a store with a shared state folder: the pin stops protecting this long from now (e.g. 7d); 0: until unpinned")),
		Action: func(c *cli.Context) error { return runPin(c, true) },
	}
}

func runPin(c *cli.Context, pin bool) error {
	if c.NArg() != 1 {
		return usageError(c, "want exactly one PATH (a checkpoint or savepoint folder, or its _metadata), got %d", c.NArg())
	}
	q, closeFn, err := openQuerier(c)
	if err != nil {
		return err
	}
	defer closeFn()
	key := storeKey(c, c.Args().First())
	var res any
	if pin {
		r, err := q.Pin(c.Context, key)
		if err != nil {
			return err
		}
		res = r
		if err := notePin(c, r.Checkpoint, true); err != nil {
			return err
		}
		if !c.Bool("json") {
			fmt.Fprintf(c.App.Writer, "pinned %s (since %s)\n", r.Checkpoint, fmtTime(r.Since))
		}
	} else {
		r, err := q.Unpin(c.Context, key)
		if err != nil {
			return err
		}
		res = r
		if err := notePin(c, r.Checkpoint, false); err != nil {
			return err
		}
		if !c.Bool("json") {
			fmt.Fprintf(c.App.Writer, "unpinned %s (not pinned now)\n", r.Checkpoint)
		}
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, res)
	}
	return nil
}

// notePin records who pinned or unpinned key, why and until when in the store's shared state area,
// when it has one (the mount or index has already set the pin there: this adds the person's note).
func notePin(c *cli.Context, key string, pinned bool) error {
	st, err := openStore(c)
	if err != nil {
		return err
	}
	area, err := backends.For(c.String("store")).SharedArea(c.Context, c.String("store"), st)
	if err != nil {
		// The pin itself is set (by the mount or the index); only the note is missing.
		fmt.Fprintf(c.App.ErrWriter, "note: %s is set, but who, why and the expiry could not be added to it: %v\n", key, err)
		return nil
	}
	if area == nil {
		if c.IsSet("why") || c.IsSet("expires") {
			fmt.Fprintln(c.App.ErrWriter, "note: --why and --expires are kept only on a store with a shared state folder (--shared mounts); this pin has neither")
		}
		return nil
	}
	host, _ := os.Hostname()
	want := shared.Pin{Key: key, Pinned: pinned, By: whoAmI()}
	if pinned {
		want.Why = c.String("why")
		if d := c.Duration("expires"); d > 0 {
			want.Expires = time.Now().Add(d).UTC().Truncate(time.Second)
		}
	}
	if _, err := shared.NewPins(area, host).Change(c.Context, want); err != nil {
		if c.IsSet("why") || c.IsSet("expires") {
			return fmt.Errorf("%s is set, but --why/--expires could not be recorded: %w", key, err)
		}
		fmt.Fprintf(c.App.ErrWriter, "note: %s is set, but who made it could not be recorded: %v\n", key, err)
	}
	return nil
}
