package main

import "github.com/urfave/cli/v2"

// indexCommand is a placeholder until its issue lands; it fails so nobody mistakes it for the real thing.
func indexCommand() *cli.Command {
	return &cli.Command{
		Name:   "index",
		Usage:  "(not built yet)",
		Action: func(*cli.Context) error { return cli.Exit("ckguard index: not built yet", 2) },
	}
}
