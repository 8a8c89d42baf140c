package main

import "github.com/urfave/cli/v2"

// whyCommand is a placeholder until its issue lands; it fails so nobody mistakes it for the real thing.
func whyCommand() *cli.Command {
	return &cli.Command{
		Name:   "why",
		Usage:  "(not built yet)",
		Action: func(*cli.Context) error { return cli.Exit("ckguard why: not built yet", 2) },
	}
}
