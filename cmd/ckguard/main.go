// Command ckguard guards Apache Flink checkpoint storage against deleting files that live checkpoints
// still reference. See README.md.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
)

// version and revision are set at link time by `make build` and `make release` (-X main.version=...,
// -X main.revision=...); revision is the fallback when the toolchain did not stamp the commit
// (-buildvcs=false, a build outside the git checkout).
var (
	version  = "dev"
	revision = ""
)

func newApp() *cli.App {
	app := &cli.App{
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
			jobsCommand(),
			orphansCommand(),
			verifyCommand(),
			latestCommand(),
			statsCommand(),
			holdCommand(),
			pinCommand(),
			fleetCommand(),
			quarantineCommand(),
			unpinCommand(),
			restoreMetadataCommand(),
			restoreLostCommand(),
			mountCommand(),
			umountCommand(),
			graphCommand(),
			demoCommand(),
			versionCommand(),
			debugCommand(),
		},
		// `ckguard` alone is a usage error (README "Exit codes"): the help, then exit 2.
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				_ = cli.ShowAppHelp(c)
				return cli.Exit("", exitUsage)
			}
			return cli.Exit(fmt.Sprintf("ckguard: no command %q; run `ckguard --help` for the list", c.Args().First()), exitUsage)
		},
		OnUsageError: onUsageError,
	}
	walkCommands(app.Commands, "", func(_ string, cmd *cli.Command) {
		cmd.OnUsageError = onUsageError
		if hasFlagNamed(cmd, "store") && cmd.Before == nil {
			cmd.Before = requireStore
		}
		if len(cmd.Subcommands) > 0 && cmd.Action == nil {
			// `ckguard index` alone is a usage error like `ckguard` alone: its help, then exit 2.
			cmd.Action = func(c *cli.Context) error {
				if c.NArg() == 0 {
					_ = cli.ShowSubcommandHelp(c)
					return cli.Exit("", exitUsage)
				}
				return usageError(c, "no subcommand %q", c.Args().First())
			}
		}
	})
	return app
}

// onUsageError turns a flag parse error into one line naming the command and its --help, exit 2
// (instead of the whole help followed by the error).
func onUsageError(c *cli.Context, err error, _ bool) error {
	// Go's flag package names flags with one dash; ckguard's help and README write two.
	return usageError(c, "%s", strings.ReplaceAll(err.Error(), " flag -", " flag --"))
}

// hasFlagNamed reports whether cmd defines flag name.
func hasFlagNamed(cmd *cli.Command, name string) bool {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

// walkCommands calls fn for every command and subcommand with its path ("index rebuild").
func walkCommands(cmds []*cli.Command, prefix string, fn func(path string, c *cli.Command)) {
	for _, c := range cmds {
		if c.Name == "help" {
			continue
		}
		p := strings.TrimSpace(prefix + " " + c.Name)
		fn(p, c)
		walkCommands(c.Subcommands, p, fn)
	}
}

// runApp is main without the process exit: the app on args, with flags after positional arguments
// accepted (interspersed).
func runApp(ctx context.Context, app *cli.App, args []string) error {
	return app.RunContext(ctx, interspersed(app, args))
}

func main() {
	statProbeChild() // a child of probeMounts stats one mountpoint and exits here
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runApp(ctx, newApp(), os.Args); err != nil {
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
