package main

import "github.com/urfave/cli/v2"

func unpinCommand() *cli.Command {
	return &cli.Command{
		Name:      "unpin",
		Usage:     "remove a pin set with `ckguard pin`",
		ArgsUsage: "PATH",
		Description: "The checkpoint or savepoint is then protected only by the usual rules (references, --active-window).\n" +
			"Unpinning what is not pinned succeeds (exit 0), as pinning what is pinned does.\n\n" +
			"EXAMPLES:\n" +
			"   ckguard unpin --store /srv/flink/checkpoints --index /var/lib/ckguard/flink savepoints/savepoint-af8b2e-5e8c1f0a9b3d",
		Flags:  storeFlags(),
		Action: func(c *cli.Context) error { return runPin(c, false) },
	}
}
