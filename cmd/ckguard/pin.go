package main

import "github.com/urfave/cli/v2"

// pinCommand is a placeholder until its issue lands; it fails so nobody mistakes it for the real thing.
func pinCommand() *cli.Command {
	return &cli.Command{
		Name:   "pin",
		Usage:  "(not built yet)",
		Action: func(*cli.Context) error { return cli.Exit("ckguard pin: not built yet", 2) },
	}
}
