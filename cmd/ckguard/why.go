package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/refindex"
)

func whyCommand() *cli.Command {
	return &cli.Command{
		Name:      "why",
		Usage:     "explain whether PATH may be deleted, and which checkpoints reference it",
		ArgsUsage: "PATH",
		Description: "PATH is a store key (flink/<job>/shared/<file>), a path under a local --store, or a URI as\n" +
			"written in _metadata (s3a://…, file:/…; mapped with --map). For a directory the answer covers\n" +
			"everything below it (rm -r). URIs outside the guarded store are reported as such.\n" +
			"Exit status: 0 allowed, 1 refused, 2 PATH is outside the guarded store (a URI no mapping ties to it,\n" +
			"an absolute path outside both the store and its mounts) or another usage error.\n\n" +
			"EXAMPLES:\n" +
			"   ckguard why --store /srv/flink/checkpoints --index /var/lib/ckguard/flink e3d8c0a9f1b24d6e8a7b5c3d1e0f9a8b/shared/49bcf761-d2e6-22b5-cece-b45a36dfa500\n" +
			"   ckguard why --store /srv/flink/checkpoints --index /var/lib/ckguard/flink --json e3d8c0a9f1b24d6e8a7b5c3d1e0f9a8b",
		Flags:  append(storeFlags(), policyFlags()...),
		Action: runWhy,
	}
}

func runWhy(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "want exactly one PATH (a store key, a path in the store or its mount, or a URI), got %d", c.NArg())
	}
	arg := c.Args().First()
	if filepath.IsAbs(arg) {
		// An absolute path names a local file: one outside the store and outside every ckguard mount of
		// it is no store object, and an answer about the key it would spell would be about another file.
		if _, ok := absStoreKey(c.String("store"), arg); !ok {
			return exitf(exitUsage, "ckguard why: %s is outside the store %s and outside every ckguard mount of it; give a path in the store or the mount, or a store key (relative, e.g. <job>/shared/<file>)", arg, c.String("store"))
		}
	}
	res, err := query(c, func(ctx context.Context, q refindex.Querier) (*refindex.WhyResult, error) {
		return q.Why(ctx, storeKey(c, arg))
	}, printWhy)
	if err != nil {
		return err
	}
	switch {
	case res.Outside:
		// Not a decision of this guard: the argument names something it does not guard (exit 2, as
		// a usage error), whatever references it.
		return cli.Exit(fmt.Sprintf("ckguard why: %s is not in the guarded store %s; this guard neither protects nor deletes it", res.Path, c.String("store")), exitUsage)
	case !res.Allow:
		return cli.Exit("", exitFound)
	}
	return nil
}

func printWhy(w io.Writer, res *refindex.WhyResult) {
	verdict := "ALLOWED"
	if !res.Allow {
		verdict = "REFUSED"
	}
	kind := "file"
	if res.IsDir {
		kind = "directory"
	}
	if !res.Exists {
		kind = "missing"
	}
	reason := string(res.Reason)
	if res.Outside {
		verdict, kind, reason = "OUTSIDE", "not in the guarded store", "not decided by this guard"
	}
	fmt.Fprintf(w, "%s  %s (%s): %s\nreason: %s  state: %s\n%s\n", verdict, displayKey(res.Path), kind, res.Op, reason, res.State, shown(res.Message))
	if len(res.Referencing) > 0 {
		fmt.Fprintf(w, "referenced by %s:\n", plural(res.RefCount, "live checkpoint or savepoint", "live checkpoints and savepoints"))
		for _, r := range res.Referencing {
			fmt.Fprintf(w, "  %s\n", shown(r))
		}
		if res.RefCount > len(res.Referencing) {
			fmt.Fprintf(w, "  … and %d more\n", res.RefCount-len(res.Referencing))
		}
	}
	if ck := res.Checkpoint; ck != nil {
		status := "live"
		if ck.Error != "" {
			status = "UNPARSEABLE: " + ck.Error
		}
		fmt.Fprintf(w, "this is the _metadata of %s %d of %s %s (%s, completed %s, %s)%s\n",
			ck.Kind, ck.ID, folderKind(ck.Kind == "savepoint"), displayKey(ck.Job), status, fmtTime(ck.Completed), plural(ck.Refs, "reference"), flags(ck.Pinned, ck.Protected))
	}
}

// folderKind names the folder of a checkpoint or savepoint: a savepoint's folder (state.savepoints.dir
// or a -savepointPath) is not a job.
func folderKind(savepoint bool) string {
	if savepoint {
		return "savepoint folder"
	}
	return "job folder"
}

func displayKey(k string) string {
	if k == "" {
		return "/"
	}
	return shown(k)
}

func flags(pinned, protected bool) string {
	var f []string
	if pinned {
		f = append(f, "pinned")
	}
	if protected {
		f = append(f, "newest checkpoint of an active job")
	}
	if len(f) == 0 {
		return ""
	}
	return " [" + strings.Join(f, ", ") + "]"
}
