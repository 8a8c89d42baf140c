package main

import "github.com/urfave/cli/v2"

// orphansCommand is a placeholder until its issue lands; it fails so nobody mistakes it for the real thing.
func orphansCommand() *cli.Command {
	return &cli.Command{
		Name:   "orphans",
		Usage:  "(not built yet)",
		Action: func(*cli.Context) error { return cli.Exit("ckguard orphans: not built yet", 2) },
	}
}
