package main

import "github.com/urfave/cli/v2"

// versionCommand is a placeholder until its issue lands; it fails so nobody mistakes it for the real thing.
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:   "version",
		Usage:  "(not built yet)",
		Action: func(*cli.Context) error { return cli.Exit("ckguard version: not built yet", 2) },
	}
}
