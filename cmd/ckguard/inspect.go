package main

import "github.com/urfave/cli/v2"

// inspectCommand is a placeholder until its issue lands; it fails so nobody mistakes it for the real thing.
func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:   "inspect",
		Usage:  "(not built yet)",
		Action: func(*cli.Context) error { return cli.Exit("ckguard inspect: not built yet", 2) },
	}
}
