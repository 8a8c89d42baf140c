package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/fs/control"
)

func debugCommand() *cli.Command {
	return &cli.Command{
		Name:  "debug",
		Usage: "diagnostics of a running mount (heap profile)",
		Subcommands: []*cli.Command{{
			Name:  "heap",
			Usage: "write the running mount's heap profile (for go tool pprof) to stdout",
			Description: "Asks the mount through its control socket (root or the mount's user only, like the queries;\n" +
				"the mount serves no profile anywhere else) for a heap profile, taken after a garbage collection\n" +
				"(--no-gc: as of the last one). Read it with `go tool pprof -top heap.pb.gz`.\n\n" +
				"EXAMPLES:\n" +
				"   ckguard debug heap --index /var/lib/ckguard/flink > heap.pb.gz\n" +
				"   ckguard debug heap --control-socket /run/ckguard/flink.sock > heap.pb.gz",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "index", EnvVars: []string{"CKGUARD_INDEX"}, Usage: "the mount's index directory (its control socket is INDEX/" + control.SocketName + ")"},
				&cli.StringFlag{Name: "control-socket", Usage: "the mount's control socket (instead of --index)"},
				&cli.BoolFlag{Name: "no-gc", Usage: "do not collect first (in-use figures as of the last collection)"},
			},
			Action: runDebugHeap,
		}},
	}
}

func runDebugHeap(c *cli.Context) error {
	sock := c.String("control-socket")
	if sock == "" {
		if c.String("index") == "" {
			return usageError(c, "want --index or --control-socket of the running mount")
		}
		dir, err := indexDir(c)
		if err != nil {
			return err
		}
		sock = control.DefaultSocket(dir)
	}
	cl, err := control.Dial(sock)
	if err != nil {
		return fmt.Errorf("control socket %s: %w (is the mount running?)", sock, err)
	}
	defer cl.Close()
	return cl.Heap(c.Context, os.Stdout, !c.Bool("no-gc"))
}
