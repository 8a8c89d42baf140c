package main

import "github.com/urfave/cli/v2"

// umountCommand is a placeholder until its issue lands; it fails so nobody mistakes it for the real thing.
func umountCommand() *cli.Command {
	return &cli.Command{
		Name:   "umount",
		Usage:  "(not built yet)",
		Action: func(*cli.Context) error { return cli.Exit("ckguard umount: not built yet", 2) },
	}
}
