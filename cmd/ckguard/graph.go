package main

import "github.com/urfave/cli/v2"

// graphCommand is a placeholder until its issue lands; it fails so nobody mistakes it for the real thing.
func graphCommand() *cli.Command {
	return &cli.Command{
		Name:   "graph",
		Usage:  "(not built yet)",
		Action: func(*cli.Context) error { return cli.Exit("ckguard graph: not built yet", 2) },
	}
}
