package main

import "github.com/urfave/cli/v2"

// checkpointsCommand is a placeholder until its issue lands; it fails so nobody mistakes it for the real thing.
func checkpointsCommand() *cli.Command {
	return &cli.Command{
		Name:   "checkpoints",
		Usage:  "(not built yet)",
		Action: func(*cli.Context) error { return cli.Exit("ckguard checkpoints: not built yet", 2) },
	}
}
