package main

import "github.com/urfave/cli/v2"

// verifyCommand is a placeholder until its issue lands; it fails so nobody mistakes it for the real thing.
func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:   "verify",
		Usage:  "(not built yet)",
		Action: func(*cli.Context) error { return cli.Exit("ckguard verify: not built yet", 2) },
	}
}
