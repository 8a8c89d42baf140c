package main

import "github.com/urfave/cli/v2"

// unpinCommand is a placeholder until its issue lands; it fails so nobody mistakes it for the real thing.
func unpinCommand() *cli.Command {
	return &cli.Command{
		Name:   "unpin",
		Usage:  "(not built yet)",
		Action: func(*cli.Context) error { return cli.Exit("ckguard unpin: not built yet", 2) },
	}
}
