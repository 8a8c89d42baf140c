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
		code := 1
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
