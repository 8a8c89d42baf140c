package main

import "github.com/urfave/cli/v2"

func unpinCommand() *cli.Command {
	return &cli.Command{
		Name:      "unpin",
		Usage:     "remove a pin set with `ckguard pin`",
		ArgsUsage: "PATH",
		Flags:     storeFlags(),
		Action:    func(c *cli.Context) error { return runPin(c, false) },
	}
}
