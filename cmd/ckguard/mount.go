package main

import "github.com/urfave/cli/v2"

// mountCommand is a placeholder until its issue lands; it fails so nobody mistakes it for the real thing.
func mountCommand() *cli.Command {
	return &cli.Command{
		Name:   "mount",
		Usage:  "(not built yet)",
		Action: func(*cli.Context) error { return cli.Exit("ckguard mount: not built yet", 2) },
	}
}
