package main

import (
	"context"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/refindex"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "check that every object each live checkpoint references exists; exit 1 when any checkpoint is broken, 3 when it could not check everything",
		Flags: storeFlags(),
		Description: "Lists broken checkpoints and their missing files. Unparseable _metadata count as broken.\n" +
			"Run it after every cleanup; exit status 1 means a restore from a listed checkpoint would fail, 3 that\n" +
			"the answer cannot be trusted: references it could not check (no --map ties them to the store, and they\n" +
			"are not below an --external prefix) or an index that has not seen the store recently.\n\n" +
			"EXAMPLES:\n" +
			"   ckguard verify --store /srv/flink/checkpoints --index /var/lib/ckguard/flink\n" +
			"   ckguard verify --store s3://bucket/flink --index /var/lib/ckguard/s3 --json",
		Action: runVerify,
	}
}

func runVerify(c *cli.Context) error {
	res, err := query(c, func(ctx context.Context, q refindex.Querier) (*refindex.VerifyResult, error) {
		return q.Verify(ctx)
	}, printVerify)
	if err != nil {
		return err
	}
	switch {
	case len(res.Broken) > 0:
		return cli.Exit("", exitFound)
	case res.Untrusted != "":
		return exitf(exitUntrusted, "verify cannot be trusted: %s", res.Untrusted)
	case !res.OK:
		return cli.Exit("", exitFound)
	}
	return nil
}

func printVerify(w io.Writer, res *refindex.VerifyResult) {
	for _, b := range res.Broken {
		if b.Error != "" {
			fmt.Fprintf(w, "BROKEN %s: unparseable: %s\n", b.Metadata, b.Error)
			continue
		}
		fmt.Fprintf(w, "BROKEN %s: %s missing\n", b.Metadata, plural(b.MissingCount, "referenced object"))
		for _, m := range b.Missing {
			fmt.Fprintf(w, "  missing %s\n", m)
		}
		if b.MissingCount > len(b.Missing) {
			fmt.Fprintf(w, "  … and %d more\n", b.MissingCount-len(b.Missing))
		}
	}
	status := "OK"
	switch {
	case len(res.Broken) > 0:
		status = "FAILED"
	case res.Untrusted != "":
		status = "UNTRUSTED"
	case !res.OK:
		status = "FAILED"
	}
	fmt.Fprintf(w, "verify %s: %s checked, %s, %d broken, %s outside the guarded store not checked (%d unmapped, %d below --external)\n",
		status, plural(res.Checked, "checkpoint"), plural(res.Objects, "object"), len(res.Broken), plural(res.OutsideSkipped, "reference"), res.UnmappedSkipped, res.ExternalSkipped)
}
