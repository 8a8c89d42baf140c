package main

// Flags after positional arguments: `ckguard why --store S PATH --json` and `ckguard umount /mnt --lazy`
// work as ops people type them (urfave/cli, like Go's flag package, stops at the first positional
// argument). Everything after `--` stays positional.

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// interspersed moves the flags of the command args names (args[0] is the program) in front of its
// positional arguments, keeping each flag's value with it and the order of both. Arguments that do
// not name a command are returned unchanged.
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	cmds := app.Commands
	var cmd *cli.Command
	i := 1
	for ; i < len(args); i++ {
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(args[i]) {
				next = c
			}
		}
		if next == nil {
			break
		}
		cmd, cmds = next, next.Subcommands
	}
	if cmd == nil || len(cmd.Subcommands) > 0 || cmd.SkipFlagParsing {
		return args
	}
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		tv := true
		if d, ok := f.(cli.DocGenerationFlag); ok {
			tv = d.TakesValue()
		}
		for _, n := range f.Names() {
			takesValue[n] = tv
		}
	}
	out := append([]string{}, args[:i]...)
	var flags, pos []string
	rest := args[i:]
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		if a == "--" {
			pos = append(pos, rest[j+1:]...)
			if len(pos) > 0 && strings.HasPrefix(pos[0], "-") {
				// Keep the separator so a positional that starts with a dash stays positional.
				return append(append(append(out, flags...), "--"), pos...)
			}
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if takesValue[name] && j+1 < len(rest) {
			j++
			flags = append(flags, rest[j])
		}
	}
	return append(append(out, flags...), pos...)
}
