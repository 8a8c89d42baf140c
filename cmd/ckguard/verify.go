package main

import (
	"context"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/fs/lostfound"
	"github.com/ckguard/ckguard/refindex"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "check that every object each live checkpoint references exists; exit 1 when any checkpoint is broken, 3 when it could not check everything",
		Flags: append(storeFlags(), drillFlags()...),
		Description: "Lists broken checkpoints and their missing files. Unparseable _metadata are listed (UNPARSEABLE) and make it exit 3.\n" +
			"Run it after every cleanup; exit status 1 means a restore from a listed checkpoint would fail, 3 that\n" +
			"the answer cannot be trusted: references it could not check (no --map ties them to the store, and they\n" +
			"are not below an --external prefix) or an index that has not seen the store recently.\n" +
			"--deep is the restorability drill: every referenced file must also be readable and at least as large\n" +
			"as its handle says (a segment's offset + length); --read reads every byte (at --read-rate) and reports MB/s.\n" +
			"The drill re-reads each live _metadata from the store and opens the index itself (not through a mount).\n\n" +
			"EXAMPLES:\n" +
			"   ckguard verify --store /srv/flink/checkpoints --index /var/lib/ckguard/flink\n" +
			"   ckguard verify --store s3://bucket/flink --index /var/lib/ckguard/s3 --json\n" +
			"   ckguard verify --deep --store /srv/flink/checkpoints --index /var/lib/ckguard/flink\n" +
			"   ckguard verify --read --read-rate 200MiB --store s3://bucket/flink --index /var/lib/ckguard/s3",
		Action: runVerify,
	}
}

func runVerify(c *cli.Context) error {
	if c.Bool("deep") || c.Bool("read") {
		return runDrill(c)
	}
	res, err := query(c, func(ctx context.Context, q refindex.Querier) (*verifyOutput, error) {
		v, err := settledVerify(ctx, q)
		if err != nil {
			return nil, err
		}
		if unsettled(v) && v.Untrusted == "" {
			v.Untrusted, v.OK = unsettledWhy(v), false
		}
		out := &verifyOutput{VerifyResult: v}
		if len(v.Broken) > 0 {
			// Where each missing object can come back from (S3 versions, HDFS snapshots): looked up
			// after the index answered, by this command, with read requests only.
			r, err := restorableFor(c, v)
			if err != nil {
				out.RestorableErr = err.Error()
			}
			out.Restorable = r
		}
		return out, nil
	}, printVerifyOutput)
	if err != nil {
		return err
	}
	return verifyExit("verify", res.VerifyResult)
}

// verifyOutput is verify's answer with, for each missing object, where it can be restored from.
type verifyOutput struct {
	*refindex.VerifyResult
	Restorable    map[string]lostfound.Candidate `json:"restorable,omitempty"`
	RestorableErr string                         `json:"restorable_error,omitempty"`
}

func printVerifyOutput(w io.Writer, o *verifyOutput) {
	printVerifyWith(w, o.VerifyResult, o.Restorable)
	if o.RestorableErr != "" {
		fmt.Fprintf(w, "restorable versions not looked up: %s\n", shown(o.RestorableErr))
	}
}

// verifyExit is the exit status of a verify: 1 when a checkpoint is broken, else 3 when something
// could not be checked (never green on what was skipped), 0 when everything was checked and is there.
func verifyExit(what string, res *refindex.VerifyResult) error {
	switch {
	case len(res.Broken) > 0:
		return cli.Exit("", exitFound)
	case res.Untrusted != "":
		return exitf(exitUntrusted, "%s cannot be trusted: %s", what, res.Untrusted)
	case !res.OK:
		return cli.Exit("", exitFound)
	}
	return nil
}

func printVerify(w io.Writer, res *refindex.VerifyResult) { printVerifyWith(w, res, nil) }

// printVerifyWith prints a verify, naming for each missing object in rest where it can be restored
// from.
func printVerifyWith(w io.Writer, res *refindex.VerifyResult, rest map[string]lostfound.Candidate) {
	nrest := 0
	for _, b := range res.Broken {
		if b.Error != "" {
			fmt.Fprintf(w, "BROKEN %s: unparseable: %s\n", shown(b.Metadata), shown(b.Error))
			continue
		}
		if len(b.Short)+len(b.Unreadable) > 0 {
			fmt.Fprintf(w, "BROKEN %s: %s missing, %d too short, %d unreadable\n", shown(b.Metadata), plural(b.MissingCount, "referenced object"), len(b.Short), len(b.Unreadable))
		} else {
			fmt.Fprintf(w, "BROKEN %s: %s missing\n", shown(b.Metadata), plural(b.MissingCount, "referenced object"))
		}
		for _, s := range b.Short {
			fmt.Fprintf(w, "  short %s: %d bytes, its handles need at least %d\n", shown(s.Path), s.Size, s.Expected)
		}
		for _, u := range b.Unreadable {
			fmt.Fprintf(w, "  unreadable %s: %s\n", shown(u.Path), shown(u.Error))
		}
		for _, m := range b.Missing {
			cand, ok := rest[m]
			switch {
			case !ok:
				fmt.Fprintf(w, "  missing %s\n", shown(m))
			case cand.Restorable:
				nrest++
				fmt.Fprintf(w, "  missing %s: restorable from %s\n", shown(m), shown(cand.Describe()))
			default:
				fmt.Fprintf(w, "  missing %s: %s\n", shown(m), shown(cand.Describe()))
			}
		}
		if b.MissingCount > len(b.Missing) {
			fmt.Fprintf(w, "  … and %d more\n", b.MissingCount-len(b.Missing))
		}
	}
	for _, u := range res.Unparseable {
		fmt.Fprintf(w, "UNPARSEABLE %s (%s, refuses %s): %s\n", shown(u.Metadata), orUnknown(u.Class), u.Scope, shown(u.Error))
	}
	for _, m := range res.RetiredDuringCheck {
		fmt.Fprintf(w, "retired while verifying (its _metadata is gone from the store, so it is no longer live): %s\n", shown(m))
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
	if nrest > 0 {
		fmt.Fprintf(w, "%s restorable: `ckguard restore-lost` lists them, `ckguard restore-lost --apply` restores them\n", plural(nrest, "missing object"))
	}
	fmt.Fprintf(w, "verify %s: %s checked, %s, %d broken, %s outside the guarded store not checked (%d unmapped, %d below --external)\n",
		status, plural(res.Checked, "checkpoint"), plural(res.Objects, "object"), len(res.Broken), plural(res.OutsideSkipped, "reference"), res.UnmappedSkipped, res.ExternalSkipped)
}
