// Command ckguard guards Apache Flink checkpoint storage against deleting files that live checkpoints
// still reference. See README.md.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

// version is set at link time by `make release` (-X main.version=...).
var version = "dev"

func newApp() *cli.App {
	return &cli.App{
		Name:                 "ckguard",
		Usage:                "make Flink checkpoint storage safe to clean up",
		Version:              version,
		EnableBashCompletion: true,
		CommandNotFound: func(c *cli.Context, name string) {
			fmt.Fprintf(c.App.ErrWriter, "ckguard: no command %q; run `ckguard --help` for the list\n", name)
			cli.OsExiter(2)
		},
		// One file per command; each file returns its *cli.Command.
		Commands: []*cli.Command{
			inspectCommand(),
			indexCommand(),
			whyCommand(),
			checkpointsCommand(),
			orphansCommand(),
			verifyCommand(),
			statsCommand(),
			pinCommand(),
			unpinCommand(),
			mountCommand(),
			umountCommand(),
			graphCommand(),
			demoCommand(),
			versionCommand(),
		},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newApp().RunContext(ctx, os.Args); err != nil {
		// Exit codes: 0 ok, 1 a problem found (verify red, why refused: commands say so with cli.Exit),
		// 2 could not do the job (bad usage, store or index unreachable): any other error.
		code := 2
		if ec, ok := err.(cli.ExitCoder); ok {
			code = ec.ExitCode()
		}
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(os.Stderr, "ckguard:", msg)
		}
		slog.Debug("exit", "code", code)
		os.Exit(code)
	}
}
