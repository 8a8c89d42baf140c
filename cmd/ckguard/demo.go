package main

import "github.com/urfave/cli/v2"

// demoCommand is a placeholder until its issue lands; it fails so nobody mistakes it for the real thing.
func demoCommand() *cli.Command {
	return &cli.Command{
		Name:   "demo",
		Usage:  "(not built yet)",
		Action: func(*cli.Context) error { return cli.Exit("ckguard demo: not built yet", 2) },
	}
}
