package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/fs/mountutil"
)

func umountCommand() *cli.Command {
	return &cli.Command{
		Name:      "umount",
		Usage:     "unmount a ckguard mount (the daemon then closes its index and exits)",
		ArgsUsage: "MOUNTPOINT",
		Description: "Unmounts and waits until the kernel no longer lists the mount. --lazy also clears the stale mount a\n" +
			"crashed daemon leaves behind (\"Transport endpoint is not connected\").\n\n" +
			"EXAMPLES:\n" +
			"   ckguard umount /mnt/flink-checkpoints\n" +
			"   ckguard umount --lazy /mnt/flink-checkpoints",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "lazy", Aliases: []string{"l"}, Usage: "detach even while files are open (also clears a stale mount of a crashed daemon)"},
			durationFlag("timeout", 10*time.Second, "wait this long for the mount to disappear"),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError(c, "want exactly one MOUNTPOINT, got %d", c.NArg())
			}
			mnt, err := filepath.Abs(c.Args().First())
			if err != nil {
				return err
			}
			mi, err := mountutil.Lookup(mnt)
			if err != nil {
				return err
			}
			if mi == nil {
				return cli.Exit(fmt.Sprintf("ckguard umount: %s is not mounted", mnt), exitUsage)
			}
			if !strings.HasPrefix(mi.FSType, "fuse.ckguard") && !c.Bool("lazy") {
				return cli.Exit(fmt.Sprintf("ckguard umount: %s is a %s mount, not ckguard's (use umount(8))", mnt, mi.FSType), exitUsage)
			}
			if err := mountutil.Unmount(mnt, c.Bool("lazy")); err != nil {
				return fmt.Errorf("%w (files still open on the mount? close them or use --lazy)", err)
			}
			deadline := time.Now().Add(c.Duration("timeout"))
			for time.Now().Before(deadline) {
				if mi, _ := mountutil.Lookup(mnt); mi == nil {
					return nil
				}
				time.Sleep(50 * time.Millisecond)
			}
			return fmt.Errorf("%s still mounted after %v", mnt, c.Duration("timeout"))
		},
	}
}
