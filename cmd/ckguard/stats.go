package main

import "github.com/urfave/cli/v2"

// statsCommand is a placeholder until its issue lands; it fails so nobody mistakes it for the real thing.
func statsCommand() *cli.Command {
	return &cli.Command{
		Name:   "stats",
		Usage:  "(not built yet)",
		Action: func(*cli.Context) error { return cli.Exit("ckguard stats: not built yet", 2) },
	}
}
